//go:build linux

package runner

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/sandbox"
)

// Hostile children: each test runs a child that attacks what surrounds it, and checks that the
// attack is refused or contained. Each says the isolation level (sandbox.Levels) at which it
// holds, and skips where this system is below it.

// need skips the test unless this system reaches level.
func need(t *testing.T, level string) sandbox.Support {
	t.Helper()
	s := Isolation()
	if err := sandbox.CheckLevel(s.Level(), level); err != nil {
		t.Skipf("%v (here: %s)", err, s)
	}
	return s
}

// hostile is the credential a hostile child runs as: nobody when the tests run as root, as the
// wrapper would run it, else the tests' own user.
func hostile(t *testing.T) *Credential {
	t.Helper()
	if os.Geteuid() != 0 {
		return nil
	}
	cred, err := LookupChild("nobody")
	if err != nil {
		t.Skip("no user nobody to run the child as:", err)
	}
	return cred
}

// python skips the test unless the child can run python3 from the default PATH.
func python(t *testing.T) {
	t.Helper()
	for _, dir := range filepath.SplitList(DefaultPath) {
		if _, err := os.Stat(filepath.Join(dir, "python3")); err == nil {
			return
		}
	}
	t.Skip("no python3 in " + DefaultPath)
}

// runHostile runs script as a hostile child and answers its result; the run's error, if any,
// fails the test.
func runHostile(t *testing.T, s Spec) *Result {
	t.Helper()
	if s.Credential == nil {
		s.Credential = hostile(t)
	}
	res, err := Run(context.Background(), s)
	if err != nil {
		t.Fatalf("run: %v (%+v)", err, res)
	}
	return res
}

// running lists the processes with marker in their command line.
func running(t *testing.T, marker string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && alive(mustAtoi(e.Name())) && strings.Contains(string(b), marker) {
			out = append(out, e.Name())
		}
	}
	return out
}

func mustAtoi(s string) int { n, _ := strconv.Atoi(s); return n }

// marker is a number no other process has in its command line: a sleep's duration's fraction.
func marker() string { return fmt.Sprintf("300.%09d", time.Now().UnixNano()%1e9) }

// Level landlock: the path rules grant nothing of /proc/PID but the child's own. And with all
// of /proc granted, the kernel's ptrace access checks still refuse another process's environ:
// Landlock's (the wrapper, this test, is outside the child's sandbox), besides those of users
// (another user's process, or one that is not dumpable).
func TestHostileChildReadsNoOtherProcessEnviron(t *testing.T) {
	t.Parallel()
	need(t, sandbox.LevelLandlock)
	me := strconv.Itoa(os.Getpid())
	script := `for f in /proc/1/environ /proc/` + me + `/environ; do
		if cat $f > /dev/null 2>&1; then echo "read $f"; fi
	done; echo null`
	for _, s := range []Sandbox{{}, {Read: []string{"/proc"}}} {
		res := runHostile(t, Spec{Command: sh(script), Sandbox: s})
		if string(res.Output) != "null" {
			t.Errorf("with %+v the child %s", s, res.Output)
		}
	}
}

// Level landlock: a file of the wrapper's outside the work directory cannot be read, whatever
// its mode (0644 is readable by every user; 0600 by the child when it runs as the wrapper's
// user).
func TestHostileChildReadsNoFileOfTheWrapper(t *testing.T) {
	t.Parallel()
	need(t, sandbox.LevelLandlock)
	dir := sharedDir(t)
	for name, mode := range map[string]os.FileMode{"client.key": 0o600, "client.pem": 0o644} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("-----BEGIN PRIVATE KEY-----"), mode); err != nil {
			t.Fatal(err)
		}
	}
	res := runHostile(t, Spec{Command: sh(`for f in ` + dir + `/client.key ` + dir + `/client.pem; do
		if cat $f; then echo "read $f"; fi
	done; echo null`)})
	if string(res.Output) != "null" || strings.Count(res.StderrTail, "Permission denied") != 2 {
		t.Errorf("output %s, stderr %q; want both files refused", res.Output, res.StderrTail)
	}
}

