//go:build linux

package runner

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func sh(script string) []string { return []string{"/bin/sh", "-c", script} }

// hostPID is shell that sets $pid to the process id of the shell that runs it as this test
// sees it: in a PID namespace of its own, the child's $$ and $! are the namespace's. It reads
// /proc/self/stat, which a child may read with readProc.
const hostPID = `read -r pid _ < /proc/self/stat; `

// shared is a child's Sandbox that lets it write to dir (see sharedDir) and read /proc, for the
// tests that follow its processes.
func shared(dir string) Sandbox { return Sandbox{ReadWrite: []string{dir}, Read: []string{"/proc"}} }

// sharedDir is a directory the child can write to whatever user it runs as (given shared(dir)).
func sharedDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "runner-test-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d, 0o777); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// alive reports whether pid is a live process (a zombie is not).
func alive(pid int) bool {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		if runtime.GOOS != "linux" {
			return syscall.Kill(pid, 0) == nil
		}
		return false
	}
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || (s[i+2] != 'Z' && s[i+2] != 'X')
}

// waitFile waits for path to hold a line and returns it.
func waitFile(t *testing.T, path string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil && strings.HasSuffix(string(b), "\n") {
			return strings.TrimSpace(string(b))
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s was not written", path)
	return ""
}

func TestLastJSON(t *testing.T) {
	for _, c := range []struct{ in, want, err string }{
		{"", "null", ""},
		{" \n\t", "null", ""},
		{`{"a":1}`, `{"a":1}`, ""},
		{"1 2 3\n", "3", ""},
		{"{\"a\":1}\n{\"b\":[1,2]}\n", `{"b":[1,2]}`, ""},
		{"starting\nworking...\n{\"ok\":true}\n", `{"ok":true}`, ""},
		{"{\"ok\":true}\nbye\n", `{"ok":true}`, ""},
		{"\"text\"", `"text"`, ""},
		{"done\n", "", "stdout is not JSON"},
		{`{"a":`, "", "stdout is not JSON"},
	} {
		got, err := LastJSON([]byte(c.in))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("LastJSON(%q) = %s, %v; want error %q", c.in, got, err, c.err)
			}
			continue
		}
		if err != nil || string(got) != c.want {
			t.Errorf("LastJSON(%q) = %s, %v; want %s", c.in, got, err, c.want)
		}
	}
}

func TestTailBuffer(t *testing.T) {
	tb := &tailBuffer{max: 8}
	for _, p := range []string{"hello ", "wörld ", "and more"} {
		tb.Write([]byte(p))
	}
	if got := tb.String(); got != "…and more" {
		t.Fatalf("tail = %q", got)
	}
	tb = &tailBuffer{max: 8}
	tb.Write([]byte("abc"))
	if got := tb.String(); got != "abc" {
		t.Fatalf("tail = %q", got)
	}
}

func TestRunSuccessPayloadAndOutput(t *testing.T) {
	payload := `{"task_id":"t1","input":{"n":2}}`
	res, err := Run(context.Background(), Spec{
		Command: sh(`read -r line; [ "$line" = "$(cat "$BATON_TASK_PAYLOAD")" ] || exit 9
			echo "log line"; echo '{"partial":1}'; printf '{"got":%s,"pwd":"%s"}\n' "$line" "$(pwd)"`),
		Payload: []byte(payload),
	})
	if err != nil {
		t.Fatalf("run: %v (%+v)", err, res)
	}
	var out struct {
		Got json.RawMessage `json:"got"`
		PWD string          `json:"pwd"`
	}
	if err := json.Unmarshal(res.Output, &out); err != nil {
		t.Fatalf("output %s: %v", res.Output, err)
	}
	if string(out.Got) != payload || !strings.Contains(filepath.Base(out.PWD), "baton-task-") {
		t.Fatalf("output %s", res.Output)
	}
	if _, err := os.Stat(out.PWD); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("work directory %s left behind: %v", out.PWD, err)
	}
	if res.ExitCode != 0 || res.Stopped || res.Killed {
		t.Fatalf("result %+v", res)
	}
}

// Prepare writes into the work directory before the child starts, and the variables it returns
// reach the child, never over the ones Run sets itself; its error stops the run before any child.
func TestRunPrepare(t *testing.T) {
	res, err := Run(context.Background(), Spec{
		Command: sh(`printf '{"file":"%s","home":"%s","env":"%s"}\n' "$(cat "$CREDS_FILE")" "$HOME" "$FROM_ENV"`),
		Env:     map[string]string{"FROM_ENV": "spec", "CREDS_FILE": "overridden"},
		Prepare: func(dir string) (map[string]string, error) {
			path := filepath.Join(dir, "creds")
			if err := os.WriteFile(path, []byte("secret-of-this-task"), 0o644); err != nil {
				return nil, err
			}
			return map[string]string{"CREDS_FILE": path, EnvHome: "/elsewhere"}, nil
		},
	})
	if err != nil {
		t.Fatalf("run: %v (%+v)", err, res)
	}
	var out struct{ File, Home, Env string }
	if err := json.Unmarshal(res.Output, &out); err != nil {
		t.Fatalf("output %s: %v", res.Output, err)
	}
	if out.File != "secret-of-this-task" || out.Home == "/elsewhere" || out.Env != "spec" {
		t.Fatalf("output %s", res.Output)
	}
	ran := filepath.Join(sharedDir(t), "ran")
	_, err = Run(context.Background(), Spec{Command: sh("touch " + ran),
		Prepare: func(string) (map[string]string, error) { return nil, errors.New("no credentials") }})
	if err == nil || !strings.Contains(err.Error(), "no credentials") {
		t.Fatalf("run with a failing Prepare: %v", err)
	}
	if _, err := os.Stat(ran); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the child ran although Prepare failed: %v", err)
	}
}

