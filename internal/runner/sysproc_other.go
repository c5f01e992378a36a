//go:build unix && !linux

package runner

import "syscall"

// sysProcAttr puts the child in a process group of its own, under cred when set.
func sysProcAttr(cred *Credential) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true}
	if cred != nil {
		// An empty, non-nil Groups drops the supplementary groups of the wrapper.
		a.Credential = &syscall.Credential{Uid: cred.Uid, Gid: cred.Gid, Groups: []uint32{}}
	}
	return a
}

// HideFromSameUser does nothing on this system.
func HideFromSameUser() error { return nil }

// TiedToParent is nil on this system: the kernel cannot signal a child when its parent dies.
func TiedToParent(sig syscall.Signal) *syscall.SysProcAttr { return nil }
