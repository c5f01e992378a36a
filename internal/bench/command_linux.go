package bench

import "syscall"

// commandSysProcAttr puts a worker command in a process group of its own, for the bench to
// signal all of it, and has it get SIGTERM should the bench die.
func commandSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
