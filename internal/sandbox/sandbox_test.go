//go:build linux

package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The test binary is also the contained program: started with childEnv set, it does what the
// variable says, prints the outcome and exits (see TestMain).
const childEnv = "BATON_SANDBOX_TEST_CHILD"

func TestMain(m *testing.M) {
	if action := os.Getenv(childEnv); action != "" {
		os.Exit(child(action, os.Getenv(childEnv+"_ARG")))
	}
	os.Exit(m.Run())
}

// spun keeps the spinning loop from being optimized away.
var spun int

// child runs one action and prints "ok" or "denied: <error>".
func child(action, arg string) int {
	var err error
	switch action {
	case "read":
		_, err = os.ReadFile(arg)
	case "write":
		err = os.WriteFile(arg, []byte("x"), 0o600)
	case "connect":
		var c net.Conn
		if c, err = net.DialTimeout("tcp", arg, 2*time.Second); err == nil {
			c.Close()
		}
	case "env":
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, childEnv) && !strings.HasPrefix(kv, "GORACE=") {
				err = fmt.Errorf("%.60s", kv)
			}
		}
	case "ready-alloc":
		io.ReadAll(os.Stdin) // until the parent has set the limits
		fallthrough
	case "alloc":
		var n int
		fmt.Sscan(arg, &n)
		b := make([]byte, n)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
	case "spin":
		for n := 0; ; n++ { // until the CPU limit ends it
			spun = n
		}
	case "sleep":
		time.Sleep(time.Hour)
	case "ptrace":
		err = syscall.PtraceAttach(os.Getppid())
	case "unshare":
		err = syscall.Unshare(syscall.CLONE_NEWNET)
	case "clone-namespace":
		cmd := exec.Command("/proc/self/exe")
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUTS}
		err = cmd.Run()
	case "personality":
		var p uint64
		fmt.Sscan(arg, &p)
		if _, _, e := syscall.RawSyscall(syscall.SYS_PERSONALITY, uintptr(p), 0, 0); e != 0 {
			err = e
		}
	case "term":
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGTERM)
		fmt.Println("ready")
		<-sigs
		fmt.Println("terminated")
		return 3
	case "die":
		syscall.Kill(os.Getpid(), syscall.SIGTERM) // Go's runtime dies of it
		time.Sleep(time.Hour)
	case "leave":
		// A process of its own that outlives it: this program again, sleeping, arg in its
		// command line.
		cmd := exec.Command("/proc/self/exe", arg)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		cmd.Env = []string{childEnv + "=sleep"}
		err = cmd.Start()
	}
	if err != nil {
		fmt.Println("denied:", err)
		return 0
	}
	fmt.Println("ok")
	return 0
}

// start runs action contained by p and answers the process and what it prints; its stdin is
// closed once the test ends or calls go.
func start(t *testing.T, p Policy, action, arg string) (proc *Process, out *syncBuffer, goOn func()) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	out = &syncBuffer{}
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = []string{childEnv + "=" + action, childEnv + "_ARG=" + arg, "GORACE=atexit_sleep_ms=0"}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = r, out, out
	proc, err = Start(cmd, p)
	r.Close()
	if err != nil {
		w.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close(); proc.Kill(); proc.Wait() })
	return proc, out, func() { w.Close() }
}

// syncBuffer is what a program writes, read while it writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func outcome(t *testing.T, p Policy, action, arg string) string {
	t.Helper()
	proc, out, _ := start(t, p, action, arg)
	select {
	case <-proc.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("%s %s did not end", action, arg)
	}
	return strings.TrimSpace(out.String())
}

func needLandlock(t *testing.T) {
	if landlockABI() == 0 {
		t.Skip("this kernel has no Landlock: file access is not confined here")
	}
}

