// Package bundletest builds user code bundles for tests.
package bundletest

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/baton-dev/baton/internal/bundle"
)

// Dir writes files (slash-separated path → content) into a new folder the test removes.
func Dir(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, text := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// Zip is the bundle of files, of runtime, started at entrypoint.
func Zip(t testing.TB, files map[string]string, runtime, entrypoint string) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := bundle.Build(Dir(t, files), runtime, entrypoint, nil, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
