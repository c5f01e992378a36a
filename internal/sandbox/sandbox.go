// Package sandbox starts programs contained by the operating system: their memory, CPU time,
// processes, file sizes and open files capped, no core dumps, their file access confined to what
// a Policy lists, their network cut or held to a few TCP ports, the system calls that reach
// beyond a process refused, and killed with everything they started.
//
// On Linux the containment is built from what the kernel offers an unprivileged process, each
// layer where the kernel has it (Supported says which, Support.Level sums them up):
//
//   - resource limits (setrlimit), RLIMIT_CORE 0 among them;
//   - Landlock: files by path, TCP by port (ABI 4), abstract Unix sockets and signals kept
//     within the sandbox (ABI 6);
//   - a seccomp filter that refuses ptrace, namespaces, mounts, BPF, keyrings, kernel modules,
//     the clock and a few more (see seccomp_linux.go);
//   - a user namespace that maps only the program's own user and group, and a PID namespace of
//     its own with an init (see init_linux.go) that forwards signals and takes everything the
//     program started down with it;
//   - a network namespace of its own (nothing but a loopback interface that is down) unless the
//     program may reach the network or some ports;
//   - a process group of its own, and death with the thread that started it.
//
// Elsewhere only the process group (and the user, on other Unix systems) holds, and Supported
// says so.
package sandbox

import (
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Policy is what a contained program may do.
type Policy struct {
	// Read lists files and directories it may read (a directory: everything beneath it).
	Read []string
	// ReadWrite lists files and directories it may read and write (a directory: make, write,
	// truncate and remove files and directories beneath it).
	ReadWrite []string
	// Exec lists files and directories it may execute and read (a program, the libraries it
	// loads, a directory of them). Start adds the running program and every library it has
	// loaded when the program is this one (Path "/proc/self/exe"), so that it can start itself.
	Exec []string
	// Network lets it reach the network. Without it, and without ConnectPorts, the program gets
	// a network namespace of its own (nothing but a loopback interface that is down) where the
	// kernel allows one, and Landlock refuses it every TCP bind and connect where the kernel
	// has Landlock's network rules.
	Network bool
	// ConnectPorts, without Network, are the TCP ports it may connect to; it may bind none.
	// The program then keeps the server's network (it has to reach something there, a server
	// on loopback say), and only Landlock's network rules (ABI 4 and up) hold it to these
	// ports: on any address, since Landlock tells connections apart by port alone. UDP is not
	// restricted (DNS goes on working). Without those rules nothing restricts its network.
	ConnectPorts []uint16
	Limits       Limits
	// Credential, when set, is the user and group the program runs as, with no supplementary
	// groups; the server must be root to set one other than its own. The trampoline (this
	// program, re-executed) already runs as that user: its file must be executable by it.
	Credential *Credential
	// NoPIDNamespace keeps the program in the server's PID namespace with no init between
	// them: the trampoline replaces itself with the program, so that Process.Pid is the
	// program's own and SetLimits and Usage act on it. What it started is then killed only
	// through its process group, which a process can leave.
	NoPIDNamespace bool
}

// Credential is a user and group to run a program as.
type Credential struct {
	Uid, Gid uint32
}

// Limits are the operating system's caps on one contained process. A zero field sets no cap.
// Whatever the Limits, a contained program dumps no core (RLIMIT_CORE 0): its memory is not
// to be left on disk.
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
	// Processes caps the processes and threads of its user (RLIMIT_NPROC): a fork past it
	// fails. The kernel counts every process of the user's (real) uid, not only the program's,
	// and not at all for root: in a user namespace of the program's own, the namespace's alone
	// (its init's few threads among them); in the server's, every process of that user on the
	// host, other programs run as that user included.
	Processes uint64
}

// Process is a program started by Start.
type Process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // cmd.Wait's, once done is closed

	// init says the program runs under an init in a PID namespace of its own: cmd's process is
	// that init. Once done is closed, report is what the init told of the program's end (nil if
	// it could not tell: it was killed, and the program with it).
	init   bool
	report *initReport

	mu     sync.Mutex
	killed bool
}

// initReport is what an init tells its parent once the program it ran has ended.
type initReport struct {
	Status    syscall.WaitStatus `json:"status"`
	Leftovers bool               `json:"leftovers"`
}

// Pid is the process id of what Start started: the program itself, or, under an init in a PID
// namespace, that init, which leads the process group and whose death kills the program.
func (proc *Process) Pid() int { return proc.cmd.Process.Pid }

// Killed says whether Kill was called.
func (proc *Process) Killed() bool {
	proc.mu.Lock()
	defer proc.mu.Unlock()
	return proc.killed
}

// Done is closed once the program has exited and been reaped.
func (proc *Process) Done() <-chan struct{} { return proc.done }

// Wait waits for the process Start started to exit and answers its state (and cmd.Wait's
// error): under an init, the init's. Status is the program's own.
func (proc *Process) Wait() (*os.ProcessState, error) {
	<-proc.done
	return proc.cmd.ProcessState, proc.err
}

// Status waits for the program to end and answers how it did: its exit status, or the signal
// that killed it. Under an init it is what the init saw of the program, unless the init was
// killed first (SIGKILL, which takes the whole namespace down): then the program was killed
// with it, and Status says SIGKILL.
func (proc *Process) Status() syscall.WaitStatus {
	<-proc.done
	if proc.report != nil {
		return proc.report.Status
	}
	ws, _ := proc.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ws
}

// Leftovers waits for the program to end and says whether processes it started were still
// running then, under its init: they were killed with the PID namespace. Without an init it
// is false: what the program left is in its process group, for the caller to find.
func (proc *Process) Leftovers() bool {
	<-proc.done
	return proc.report != nil && proc.report.Leftovers
}

// Usage is what a program has used so far.
type Usage struct {
	AddressSpace uint64        // bytes mapped now
	CPU          time.Duration // CPU time, user and system
}