func TestStartConfinesFilesToThePolicy(t *testing.T) {
	needLandlock(t)
	readable, writable, secret := t.TempDir(), t.TempDir(), t.TempDir()
	for _, f := range []string{filepath.Join(readable, "a"), filepath.Join(secret, "s"), filepath.Join(writable, "w")} {
		if err := os.WriteFile(f, []byte("data"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p := Policy{Read: []string{readable}, ReadWrite: []string{writable}}
	for _, c := range []struct {
		action, arg, want string
	}{
		{"read", filepath.Join(readable, "a"), "ok"},
		{"read", filepath.Join(writable, "w"), "ok"},
		{"write", filepath.Join(writable, "new"), "ok"},
		{"read", filepath.Join(secret, "s"), "denied"},
		{"read", "/etc/passwd", "denied"},
		{"write", filepath.Join(readable, "new"), "denied"},
		{"write", filepath.Join(secret, "new"), "denied"},
		{"write", "/tmp/baton-sandbox-escape", "denied"},
	} {
		if got := outcome(t, p, c.action, c.arg); !strings.HasPrefix(got, c.want) {
			t.Errorf("%s %s: %q, want %s", c.action, c.arg, got, c.want)
		}
	}
	if _, err := os.Stat("/tmp/baton-sandbox-escape"); err == nil {
		os.Remove("/tmp/baton-sandbox-escape")
		t.Error("a contained program wrote outside its policy")
	}
}

func TestStartCutsTheNetwork(t *testing.T) {
	if landlockABI() < 4 && !netnsUsable() {
		t.Skip("this kernel has neither Landlock's network rules nor network namespaces for this process")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	if got := outcome(t, Policy{Network: true}, "connect", l.Addr().String()); got != "ok" {
		t.Fatalf("with Network, connect: %q", got)
	}
	if got := outcome(t, Policy{}, "connect", l.Addr().String()); !strings.HasPrefix(got, "denied") {
		t.Errorf("without Network, connect: %q, want denied", got)
	}
}

// A cap set once the program started counts from what it had mapped: what the race detector's
// runtime maps to start (terabytes) is not counted against what its work may allocate.
func TestSetLimitsCapsMemoryFromWhatTheProgramMapped(t *testing.T) {
	for _, c := range []struct {
		size int
		ok   bool
	}{{1 << 20, true}, {2 << 30, false}} {
		proc, out, goOn := start(t, Policy{Network: true, NoPIDNamespace: true}, "ready-alloc", fmt.Sprint(c.size))
		u, err := proc.Usage()
		if err != nil {
			t.Fatal(err)
		}
		if err := proc.SetLimits(Limits{Memory: u.AddressSpace + 1<<30}); err != nil {
			t.Fatal(err)
		}
		goOn()
		state, _ := proc.Wait()
		got := out.String()
		if c.ok && (!state.Success() || !strings.Contains(got, "ok")) {
			t.Errorf("%d bytes under a 1 GiB cap: %s %q", c.size, state, got)
		}
		// The runtime fails the allocation: "out of memory" (with the race detector, "too many
		// address space collisions").
		if !c.ok && (state.Success() || strings.Contains(got, "ok") || !strings.Contains(got, "fatal error")) {
			t.Errorf("%d bytes under a 1 GiB cap: %s %.200q, want a failed allocation", c.size, state, got)
		}
	}
}

// Limits hold from the program's first instruction: the trampoline sets them on itself.
func TestStartCapsMemoryFromTheStart(t *testing.T) {
	if raceBuild() {
		t.Skip("a program built with the race detector cannot start under a memory cap")
	}
	p := Policy{Network: true, Limits: Limits{Memory: 1 << 30}}
	if got := outcome(t, p, "alloc", "1048576"); got != "ok" {
		t.Errorf("1 MiB under a 1 GiB cap: %q", got)
	}
	if got := outcome(t, p, "alloc", fmt.Sprint(2<<30)); !strings.Contains(got, "out of memory") {
		t.Errorf("2 GiB under a 1 GiB cap: %.200q, want out of memory", got)
	}
}

func raceBuild() bool {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range info.Settings {
		if s.Key == "-race" && s.Value == "true" {
			return true
		}
	}
	return false
}

// The program cannot see the trampoline's instructions, nor the server's environment.
func TestStartGivesTheProgramOnlyItsEnvironment(t *testing.T) {
	t.Setenv("BATON_TEST_SERVER_SECRET", "TOPSECRET")
	if got := outcome(t, Policy{Network: true}, "env", ""); got != "ok" {
		t.Errorf("the program's environment: %q", got)
	}
}

func TestStartCapsCPUTime(t *testing.T) {
	proc, _, _ := start(t, Policy{Network: true, Limits: Limits{CPU: time.Second}}, "spin", "")
	select {
	case <-proc.Done():
	case <-time.After(60 * time.Second):
		t.Fatal("a program past its CPU limit still runs")
	}
	ws := proc.Status()
	if !ws.Signaled() || (ws.Signal() != syscall.SIGXCPU && ws.Signal() != syscall.SIGKILL) {
		t.Errorf("ended with status %#x, want killed by SIGXCPU or SIGKILL", ws)
	}
	if proc.Killed() {
		t.Error("Killed says Kill was called")
	}
}

func TestKillEndsTheProgramAtOnce(t *testing.T) {
	proc, _, _ := start(t, Policy{Network: true}, "sleep", "")
	start := time.Now()
	proc.Kill()
	select {
	case <-proc.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a killed program still runs")
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Kill took %v", d)
	}
	if !proc.Killed() {
		t.Error("Killed does not say Kill was called")
	}
	proc.Kill() // again: nothing happens
}

// RestrictThread confines the calling thread only: another goroutine's thread reads on.
func TestRestrictThreadConfinesOnlyTheCallingThread(t *testing.T) {
	needLandlock(t)
	allowed, other := t.TempDir(), t.TempDir()
	a, o := filepath.Join(allowed, "a"), filepath.Join(other, "o")
	for _, f := range []string{a, o} {
		if err := os.WriteFile(f, []byte("data"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	type result struct{ a, o error }
	done := make(chan result)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := RestrictThread(Policy{Read: []string{allowed}}); err != nil {
			done <- result{a: err, o: err}
			return
		}
		_, ea := os.ReadFile(a)
		_, eo := os.ReadFile(o)
		done <- result{ea, eo}
	}()
	r := <-done
	if r.a != nil {
		t.Errorf("the restricted thread cannot read its own file: %v", r.a)
	}
	if !errors.Is(r.o, os.ErrPermission) {
		t.Errorf("the restricted thread read another file: %v", r.o)
	}
	if _, err := os.ReadFile(o); err != nil {
		t.Errorf("another thread lost its access: %v", err)
	}
}

func TestSupportedSaysWhatHolds(t *testing.T) {
	s := Supported()
	if !s.Limits {
		t.Error("resource limits do not hold on Linux")
	}
	t.Logf("here: %s", s)
}

// With ConnectPorts the program keeps the network, and reaches only those ports.
func TestStartHoldsTheProgramToItsPorts(t *testing.T) {
	if landlockABI() < 4 {
		t.Skip("this kernel has no Landlock network rules: ports are not restricted here")
	}
	var ports []uint16
	var addrs []string
	for range 2 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		ports = append(ports, uint16(l.Addr().(*net.TCPAddr).Port))
		addrs = append(addrs, l.Addr().String())
	}
	p := Policy{ConnectPorts: ports[:1]}
	if got := outcome(t, p, "connect", addrs[0]); got != "ok" {
		t.Errorf("connect to a granted port: %q", got)
	}
	if got := outcome(t, p, "connect", addrs[1]); !strings.HasPrefix(got, "denied") {
		t.Errorf("connect to another port: %q, want denied", got)
	}
}
