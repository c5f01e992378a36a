// Package browsertest finds the headless browser that browser tests drive.
package browsertest

import (
	"os"
	"os/exec"
	"testing"
)

// ChromePath returns the browser to drive: BATON_TEST_CHROME, or Chromium or Chrome on the PATH.
// Without one the test skips, except in CI (CI set), where .ci/run installs Debian's chromium and
// a missing browser is a failure.
func ChromePath(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("BATON_TEST_CHROME"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no Chromium found in CI: .ci/run installs Debian's chromium package")
	}
	t.Skip("no Chromium or Chrome on the PATH (apt-get install chromium, or set BATON_TEST_CHROME): the browser test skips")
	return ""
}
