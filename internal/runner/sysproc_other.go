//go:build unix && !linux

package runner

import "syscall"

// HideFromSameUser does nothing on this system.
func HideFromSameUser() error { return nil }

// TiedToParent is nil on this system: the kernel cannot signal a child when its parent dies.
func TiedToParent(sig syscall.Signal) *syscall.SysProcAttr { return nil }
