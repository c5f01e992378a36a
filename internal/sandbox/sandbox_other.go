//go:build !linux

package sandbox

import (
	"errors"
	"os"
	"os/exec"
	"sync"
	"time"
)

// Process is a program started by Start.
type Process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error

	mu     sync.Mutex
	killed bool
}

// Start starts cmd. Outside Linux nothing of p is enforced (Supported says so): the program
// runs with the server's rights.
func Start(cmd *exec.Cmd, p Policy) (*Process, error) {
	if cmd.Stdin == nil || cmd.Stdout == nil || cmd.Stderr == nil {
		return nil, errors.New("sandbox: Stdin, Stdout and Stderr must be set")
	}
	if cmd.Env == nil {
		cmd.Env = []string{}
	}
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

// Pid is the program's process id.
func (proc *Process) Pid() int { return proc.cmd.Process.Pid }

// SetLimits does nothing outside Linux.
func (proc *Process) SetLimits(Limits) error { return nil }

// CapGrowth does nothing outside Linux.
func (proc *Process) CapGrowth(uint64) error { return nil }

// Usage is what a program has used so far.
type Usage struct {
	AddressSpace uint64
	CPU          time.Duration
}

// Usage knows nothing outside Linux.
func (proc *Process) Usage() (Usage, error) { return Usage{}, nil }

// Kill kills the program.
func (proc *Process) Kill() {
	proc.mu.Lock()
	proc.killed = true
	proc.mu.Unlock()
	select {
	case <-proc.done:
	default:
		proc.cmd.Process.Kill()
	}
}

// Killed says whether Kill was called.
func (proc *Process) Killed() bool {
	proc.mu.Lock()
	defer proc.mu.Unlock()
	return proc.killed
}

// Done is closed once the program has exited.
func (proc *Process) Done() <-chan struct{} { return proc.done }

// Wait waits for the program to exit.
func (proc *Process) Wait() (*os.ProcessState, error) {
	<-proc.done
	return proc.cmd.ProcessState, proc.err
}

// RestrictThread does nothing outside Linux.
func RestrictThread(Policy) error { return nil }

// Supported: nothing is enforced outside Linux.
func Supported() Support { return Support{} }
