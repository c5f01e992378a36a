package sandbox

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// trampolineEnv, in a process's environment, makes it the trampoline of a contained program:
// before anything else of it runs, init confines the process, then replaces it with the program
// (or, as the init of a PID namespace, starts it).
const trampolineEnv = "BATON_SANDBOX_TRAMPOLINE"

// trampolineEnviron is the trampoline's whole environment besides its spec: one Go thread to
// run it, and no second's sleep at exit when it is built with the race detector.
var trampolineEnviron = []string{"GOMAXPROCS=1", "GORACE=atexit_sleep_ms=0"}

// trampolineSpec is what a trampoline is told: the program, and how to contain it.
type trampolineSpec struct {
	Path   string   `json:"path"`
	Args   []string `json:"args"`
	Env    []string `json:"env"`
	Policy Policy   `json:"policy"`
	// Init makes the trampoline the init of a PID namespace: it starts the trampoline proper
	// (this spec, less Init) as its child, and tells how the program ended on file descriptor
	// Files, while passing the descriptors below it on.
	Init  bool `json:"init,omitempty"`
	Files int  `json:"files,omitempty"`
}

func init() {
	raw, ok := os.LookupEnv(trampolineEnv)
	if !ok {
		return
	}
	if raw == probeSpec {
		os.Exit(0)
	}
	var spec trampolineSpec
	err := json.Unmarshal([]byte(raw), &spec)
	switch {
	case err != nil:
		err = fmt.Errorf("read the trampoline's spec: %w", err)
	case spec.Init:
		os.Exit(runInit(spec))
	default:
		err = trampoline(spec)
	}
	fmt.Fprintf(os.Stderr, "sandbox: %v\n", err)
	os.Exit(126)
}

// trampoline confines this process as spec says and replaces it with spec's program; it
// returns only if it could not.
func trampoline(spec trampolineSpec) error {
	// The main thread carries the domain and the filter into the program: execve keeps the
	// calling thread's credentials, Landlock's domain among them, and its seccomp filter, and
	// ends every other thread.
	runtime.LockOSThread()
	p := spec.Policy
	if spec.Path == selfExe {
		exe, err := ownFiles()
		if err != nil {
			return err
		}
		p.Exec = append(p.Exec, exe...)
	}
	if _, err := os.Stat(loaderCache); err == nil {
		p.Read = append(p.Read, loaderCache)
	}
	filter, err := seccompProgram()
	if err != nil {
		return err
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("sandbox: no_new_privs: %w", err)
	}
	if err := restrict(p, true); err != nil {
		return err
	}
	// The limits last: the fewer threads and bytes this runtime may still want, the better.
	if err := setLimits(0, p.Limits, true); err != nil {
		return err
	}
	if err := installSeccomp(filter); err != nil {
		return err
	}
	return syscall.Exec(spec.Path, spec.Args, spec.Env)
}

// selfExe names the running program's own file, whatever has become of its path since.
const selfExe = "/proc/self/exe"

// Start starts cmd contained by p: its limits and its confinement are in place before the
// first instruction of cmd's program runs.
//
// cmd's Stdin, Stdout and Stderr must be set (to pipes, files or writers): Start opens no file
// for them. cmd.Env is all the environment the program gets. Start sets cmd.SysProcAttr and
// changes cmd.Path, cmd.Args and cmd.Env: cmd first starts this very program as a trampoline (as
// p.Credential, in a process group of its own, in user, PID and network namespaces of its own
// where the kernel allows them, killed if the server dies), which sets the limits on itself,
// confines itself with Landlock and seccomp, and replaces itself with cmd's program (execve),
// which keeps them all. In a PID namespace the trampoline first starts itself again as the
// namespace's init (see runInit), which then runs the program. p's paths beneath /proc/self are
// the program's own. A program that is this one (cmd.Path "/proc/self/exe") may execute itself
// and the libraries it loads.
//
// A goroutine locked to an OS thread starts the trampoline and waits for it: the kernel kills
// the trampoline (Pdeathsig) when the thread that started it ends, so that thread lives as long
// as the program does.
func Start(cmd *exec.Cmd, p Policy) (*Process, error) {
	if cmd.Stdin == nil || cmd.Stdout == nil || cmd.Stderr == nil {
		return nil, errors.New("sandbox: Stdin, Stdout and Stderr must be set")
	}
	user, pid := namespaces()
	spec := trampolineSpec{Path: cmd.Path, Args: cmd.Args, Env: cmd.Env, Policy: p, Init: pid && !p.NoPIDNamespace}
	if spec.Env == nil {
		spec.Env = []string{} // nothing of the server's environment
	}
	netns := !p.Network && len(p.ConnectPorts) == 0 && (user || netnsUsable())
	attr := sysProcAttr(p, user, spec.Init, netns)
	var status *os.File
	if spec.Init {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("sandbox: %w", err)
		}
		defer w.Close()
		status = r
		spec.Files = 3 + len(cmd.ExtraFiles)
		cmd.ExtraFiles = append(cmd.ExtraFiles, w)
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		status.Close()
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	cmd.Path = selfExe
	cmd.Args = []string{"baton-sandbox"}
	cmd.Env = append([]string{trampolineEnv + "=" + string(raw)}, trampolineEnviron...)
	cmd.SysProcAttr = attr
	proc := &Process{cmd: cmd, done: make(chan struct{}), init: spec.Init}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: see above
		if err := cmd.Start(); err != nil {
			started <- fmt.Errorf("sandbox: start %s: %w", spec.Path, err)
			close(proc.done)
			return
		}
		started <- nil
		proc.err = cmd.Wait()
		if status != nil {
			proc.report = readReport(status)
		}
		close(proc.done)
	}()
	if err := <-started; err != nil {
		status.Close()
		return nil, err
	}
	return proc, nil
}

