//go:build unix && !linux

package bench

import "syscall"

// commandSysProcAttr puts a worker command in a process group of its own, for the bench to
// signal all of it.
func commandSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