func TestRunNoOutputIsNull(t *testing.T) {
	res, err := Run(context.Background(), Spec{Command: sh("echo to stderr >&2")})
	if err != nil || string(res.Output) != "null" {
		t.Fatalf("output %v, %v", res, err)
	}
}

func TestRunFailureCarriesExitCodeAndStderrTail(t *testing.T) {
	res, err := Run(context.Background(), Spec{
		Command:    sh(`i=0; while [ $i -lt 200 ]; do echo "noise $i" >&2; i=$((i+1)); done; echo 'boom: the end' >&2; exit 3`),
		StderrTail: 64,
	})
	var f *Failure
	if !errors.As(err, &f) || f.Kind != FailExit || f.ExitCode != 3 || res.ExitCode != 3 {
		t.Fatalf("err %v, result %+v", err, res)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "exit status 3: …") || !strings.HasSuffix(msg, "boom: the end") || len(f.Stderr) > 64+len("…") {
		t.Fatalf("message %q", msg)
	}
}

func TestRunOutputFailures(t *testing.T) {
	_, err := Run(context.Background(), Spec{Command: sh("echo all done")})
	var f *Failure
	if !errors.As(err, &f) || f.Kind != FailOutput || !strings.Contains(err.Error(), "stdout is not JSON") {
		t.Fatalf("err %v", err)
	}
	_, err = Run(context.Background(), Spec{Command: sh(`printf '"%0100d"'  0`), MaxStdout: 10})
	if !errors.As(err, &f) || f.Kind != FailOutput || !strings.Contains(err.Error(), "stdout exceeded 10 bytes (the child wrote 102)") {
		t.Fatalf("err %v", err)
	}
}

func TestRunSignal(t *testing.T) {
	_, err := Run(context.Background(), Spec{Command: sh("kill -SEGV $$")})
	var f *Failure
	if !errors.As(err, &f) || f.Kind != FailSignal || f.Signal != syscall.SIGSEGV || !strings.Contains(err.Error(), "killed by signal 11") {
		t.Fatalf("err %v", err)
	}
}

// A child that ignores SIGTERM and has a grandchild that ignores it too: cancelling sends SIGTERM
// to the group, then SIGKILL after the grace period, and both are gone.
func TestRunCancelKillsProcessGroup(t *testing.T) {
	dir := sharedDir(t)
	ctx, cancel := context.WithCancel(context.Background())
	type ran struct {
		res *Result
		err error
	}
	done := make(chan ran, 1)
	go func() {
		res, err := Run(ctx, Spec{
			Command: sh(`trap '' TERM; sh -c '` + hostPID + `echo $pid > ` + dir + `/grandchild; exec sleep 300' &
				` + hostPID + `echo $pid > ` + dir + `/child; wait; wait; echo '"unreachable"'`),
			Grace:   300 * time.Millisecond,
			Sandbox: shared(dir),
		})
		done <- ran{res, err}
	}()
	child, _ := strconv.Atoi(waitFile(t, dir+"/child"))
	grandchild, _ := strconv.Atoi(waitFile(t, dir+"/grandchild"))
	if !alive(child) || !alive(grandchild) {
		t.Fatal("processes not running")
	}
	start := time.Now()
	cancel()
	r := <-done
	if took := time.Since(start); took < 300*time.Millisecond || took > 5*time.Second {
		t.Fatalf("stopping took %s; want the 300ms grace period, then SIGKILL", took)
	}
	var f *Failure
	if !errors.As(r.err, &f) || f.Kind != FailSignal || f.Signal != syscall.SIGKILL || !f.Stopped || !f.Killed || !r.res.Killed {
		t.Fatalf("err %v, result %+v", r.err, r.res)
	}
	if !strings.Contains(r.err.Error(), "SIGTERM to its process group, then SIGKILL after the grace period") {
		t.Fatalf("message %q", r.err)
	}
	for _, pid := range []int{child, grandchild} {
		if alive(pid) {
			t.Errorf("pid %d still running", pid)
		}
	}
}