// readReport reads what an init told of the program's end, and closes r: nil if it told
// nothing (it was killed, or failed before the program started).
func readReport(r *os.File) *initReport {
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, 1<<10))
	var rep initReport
	if err != nil || len(b) == 0 || json.Unmarshal(b, &rep) != nil {
		return nil
	}
	return &rep
}

// SetLimits sets the program's limits (prlimit), each of l's non-zero fields; Limits.Memory
// caps its address space as a whole. A limit may be lowered at any time; raising one needs
// privileges the server may not have. Under an init, the program is out of reach: Start's
// Policy.Limits are its limits.
func (proc *Process) SetLimits(l Limits) error {
	if proc.init {
		return errUnderInit
	}
	return setLimits(proc.cmd.Process.Pid, l, false)
}

var errUnderInit = errors.New("sandbox: the program runs under an init in a PID namespace of its own (Policy.NoPIDNamespace reaches it)")

// setLimits sets l's non-zero fields as the limits of process pid (0: this one), and with
// noCore, no core dumps.
func setLimits(pid int, l Limits, noCore bool) error {
	set := func(name string, resource int, cur, max uint64) error {
		if err := unix.Prlimit(pid, resource, &unix.Rlimit{Cur: cur, Max: max}, nil); err != nil {
			return fmt.Errorf("sandbox: %s limit of process %d: %w", name, pid, err)
		}
		return nil
	}
	var errs []error
	if noCore {
		errs = append(errs, set("core", unix.RLIMIT_CORE, 0, 0))
	}
	if l.Memory > 0 {
		errs = append(errs, set("memory", unix.RLIMIT_AS, l.Memory, l.Memory))
	}
	if l.CPU > 0 {
		// The soft limit sends SIGXCPU, the hard one a second later SIGKILL.
		s := uint64(math.Ceil(l.CPU.Seconds()))
		errs = append(errs, set("CPU", unix.RLIMIT_CPU, s, s+1))
	}
	if l.FileSize > 0 {
		errs = append(errs, set("file size", unix.RLIMIT_FSIZE, l.FileSize, l.FileSize))
	}
	if l.Files > 0 {
		errs = append(errs, set("open files", unix.RLIMIT_NOFILE, l.Files, l.Files))
	}
	if l.Processes > 0 {
		errs = append(errs, set("processes", unix.RLIMIT_NPROC, l.Processes, l.Processes))
	}
	return errors.Join(errs...)
}

// userHZ is the unit of the CPU times of /proc/PID/stat: 1/100 s on every Linux.
const userHZ = 100

// Usage reads what the program has used so far (its /proc/PID/stat). Under an init, the
// program is out of reach, and Usage says so.
func (proc *Process) Usage() (Usage, error) {
	if proc.init {
		return Usage{}, errUnderInit
	}
	pid := proc.cmd.Process.Pid
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Usage{}, fmt.Errorf("sandbox: usage of process %d: %w", pid, err)
	}
	// The fields after the command, which is in parentheses and may hold anything: utime and
	// stime are the line's 14th and 15th fields, vsize its 23rd.
	rest := b[bytes.LastIndexByte(b, ')')+1:]
	f := strings.Fields(string(rest))
	if len(f) < 21 {
		return Usage{}, fmt.Errorf("sandbox: usage of process %d: a stat of %d fields", pid, len(f))
	}
	var u Usage
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	vsize, err3 := strconv.ParseUint(f[20], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return Usage{}, fmt.Errorf("sandbox: usage of process %d: %w", pid, err)
	}
	u.AddressSpace = vsize
	u.CPU = time.Duration(utime+stime) * time.Second / userHZ
	return u, nil
}

// Kill kills the program and everything in its process group (SIGKILL); under an init, the
// init, and with it everything in its PID namespace. It may be called at any time, more than
// once.
func (proc *Process) Kill() {
	proc.mu.Lock()
	proc.killed = true
	proc.mu.Unlock()
	select {
	case <-proc.done:
		return
	default:
	}
	syscall.Kill(-proc.cmd.Process.Pid, syscall.SIGKILL)
}

// RestrictThread confines the calling OS thread, and every thread and process it starts from
// now on, to p's file access and network (its Limits and Exec are not used): a domain nested in
// any it already has, so it can only narrow. The caller must have locked its goroutine to the
// thread (runtime.LockOSThread) and never unlock it. A program that runs untrusted work on one
// thread, e.g. a C library whose own threads it starts from that thread, confines that work
// further than its process is.
func RestrictThread(p Policy) error {
	if landlockABI() == 0 {
		return nil
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("sandbox: no_new_privs: %w", err)
	}
	return restrict(p, false)
}

// Supported says what this kernel enforces, for this process.
func Supported() Support {
	user, pid := namespaces()
	return Support{Limits: true, Landlock: landlockABI(), Seccomp: seccompUsable(),
		NetworkNamespace: user || netnsUsable(), UserNamespace: user, PIDNamespace: pid}
}

// loaderCache is the dynamic loader's cache, which it reads to find a program's libraries.
const loaderCache = "/etc/ld.so.cache"

// ownFiles are the files mapped into this process that it was started from: its program and
// the shared libraries the dynamic loader mapped (their real paths, which Landlock checks).
func ownFiles() ([]string, error) {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return nil, fmt.Errorf("sandbox: read this process's maps: %w", err)
	}
	defer f.Close()
	seen := map[string]bool{}
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 6 || !strings.HasPrefix(fields[5], "/") || !strings.Contains(fields[1], "x") {
			continue // not code: anonymous, [heap], [stack], "(deleted)", or a mapped data file
		}
		if p := fields[5]; !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("sandbox: read this process's maps: %w", err)
	}
	return out, nil
}