// Level landlock: two tasks at once, as the same user: one cannot read the other's work
// directory, nor list the directory they both are in.
func TestHostileChildReadsNoOtherTasksWorkDir(t *testing.T) {
	t.Parallel()
	need(t, sandbox.LevelLandlock)
	dir := sharedDir(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	victim := make(chan error, 1)
	go func() {
		_, err := Run(ctx, Spec{Command: sh(`echo secret-of-the-victim > "$HOME/secret"; echo "$HOME" > ` + dir + `/home
			while :; do sleep 0.05; done`), Credential: hostile(t), Sandbox: Sandbox{ReadWrite: []string{dir}}})
		victim <- err
	}()
	home := waitFile(t, filepath.Join(dir, "home"))
	res := runHostile(t, Spec{Command: sh(`cat ` + home + `/secret; ls ` + filepath.Dir(home) + `; echo null`)})
	cancel()
	<-victim
	if string(res.Output) != "null" || strings.Count(res.StderrTail, "Permission denied") != 2 {
		t.Errorf("output %s, stderr %q; want the other task's file and the directory above refused", res.Output, res.StderrTail)
	}
}

// Level landlock (Landlock ABI 4, TCP): the child reaches the ports it is granted (the Baton
// server's public one) and no other (the /internal/* listener's), on loopback too; without
// ports it has no network at all (a namespace of its own).
func TestHostileChildConnectsOnlyToItsPorts(t *testing.T) {
	t.Parallel()
	if s := need(t, sandbox.LevelLandlock); s.Landlock < 4 {
		t.Skip("this kernel's Landlock has no network rules (ABI 4)")
	}
	python(t)
	var ports []uint16
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
	}
	script := fmt.Sprintf(`python3 -c '
import json, socket
out = {}
for port in (%d, %d):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        out[port] = "connected"
    except OSError as e:
        out[port] = e.__class__.__name__
print(json.dumps(out))'`, ports[0], ports[1])
	for _, c := range []struct {
		grant []uint16
		want  string
	}{
		{ports[:1], fmt.Sprintf(`{"%d": "connected", "%d": "PermissionError"}`, ports[0], ports[1])},
		{nil, fmt.Sprintf(`{"%d": "ConnectionRefusedError", "%d": "ConnectionRefusedError"}`, ports[0], ports[1])},
	} {
		res := runHostile(t, Spec{Command: sh(script), Sandbox: Sandbox{ConnectPorts: c.grant}})
		if got := string(res.Output); got != c.want && !(c.grant == nil && strings.Contains(got, "Error") && !strings.Contains(got, "connected")) {
			t.Errorf("granted %v: %s, want %s", c.grant, got, c.want)
		}
	}
}

// Level namespaces: a fork bomb under a cap of 64 processes (which it hits: forks fail) runs
// until its task's time is up, and nothing of it survives the run: the init of its PID
// namespace takes it all down.
func TestHostileForkBombDiesWithItsTask(t *testing.T) {
	t.Parallel()
	need(t, sandbox.LevelNamespaces)
	python(t)
	m := marker()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	// Every process forks for ever, and says once that a fork failed. (A shell's fork bomb
	// collapses at the cap: a shell that cannot fork exits.)
	res, err := Run(ctx, Spec{Command: sh(`exec python3 -c '
# ` + m + `
import os, time
told = False
while True:
    try:
        os.fork()
    except OSError as e:
        if not told:
            os.write(2, (e.strerror + "\n").encode())
            told = True
        time.sleep(0.01)'`), Credential: hostile(t), Grace: 200 * time.Millisecond,
		Sandbox: Sandbox{Limits: sandbox.Limits{Processes: 64}}})
	var f *Failure
	if !errors.As(err, &f) || !f.Stopped {
		t.Fatalf("err %v, result %+v; want the fork bomb stopped at its deadline", err, res)
	}
	if !strings.Contains(res.StderrTail, "Resource temporarily unavailable") {
		t.Errorf("stderr %q; want forks refused past the cap", res.StderrTail)
	}
	if pids := running(t, m); len(pids) > 0 {
		t.Errorf("processes %v of the fork bomb outlived its run", pids)
	}
}