// A child that handles SIGTERM by finishing within the grace period succeeds: no SIGKILL.
func TestRunCancelGraceful(t *testing.T) {
	dir := sharedDir(t)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { waitFile(t, dir+"/ready"); cancel() }()
	res, err := Run(ctx, Spec{
		Command: sh(`trap 'echo "{\"stopped\":true}"; exit 0' TERM; echo up > ` + dir + `/ready; while :; do sleep 0.05; done`),
		Grace:   10 * time.Second,
		Sandbox: shared(dir),
	})
	if err != nil || string(res.Output) != `{"stopped":true}` || !res.Stopped || res.Killed {
		t.Fatalf("res %+v, err %v", res, err)
	}
	if res.Duration > 5*time.Second {
		t.Fatalf("took %s: waited out the grace period", res.Duration)
	}
}

// Background processes a successful child leaves behind are killed with it.
func TestRunKillsLeftovers(t *testing.T) {
	dir := sharedDir(t)
	res, err := Run(context.Background(), Spec{Command: sh(`sh -c '` + hostPID + `echo $pid > ` + dir + `/bg; exec sleep 300' >/dev/null 2>&1 &
		while [ ! -s ` + dir + `/bg ]; do sleep 0.01; done; echo 1`), Sandbox: shared(dir)})
	if err != nil || string(res.Output) != "1" || !res.Leftovers {
		t.Fatalf("res %+v, err %v", res, err)
	}
	bg, _ := strconv.Atoi(waitFile(t, dir+"/bg"))
	deadline := time.Now().Add(5 * time.Second)
	for alive(bg) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if alive(bg) {
		t.Fatalf("background pid %d outlived the task", bg)
	}
}

func TestRunEnvironmentIsOnlyTheSpec(t *testing.T) {
	t.Setenv("BATON_SECRET_X", "hunter2")
	res, err := Run(context.Background(), Spec{
		Command: sh(hostPID + `tr '\0' '\n' < /proc/$pid/environ | cut -d= -f1 | sort | tr '\n' ' ' | sed 's/^/"/; s/ $/"/'`),
		Env:     map[string]string{"BATON_URL": "http://example", "LANG": "C.UTF-8"},
		Sandbox: Sandbox{Read: []string{"/proc"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var names string
	json.Unmarshal(res.Output, &names)
	want := []string{"BATON_TASK_PAYLOAD", "BATON_URL", "HOME", "LANG", "PATH", "PWD", "TMPDIR"}
	if got := strings.Fields(names); !slices.Equal(got, want) {
		t.Fatalf("child environment %v, want %v", got, want)
	}
}

// The child inherits stdin, stdout and stderr and no other file descriptor, not even one this
// process inherited without close-on-exec.
func TestRunNoExtraFileDescriptors(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if _, _, e := syscall.Syscall(syscall.SYS_FCNTL, w.Fd(), syscall.F_SETFD, 0); e != 0 {
		t.Fatal(e)
	}
	dir := sharedDir(t)
	done := make(chan error, 1)
	go func() {
		_, err := Run(context.Background(), Spec{Command: sh(hostPID + `echo $pid > ` + dir + `/pid; while [ ! -e ` + dir + `/go ]; do sleep 0.02; done`),
			Sandbox: shared(dir)})
		done <- err
	}()
	pid := waitFile(t, dir+"/pid")
	entries, err := os.ReadDir("/proc/" + pid + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	var fds []string
	for _, e := range entries {
		fds = append(fds, e.Name())
	}
	os.WriteFile(dir+"/go", nil, 0o644)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(fds, []string{"0", "1", "2"}) {
		t.Fatalf("child fds %v, want 0 1 2", fds)
	}
}

func TestLookupChildRefusesRoot(t *testing.T) {
	for _, name := range []string{"root", "0"} {
		if _, err := LookupChild(name); err == nil || !strings.Contains(err.Error(), "root (uid 0)") {
			t.Errorf("LookupChild(%q) = %v", name, err)
		}
	}
	if _, err := LookupChild("no-such-user-baton"); err == nil {
		t.Error("unknown user accepted")
	}
}

// As root, the child runs as nobody: it owns its work directory and payload, and cannot read a
// file only root may read.
func TestRunAsChildUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch the child to another user (run the tests as root to cover it)")
	}
	cred, err := LookupChild("nobody")
	if err != nil {
		t.Skip("no user nobody:", err)
	}
	dir := sharedDir(t)
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), Spec{
		Command: sh(`cat "$BATON_TASK_PAYLOAD" >/dev/null && echo hi > "$TMPDIR/x" && echo hi > "$HOME/y" || exit 7
			if cat ` + secret + ` 2>/dev/null; then exit 8; fi
			echo "[$(id -u),$(id -g),\"$(id -G)\"]"`),
		Payload:    []byte(`{}`),
		Credential: cred,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `[` + strconv.Itoa(int(cred.Uid)) + `,` + strconv.Itoa(int(cred.Gid)) + `,"` + strconv.Itoa(int(cred.Gid)) + `"]`
	if string(res.Output) != want {
		t.Fatalf("child ids %s, want %s (uid, gid, groups)", res.Output, want)
	}
}
