//go:build unix && !linux

package sandbox

import (
	"os"
	"syscall"
)

// sysProcAttr puts the program in a process group of its own, as p.Credential when set.
func sysProcAttr(p Policy) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true}
	if c := p.Credential; c != nil {
		// An empty, non-nil Groups drops the supplementary groups of the server.
		a.Credential = &syscall.Credential{Uid: c.Uid, Gid: c.Gid, Groups: []uint32{}}
	}
	return a
}

// kill kills the program's process group.
func kill(p *os.Process) { syscall.Kill(-p.Pid, syscall.SIGKILL) }
