//go:build !unix

package sandbox

import (
	"os"
	"syscall"
)

// sysProcAttr is nil: this system has neither process groups nor users to switch to.
func sysProcAttr(Policy) *syscall.SysProcAttr { return nil }

// kill kills the program.
func kill(p *os.Process) { p.Kill() }
