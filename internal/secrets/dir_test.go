package secrets

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// canary is a secret's value that the tests look for where it must not be: its characters make
// each encoded form differ from the others, and its length (32 bytes) gives base64 padding.
const canary = "c4n4ry\"<k&y>\\ /+?=\t\x01\u00e9-0xS3CR3T!"

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Skipf("symbolic links: %v", err)
	}
}

func mustDir(t *testing.T, dir string) Provider {
	t.Helper()
	p, err := Dir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDirReadsTheFileOfTheName(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	files := map[string]string{
		"plain": "v", "lf": "v\n", "crlf": "v\r\n", "two_lf": "v\n\n", "cr": "v\r",
		"inner": "a\nb\n", "spaces": " v \n", "empty": "", "only_lf": "\n",
	}
	for name, content := range files {
		writeFile(t, filepath.Join(dir, name), content)
	}
	p := mustDir(t, dir)
	tests := []struct {
		name, want string
		err        error
	}{
		{name: "plain", want: "v"},
		{name: "lf", want: "v"},
		{name: "crlf", want: "v"},
		{name: "two_lf", want: "v\n"},
		{name: "cr", want: "v\r"},
		{name: "inner", want: "a\nb"},
		{name: "spaces", want: " v "},
		{name: "empty", err: ErrNotFound},
		{name: "only_lf", err: ErrNotFound},
		{name: "missing", err: ErrNotFound},
	}
	for _, tt := range tests {
		got, err := p.Lookup(context.Background(), tt.name)
		if got != tt.want || !errors.Is(err, tt.err) {
			t.Errorf("Lookup(%q) = %q, %v; want %q, %v", tt.name, got, err, tt.want, tt.err)
		}
	}
	if want := "dir:" + dir; p.Name() != want {
		t.Errorf("Name = %q, want %q", p.Name(), want)
	}
}

func TestDirSeesARewrittenFileAtTheNextLookup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "monad_rpc_key")
	p := mustDir(t, dir)
	for _, v := range []string{"first", "second", "third"} {
		writeFile(t, path, v+"\n")
		if got, err := p.Lookup(context.Background(), "monad_rpc_key"); got != v || err != nil {
			t.Errorf("Lookup = %q, %v; want %q", got, err, v)
		}
	}
}

// kubeRotate lays out a Kubernetes secret volume's version as the kubelet does: the files in a
// new dir/..<version>, dir/..data swapped to it atomically, a link dir/<name> → ..data/<name>
// for each, and the previous version removed.
func kubeRotate(t *testing.T, dir, version string, files map[string]string) {
	t.Helper()
	data := filepath.Join(dir, "..data")
	old, _ := os.Readlink(data)
	if err := os.Mkdir(filepath.Join(dir, version), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		writeFile(t, filepath.Join(dir, version, name), content)
	}
	symlink(t, version, filepath.Join(dir, "..data_tmp"))
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), data); err != nil {
		t.Fatal(err)
	}
	for name := range files {
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); errors.Is(err, os.ErrNotExist) {
			symlink(t, filepath.Join("..data", name), link)
		}
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestDirFollowsAKubernetesRotation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	kubeRotate(t, dir, "..2026_11_29_10_00_00.1", map[string]string{"monad_rpc_key": "old\n"})
	p := mustDir(t, dir)
	if got, err := p.Lookup(context.Background(), "monad_rpc_key"); got != "old" || err != nil {
		t.Fatalf("before the rotation: %q, %v", got, err)
	}
	kubeRotate(t, dir, "..2026_11_29_11_00_00.2", map[string]string{"monad_rpc_key": "new\n"})
	if got, err := p.Lookup(context.Background(), "monad_rpc_key"); got != "new" || err != nil {
		t.Fatalf("after the rotation: %q, %v", got, err)
	}
}

// Every refusal names the secret, and none carries what the file holds.
func TestDirRefusesWhatIsNotASmallRegularFileInside(t *testing.T) {
	t.Parallel()
	outside := t.TempDir()
	writeFile(t, filepath.Join(outside, "target"), canary)
	dir := t.TempDir()
	symlink(t, filepath.Join(outside, "target"), filepath.Join(dir, "absolute_out"))
	rel, err := filepath.Rel(dir, filepath.Join(outside, "target"))
	if err != nil {
		t.Fatal(err)
	}
	symlink(t, rel, filepath.Join(dir, "relative_out"))
	writeFile(t, filepath.Join(dir, "inside"), canary)
	// An absolute link is refused even when it stays inside: only relative links are followed.
	symlink(t, filepath.Join(dir, "inside"), filepath.Join(dir, "absolute_in"))
	if err := os.Mkdir(filepath.Join(dir, "a_directory"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "too_large"), canary+strings.Repeat("x", MaxFileSize))
	p := mustDir(t, dir)
	for _, name := range []string{"absolute_out", "relative_out", "absolute_in", "a_directory", "too_large"} {
		got, err := p.Lookup(context.Background(), name)
		switch {
		case err == nil:
			t.Errorf("Lookup(%q) = %q, want an error", name, got)
		case errors.Is(err, ErrNotFound):
			t.Errorf("Lookup(%q): %v, want a refusal, not ErrNotFound", name, err)
		case !strings.Contains(err.Error(), name):
			t.Errorf("Lookup(%q): %q does not name the secret", name, err)
		case strings.Contains(err.Error(), canary) || strings.Contains(err.Error(), canary[:8]):
			t.Errorf("Lookup(%q): %q carries the value", name, err)
		}
	}
}

func TestDirTakesAFileOfTheLargestSize(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "largest"), strings.Repeat("x", MaxFileSize))
	got, err := mustDir(t, dir).Lookup(context.Background(), "largest")
	if len(got) != MaxFileSize || err != nil {
		t.Errorf("Lookup = %d bytes, %v", len(got), err)
	}
}

func TestDirChecksTheNameBeforeTouchingAFile(t *testing.T) {
	t.Parallel()
	parent := t.TempDir()
	dir := filepath.Join(parent, "secrets")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(parent, "x"), canary)
	if err := os.Mkdir(filepath.Join(dir, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "a", "b"), canary)
	writeFile(t, filepath.Join(dir, "Upper"), canary)
	p := mustDir(t, dir)
	for _, name := range []string{"../x", "a/b", "./a/b", "Upper", filepath.Join(parent, "x"), ""} {
		if got, err := p.Lookup(context.Background(), name); !errors.Is(err, ErrInvalidName) {
			t.Errorf("Lookup(%q) = %q, %v; want ErrInvalidName", name, got, err)
		}
	}
}

func TestDirNeedsADirectory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "file"), "")
	for _, path := range []string{filepath.Join(dir, "missing"), filepath.Join(dir, "file")} {
		if _, err := Dir(path); err == nil {
			t.Errorf("Dir(%q): no error", path)
		}
	}
}

// A directory that has gone (an unmounted volume) is an error, not a missing secret: a chain does
// not fall back to a later provider for it.
func TestDirThatHasGoneIsAnError(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "secrets")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := mustDir(t, dir)
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Lookup(context.Background(), "key"); err == nil || errors.Is(err, ErrNotFound) {
		t.Errorf("Lookup = %v, want an error other than ErrNotFound", err)
	}
}

func TestDirAnswersACancelledContext(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "key"), "v")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := mustDir(t, dir).Lookup(ctx, "key"); !errors.Is(err, context.Canceled) {
		t.Errorf("Lookup = %v, want context.Canceled", err)
	}
}
