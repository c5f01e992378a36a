package runner

import "syscall"

// HideFromSameUser marks this process not dumpable (prctl PR_SET_DUMPABLE 0): its
// /proc/PID/{environ,mem,fd,...} then belong to root and processes of the same user can neither
// read them nor ptrace it. It matters when children run as the wrapper's own user.
func HideFromSameUser() error {
	const prSetDumpable = 4
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetDumpable, 0, 0); e != 0 {
		return e
	}
	return nil
}

// TiedToParent is the SysProcAttr of a helper process (not a task) that is to get sig when this
// process dies.
func TiedToParent(sig syscall.Signal) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: sig}
}
