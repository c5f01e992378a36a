package bench

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseWorkerCommand(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]WorkerCommand{
		"python=python3 sdk/python/benchmarks/bench_worker.py": {"python", "python3 sdk/python/benchmarks/bench_worker.py"},
		" ts = node a.mjs --x=1 ":                              {"ts", "node a.mjs --x=1"},
		"go-1.x=baton bench worker":                            {"go-1.x", "baton bench worker"},
	} {
		got, err := ParseWorkerCommand(in)
		if err != nil || got != want {
			t.Errorf("%q: %+v, %v; want %+v", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		"python3 worker.py":            "want LABEL=COMMAND",
		"py=":                          "want LABEL=COMMAND",
		"=python3 worker.py":           `the label "" must be`,
		"a b=c":                        `the label "a b" must be`,
		"-x=c":                         `the label "-x" must be`,
		strings.Repeat("l", 33) + "=c": "must be 1 to 32",
	} {
		if _, err := ParseWorkerCommand(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
}

// A command of plain words replaces the shell; anything else runs as the shell has it.
func TestShellCommand(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"python3 sdk/python/benchmarks/bench_worker.py": "exec python3 sdk/python/benchmarks/bench_worker.py",
		"./bench_worker --slots=4":                      "exec ./bench_worker --slots=4",
		"node --max-old-space-size=512 w.mjs":           "exec node --max-old-space-size=512 w.mjs",
		"cd sdk && python3 w.py":                        "cd sdk && python3 w.py",
		"PYTHONPATH=sdk python3 w.py":                   "PYTHONPATH=sdk python3 w.py",
		"python3 -c 'import w; w.main()'":               "python3 -c 'import w; w.main()'",
		"exec node w.mjs":                               "exec node w.mjs",
		"python3 w.py > log":                            "python3 w.py > log",
		"python3 w.py $ARGS":                            "python3 w.py $ARGS",
		"if true":                                       "if true",
		". ./env":                                       ". ./env",
	} {
		if got := shellCommand(in); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

// startTestCommand starts command as a worker command and waits until it printed ready.
func startTestCommand(t *testing.T, command string) *workerProcess {
	t.Helper()
	b := newBench(Config{Workers: 2, ProducerURL: "http://127.0.0.1:1", InternalURL: "http://127.0.0.1:2", APIKey: "k"})
	p, err := b.startWorkerCommand(WorkerCommand{Label: "test", Command: command}, "bench-task")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.stop(0) })
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(p.tail.String(), "ready"); {
		if time.Now().After(deadline) {
			t.Fatalf("the command did not print ready: %q", p.tail.String())
		}
		select {
		case <-p.exited:
			if !strings.Contains(p.tail.String(), "ready") {
				t.Fatalf("the command exited: %v: %q", p.err, p.tail.String())
			}
		case <-time.After(10 * time.Millisecond): // a process starting
		}
	}
	return p
}

// The bench reads a command's whole process tree, passes it its environment, and stops all of
// it with SIGTERM.
func TestWorkerCommandTreeAndStop(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc on this system")
	}
	p := startTestCommand(t, `sleep 60 & sleep 60 & echo "$BATON_BENCH_TASK $BATON_BENCH_CONCURRENCY $BATON_URL $BATON_INTERNAL_URL $BATON_API_KEY ready"; wait`)
	if want := "bench-task 2 http://127.0.0.1:1 http://127.0.0.1:2 k ready"; !strings.Contains(p.tail.String(), want) {
		t.Errorf("output %q, want %q", p.tail.String(), want)
	}
	var st TreeStats
	for deadline := time.Now().Add(30 * time.Second); st.Processes < 3; {
		var err error
		if st, err = ReadTreeStats(p.pid()); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d processes in the tree, want the shell and its two sleeps", st.Processes)
		}
		time.Sleep(10 * time.Millisecond) // the shell starting its children
	}
	if st.Processes != 3 || st.RSSBytes <= 0 || st.PeakRSSBytes < st.RSSBytes || st.CPUSeconds < 0 {
		t.Errorf("%+v", st)
	}
	if got := p.stop(10 * time.Second); got != "signal: terminated" {
		t.Errorf("stopped: %q, want the shell ended by SIGTERM", got)
	}
	if groupAlive(p.pid()) {
		t.Error("the command's process group outlived the stop")
	}
	if _, err := ReadTreeStats(p.pid()); err == nil {
		t.Error("no error for a tree whose root is gone")
	}
}

// A command that ignores SIGTERM is killed after the grace; one that exited says how.
func TestWorkerCommandStopKillsAfterTheGrace(t *testing.T) {
	t.Parallel()
	p := startTestCommand(t, `trap "" TERM; echo ready; sleep 60; sleep 60`)
	if got, want := p.stop(200*time.Millisecond), "killed: still running 200ms after SIGTERM"; got != want {
		t.Errorf("stopped: %q, want %q", got, want)
	}
	// The killed sleep is reaped by init, a moment after.
	for deadline := time.Now().Add(10 * time.Second); groupAlive(p.pid()); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the command's process group outlived the kill")
		}
	}

	p = startTestCommand(t, `echo ready; exit 7`)
	<-p.exited
	if got, want := p.stop(time.Second), "exited before SIGTERM: exit 7"; got != want {
		t.Errorf("stopped: %q, want %q", got, want)
	}
	if err := p.exitedEarly("test"); err == nil || !strings.Contains(err.Error(), "worker command test exited (exit status 7) before its tasks were done; its output:\nready") {
		t.Errorf("exitedEarly: %v", err)
	}
}
