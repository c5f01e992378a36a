// Package sandbox starts programs contained by the operating system: their memory, CPU time,
// file sizes and open files capped, their file access confined to what a Policy lists, no
// network, and killed with everything they started.
//
// On Linux the containment is built from what the kernel offers an unprivileged process:
// resource limits (setrlimit), Landlock for file access and TCP, a network namespace of its own
// where the kernel allows one, a process group of its own, and death with the thread that
// started it. What this kernel enforces is reported by Supported. Elsewhere only the process
// group holds, and Supported says so.
package sandbox

import (
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"
)

// Policy is what a contained program may do.
type Policy struct {
	// Read lists files and directories it may read (a directory: everything beneath it).
	Read []string
	// ReadWrite lists directories it may read and write: make, write, truncate and remove
	// files and directories beneath them.
	ReadWrite []string
	// Exec lists files it may execute and read (a program, the libraries it loads). Start adds
	// the running program and every library it has loaded, so that it can start itself.
	Exec []string
	// Network lets it reach the network. Without it, the program gets a network namespace of
	// its own (nothing but a loopback interface that is down) where the kernel allows one, and
	// Landlock refuses it every TCP bind and connect where the kernel has Landlock's network
	// rules.
	Network bool
	Limits  Limits
}

// Limits are the operating system's caps on one contained process. A zero field sets no cap.
type Limits struct {
	// Memory caps its address space in bytes (RLIMIT_AS): an allocation past it fails. A
	// program built with the race detector maps terabytes to start and cannot start under any
	// cap: once it has started, cap it at what it has mapped (Process.Usage) plus what it may
	// still allocate.
	Memory uint64
	// CPU caps its CPU time (RLIMIT_CPU, in whole seconds, rounded up): past it, the kernel
	// kills it with SIGXCPU (and SIGKILL a second later).
	CPU time.Duration
	// FileSize caps the size of each file it writes (RLIMIT_FSIZE).
	FileSize uint64
	// Files caps the files it may hold open at once (RLIMIT_NOFILE).
	Files uint64
}

// Support is what the operating system enforces of a Policy here.
type Support struct {
	// Limits: the resource limits hold.
	Limits bool
	// Landlock is the kernel's Landlock ABI version (0: none): 1 and up confine files, 4 and up
	// TCP too, 6 and up abstract Unix sockets and signals.
	Landlock int
	// NetworkNamespace: a program without Network gets a network namespace of its own.
	NetworkNamespace bool
}

// String says what holds, for a log line.
func (s Support) String() string {
	out := "limits"
	if !s.Limits {
		out = "no limits"
	}
	if s.Landlock > 0 {
		out += ", landlock v" + strconv.Itoa(s.Landlock)
	} else {
		out += ", no landlock"
	}
	if s.NetworkNamespace {
		out += ", network namespace"
	} else {
		out += ", no network namespace"
	}
	return out
}

// Process is a program started by Start.
type Process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // cmd.Wait's, once done is closed

	mu     sync.Mutex
	killed bool
}

// Pid is the program's process id.
func (proc *Process) Pid() int { return proc.cmd.Process.Pid }

// Killed says whether Kill was called.
func (proc *Process) Killed() bool {
	proc.mu.Lock()
	defer proc.mu.Unlock()
	return proc.killed
}

// Done is closed once the program has exited and been reaped.
func (proc *Process) Done() <-chan struct{} { return proc.done }

// Wait waits for the program to exit and answers its state (and cmd.Wait's error).
func (proc *Process) Wait() (*os.ProcessState, error) {
	<-proc.done
	return proc.cmd.ProcessState, proc.err
}

// Usage is what a program has used so far.
type Usage struct {
	AddressSpace uint64        // bytes mapped now
	CPU          time.Duration // CPU time, user and system
}
