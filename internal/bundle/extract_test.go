package bundle

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// extract extracts zb into a new folder dir/bundle and returns its path.
func extract(t *testing.T, zb []byte) (string, *Manifest, error) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "bundle")
	t.Cleanup(func() { Remove(dir) })
	m, err := Extract(bytes.NewReader(zb), int64(len(zb)), dir, Limits{})
	return dir, m, err
}

func modeOf(t *testing.T, p string) fs.FileMode {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode()
}

func TestExtractWritesTheFilesReadOnly(t *testing.T) {
	t.Parallel()
	m, entries := sample(t)
	tool := []byte("#!/bin/sh\necho hi\n")
	m.Files = append(m.Files, fileOf("bin/tool", tool))
	entries = append(entries, entry{name: "bin/tool", data: tool, mode: 0o755})
	dir, got, err := extract(t, bundleOf(t, m, entries...))
	if err != nil {
		t.Fatalf("Extract: %v", err)
	}
	if len(got.Files) != 3 {
		t.Errorf("manifest lists %d files", len(got.Files))
	}
	for _, c := range []struct {
		path string
		mode fs.FileMode
	}{
		{"", fs.ModeDir | 0o555},
		{"lib", fs.ModeDir | 0o555},
		{"bin", fs.ModeDir | 0o555},
		{"main.py", 0o444},
		{"lib/util.py", 0o444},
		{"bin/tool", 0o555},
	} {
		if got := modeOf(t, filepath.Join(dir, c.path)); got != c.mode {
			t.Errorf("%s: mode %s; want %s", c.path, got, c.mode)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "lib", "util.py"))
	if err != nil || string(b) != "X = 1\n" {
		t.Errorf("lib/util.py = %q, %v", b, err)
	}
	if root, _ := os.ReadDir(dir); len(root) != 3 { // main.py, lib, bin: the manifest is not extracted
		t.Errorf("%d entries at the root; want 3", len(root))
	}
}

func TestExtractMarksABinaryBundlesEntrypointExecutable(t *testing.T) {
	t.Parallel()
	boot := []byte("\x7fELF")
	dir, _, err := extract(t, bundleOf(t, manifestOf("rust", "", fileOf("bootstrap", boot)), entry{name: "bootstrap", data: boot, mode: 0o644}))
	if err != nil {
		t.Fatalf("Extract: %v", err)
	}
	if got := modeOf(t, filepath.Join(dir, "bootstrap")); got != 0o555 {
		t.Errorf("bootstrap: mode %s; want 0555", got)
	}
}

// TestExtractLeavesNothingOnError: a bundle whose last file is wrong is found so only once the
// others are written; they are removed with the folder.
func TestExtractLeavesNothingOnError(t *testing.T) {
	t.Parallel()
	m, entries := sample(t)
	m.Files = append(m.Files, fileOf("z/late.py", []byte("right")))
	entries = append(entries, entry{name: "z/late.py", data: []byte("wrong")})
	dir, _, err := extract(t, bundleOf(t, m, entries...))
	wantRefusal(t, err, "z/late.py", "has SHA-256")
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the folder is still there: %v", err)
	}
}

func TestExtractRefusesAFolderThatExists(t *testing.T) {
	t.Parallel()
	m, entries := sample(t)
	zb := bundleOf(t, m, entries...)
	dir := t.TempDir()
	marker := filepath.Join(dir, "keep")
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Extract(bytes.NewReader(zb), int64(len(zb)), dir, Limits{}); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("Extract into an existing folder: %v; want ErrExist", err)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("what was in the folder is gone: %v", err)
	}
}

func TestExtractWritesNothingForARefusedArchive(t *testing.T) {
	t.Parallel()
	main := []byte("x")
	dir, _, err := extract(t, bundleOf(t, manifestOf(Python, "main.py", fileOf("main.py", main)),
		entry{name: "main.py", data: main}, entry{name: "../evil", data: main}))
	wantRefusal(t, err, "../evil", "zip-slip")
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the folder was made: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(filepath.Dir(dir), "evil")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("../evil was written: %v", err)
	}
}

func TestRemoveRemovesAReadOnlyTree(t *testing.T) {
	t.Parallel()
	m, entries := sample(t)
	dir, _, err := extract(t, bundleOf(t, m, entries...))
	if err != nil {
		t.Fatal(err)
	}
	if err := Remove(dir); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("still there: %v", err)
	}
	if err := Remove(dir); err != nil {
		t.Errorf("Remove of what is gone: %v", err)
	}
}
