//go:build !unix

package runner

import (
	"context"
	"errors"
	"runtime"
	"syscall"
)

var errUnsupported = errors.New("runner: running task processes needs a Unix system, not " + runtime.GOOS)

// Run is not supported on this system.
func Run(ctx context.Context, s Spec) (*Result, error) { return nil, errUnsupported }

// LookupChild is not supported on this system.
func LookupChild(name string) (*Credential, error) { return nil, errUnsupported }

// HideFromSameUser does nothing on this system.
func HideFromSameUser() error { return nil }

// CheckPrivate is not supported on this system.
func CheckPrivate(path string, cred *Credential) error { return errUnsupported }

// TiedToParent is nil on this system.
func TiedToParent(sig syscall.Signal) *syscall.SysProcAttr { return nil }

// ReadChildFile is not supported on this system.
func ReadChildFile(path string, cred *Credential, max int64) ([]byte, error) {
	return nil, errUnsupported
}
