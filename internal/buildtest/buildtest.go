// Package buildtest builds Baton's commands from tests the way the running test binary was built:
// with its race detector and its -gcflags and -tags, so that the build reuses the packages the
// test's own build compiled, and the processes the test starts are checked as the test is; and it
// runs them: Start keeps a child's output and stops it when the test ends, FreeAddr, WaitListening
// and WaitReady find it ports and wait for its listeners.
package buildtest

import (
	"os/exec"
	"runtime/debug"
	"testing"
	"time"
)

// Flags returns the go build flags of the running binary that decide how packages compile:
// -race, -gcflags and -tags, as `go test` recorded them in the binary's build information.
func Flags() []string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return nil
	}
	var flags []string
	for _, s := range info.Settings {
		switch s.Key {
		case "-race":
			if s.Value == "true" {
				flags = append(flags, "-race")
			}
		case "-gcflags", "-tags":
			flags = append(flags, s.Key+"="+s.Value)
		}
	}
	return flags
}

// Build builds the main package pkg (such as "./cmd/baton") of the module in dir into out, with
// Flags, and returns how long the build took. The build and module caches are the user's, shared
// with the test's own build: only the packages that differ are compiled.
func Build(t testing.TB, dir, pkg, out string) time.Duration {
	t.Helper()
	goBin, err := exec.LookPath("go") // go test puts its own GOROOT/bin first on the PATH
	if err != nil {
		t.Fatalf("no go command to build %s with: %v", pkg, err)
	}
	args := append([]string{"build", "-o", out}, Flags()...)
	cmd := exec.Command(goBin, append(args, pkg)...)
	cmd.Dir = dir
	start := time.Now()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s in %s: %v\n%s", pkg, dir, err, b)
	}
	return time.Since(start)
}