// Level landlock: the child writes nowhere but its work directory: not in /tmp, nor in the
// directory its work directory is in.
func TestHostileChildWritesOnlyInItsWorkDir(t *testing.T) {
	t.Parallel()
	need(t, sandbox.LevelLandlock)
	root := sharedDir(t)
	escape := filepath.Join(os.TempDir(), "baton-hostile-"+marker())
	t.Cleanup(func() { os.Remove(escape) })
	res := runHostile(t, Spec{TempRoot: root, Command: sh(`for f in ` + escape + ` ` + root + `/escape "$HOME/../escape"; do
		if echo x > $f; then echo "wrote $f"; fi
	done
	echo x > "$HOME/mine" && echo x > "$TMPDIR/mine" && echo null`)})
	if string(res.Output) != "null" {
		t.Errorf("the child %s (stderr %q)", res.Output, res.StderrTail)
	}
	for _, f := range []string{escape, filepath.Join(root, "escape")} {
		if _, err := os.Stat(f); err == nil {
			t.Errorf("the child wrote %s", f)
		}
	}
}

// Level seccomp: the child can trace nothing, not its parent, not itself (PTRACE_TRACEME,
// which the kernel allows any process, is what a debugger's child asks).
func TestHostileChildCannotPtrace(t *testing.T) {
	t.Parallel()
	need(t, sandbox.LevelSeccomp)
	python(t)
	res := runHostile(t, Spec{Command: sh(`python3 -c '
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
out = {}
for name, req, pid in (("attach", 16, os.getppid()), ("traceme", 0, 0)):
    r = libc.ptrace(req, pid, None, None)
    out[name] = os.strerror(ctypes.get_errno()) if r == -1 else "allowed"
print(json.dumps(out, sort_keys=True))'`)})
	if got, want := string(res.Output), `{"attach": "Operation not permitted", "traceme": "Operation not permitted"}`; got != want {
		t.Errorf("ptrace: %s, want %s", got, want)
	}
}

// Level none (its process group; namespaces for the grandchild that left the group): a child
// that ignores SIGTERM is killed at the deadline once the grace period has passed, and its
// grandchildren with it, one that ignores SIGTERM too and one that left the process group.
func TestHostileChildIgnoringSIGTERMDiesWithItsGrandchildren(t *testing.T) {
	t.Parallel()
	s := need(t, sandbox.LevelNone)
	m := marker()
	script := `trap '' TERM
		(trap '' TERM; exec sleep ` + m + `) &`
	if s.PIDNamespace {
		script += `
		setsid sleep ` + m + ` &`
	}
	script += `
		while :; do sleep 0.05; done`
	// The deadline leaves the shell time to set its trap before the SIGTERM, on a loaded machine
	// too: a child still starting when the signal comes dies of it, which is not what this tests.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	res, err := Run(ctx, Spec{Command: sh(script), Credential: hostile(t), Grace: 300 * time.Millisecond})
	var f *Failure
	if !errors.As(err, &f) || f.Signal != syscall.SIGKILL || !res.Killed {
		t.Fatalf("err %v, result %+v; want killed by SIGKILL after the grace period", err, res)
	}
	if took := time.Since(start); took < 5300*time.Millisecond || took > 30*time.Second {
		t.Errorf("took %s; want the deadline, then the grace period", took)
	}
	if pids := running(t, m); len(pids) > 0 {
		t.Errorf("grandchildren %v outlived the run", pids)
	}
}

// Level seccomp: the child can make no namespace, which would make it root of its own, nor
// mount anything.
func TestHostileChildCannotUnshareOrMount(t *testing.T) {
	t.Parallel()
	need(t, sandbox.LevelSeccomp)
	python(t)
	script := `python3 -c '
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
os.mkdir("m")
for name, call in (("unshared", lambda: libc.unshare(0x10000000)), # CLONE_NEWUSER
                   ("mounted", lambda: libc.mount(b"none", b"m", b"tmpfs", 0, None))):
    print(name if call() == 0 else os.strerror(ctypes.get_errno()))' >&2
	if command -v unshare > /dev/null && unshare -U true; then echo unshared >&2; fi
	echo null`
	res := runHostile(t, Spec{Command: sh(script)})
	want := 2
	if _, err := exec.LookPath("unshare"); err == nil {
		want = 3
	}
	if strings.Contains(res.StderrTail, "unshared") || strings.Contains(res.StderrTail, "mounted") ||
		strings.Count(res.StderrTail, "Operation not permitted") != want {
		t.Errorf("stderr %q; want every namespace and mount refused", res.StderrTail)
	}
}
