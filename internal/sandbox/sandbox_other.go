//go:build !linux

package sandbox

import (
	"errors"
	"os/exec"
)

// Start starts cmd in a process group of its own, as p.Credential where the system has users.
// Nothing else of p is enforced outside Linux (Supported says so): the program runs with the
// server's rights otherwise.
func Start(cmd *exec.Cmd, p Policy) (*Process, error) {
	if cmd.Stdin == nil || cmd.Stdout == nil || cmd.Stderr == nil {
		return nil, errors.New("sandbox: Stdin, Stdout and Stderr must be set")
	}
	if cmd.Env == nil {
		cmd.Env = []string{}
	}
	cmd.SysProcAttr = sysProcAttr(p)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	proc := &Process{cmd: cmd, done: make(chan struct{})}
	go func() {
		proc.err = cmd.Wait()
		close(proc.done)
	}()
	return proc, nil
}

// SetLimits does nothing outside Linux.
func (proc *Process) SetLimits(Limits) error { return nil }

// Usage knows nothing outside Linux.
func (proc *Process) Usage() (Usage, error) { return Usage{}, nil }

// Kill kills the program, and its process group where the system has them.
func (proc *Process) Kill() {
	proc.mu.Lock()
	proc.killed = true
	proc.mu.Unlock()
	select {
	case <-proc.done:
	default:
		kill(proc.cmd.Process)
	}
}

// RestrictThread does nothing outside Linux.
func RestrictThread(Policy) error { return nil }

// Supported: nothing is enforced outside Linux but a process group.
func Supported() Support { return Support{} }
