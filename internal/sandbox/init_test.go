//go:build linux

package sandbox

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

func needInit(t *testing.T) {
	if _, pid := namespaces(); !pid {
		t.Skip("this process cannot make PID namespaces: programs run without an init here")
	}
}

// Under an init, a SIGTERM to the process group reaches the program, and Status is the
// program's exit status, not the init's.
func TestInitForwardsSIGTERM(t *testing.T) {
	needInit(t)
	proc, out, _ := start(t, Policy{}, "term", "")
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "ready") {
		if time.Now().After(deadline) {
			t.Fatalf("the program did not start: %q", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	syscall.Kill(-proc.Pid(), syscall.SIGTERM)
	select {
	case <-proc.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the program ignored the SIGTERM")
	}
	if ws := proc.Status(); !ws.Exited() || ws.ExitStatus() != 3 || !strings.Contains(out.String(), "terminated") {
		t.Errorf("status %#x, output %q; want exit status 3 after SIGTERM", ws, out.String())
	}
}

// A program killed by a signal is reported killed by it, though the init that saw it exits.
func TestInitReportsTheSignalThatKilledTheProgram(t *testing.T) {
	needInit(t)
	proc, _, _ := start(t, Policy{}, "die", "")
	ws := proc.Status()
	if !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Errorf("status %#x, want killed by SIGTERM", ws)
	}
	if state, _ := proc.Wait(); state.ExitCode() != 128+int(syscall.SIGTERM) {
		t.Errorf("the init ended %s, want exit status %d", state, 128+int(syscall.SIGTERM))
	}
}

// What the program leaves running when it ends dies with its init, whatever process group it
// is in, and Leftovers says there was some.
func TestInitTakesLeftoversDown(t *testing.T) {
	needInit(t)
	marker := fmt.Sprintf("leftover-%d", time.Now().UnixNano())
	proc, out, _ := start(t, Policy{}, "leave", marker)
	if ws := proc.Status(); !ws.Exited() || ws.ExitStatus() != 0 || !strings.Contains(out.String(), "ok") {
		t.Fatalf("status %#x, output %q", ws, out.String())
	}
	if !proc.Leftovers() {
		t.Error("Leftovers does not say the program left a process running")
	}
	if pids := withArg(t, marker); len(pids) > 0 {
		t.Errorf("processes %v outlived the program", pids)
	}
}

// withArg lists the processes with arg in their command line.
func withArg(t *testing.T, arg string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), arg) {
			out = append(out, e.Name())
		}
	}
	return out
}
