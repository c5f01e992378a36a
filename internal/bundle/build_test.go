package bundle

import (
	"archive/zip"
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// tree writes files (path: contents) under a new folder and returns it.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for p, data := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func entryNames(t *testing.T, zb []byte) []string {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(zb), int64(len(zb)))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
	}
	return names
}

func TestBuildWritesABundleCheckAccepts(t *testing.T) {
	t.Parallel()
	dir := tree(t, map[string]string{
		"main.py":                         "print('hi')\n",
		"a.txt":                           "a",
		"a/b.py":                          "b",
		"pkg/__pycache__/mod.cpython.pyc": "junk",
		".git/HEAD":                       "ref: refs/heads/main\n",
		"sub/.git/config":                 "",
		ManifestName:                      `{"stale": true}`,
		"pkg/" + ManifestName:             "{}",
	})
	if err := os.Chmod(filepath.Join(dir, "a.txt"), 0o755); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	m, err := Build(dir, Python, "main.py", []string{"LOG_LEVEL"}, &buf)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	want := []string{ManifestName, "a.txt", "a/b.py", "main.py", "pkg/" + ManifestName}
	if got := entryNames(t, buf.Bytes()); !slices.Equal(got, want) {
		t.Errorf("entries %q; want %q", got, want)
	}
	checked, _, err := Check(bytes.NewReader(buf.Bytes()), int64(buf.Len()), Limits{})
	if err != nil {
		t.Fatalf("Check of what Build wrote: %v", err)
	}
	if checked.Entrypoint != "main.py" || !slices.Equal(checked.EnvAllowlist, []string{"LOG_LEVEL"}) || len(checked.Files) != len(m.Files) {
		t.Errorf("manifest %+v; Build returned %+v", checked, m)
	}
	out, _, err := extract(t, buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if got := modeOf(t, filepath.Join(out, "a.txt")); got != 0o555 {
		t.Errorf("a.txt, executable in the folder: mode %s; want 0555", got)
	}
}

// TestBuildIsReproducible: the same folder gives the same bytes, whenever its files were
// written.
func TestBuildIsReproducible(t *testing.T) {
	t.Parallel()
	files := map[string]string{"main.js": "console.log(1)\n", "lib/x.js": "module.exports = 1\n"}
	build := func(dir string) []byte {
		var buf bytes.Buffer
		if _, err := Build(dir, Node, "main.js", nil, &buf); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	one := tree(t, files)
	two := tree(t, files)
	old := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	if err := os.Chtimes(filepath.Join(two, "main.js"), old, old); err != nil {
		t.Fatal(err)
	}
	if a, b := build(one), build(two); !bytes.Equal(a, b) {
		t.Error("two builds of the same files differ")
	}
}

func TestBuildDefaultsABinaryBundlesEntrypoint(t *testing.T) {
	t.Parallel()
	dir := tree(t, map[string]string{"bootstrap": "\x7fELF"})
	var buf bytes.Buffer
	m, err := Build(dir, "rust", "", nil, &buf)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	if m.Runtime != Binary || m.Entrypoint != "bootstrap" {
		t.Errorf("runtime %q, entrypoint %q", m.Runtime, m.Entrypoint)
	}
	zr, _ := zip.NewReader(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if mode := zr.File[1].Mode(); mode&0o111 == 0 {
		t.Errorf("bootstrap: mode %s in the archive; want executable", mode)
	}
}

func TestBuildRefuses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name                string
		runtime, entrypoint string
		env                 []string
		prepare             func(t *testing.T, dir string)
		path, want          string
	}{
		{"a symlink", Python, "main.py", nil, func(t *testing.T, dir string) {
			if err := os.Symlink("/etc/passwd", filepath.Join(dir, "lib", "passwd")); err != nil {
				t.Fatal(err)
			}
		}, "lib/passwd", "symbolic link"},
		{"no entrypoint for python", Python, "", nil, nil, "entrypoint", "is missing"},
		{"an entrypoint that is not a file", Node, "index.js", nil, nil, "index.js", "is the entrypoint but not a file of"},
		{"no bootstrap for binary", Binary, "", nil, nil, "bootstrap", "is the entrypoint but not a file of"},
		{"an unknown runtime", "java", "main.py", nil, nil, "runtime", `"java" is not a runtime`},
		{"a bad env name", Python, "main.py", []string{"A-B"}, nil, "env_allowlist[0]", "not an environment variable name"},
		{"a name with a backslash", Python, "main.py", nil, func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, `a\b`), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}, `a\b`, "backslash"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := tree(t, map[string]string{"main.py": "", "lib/x.py": ""})
			if c.prepare != nil {
				c.prepare(t, dir)
			}
			var buf bytes.Buffer
			_, err := Build(dir, c.runtime, c.entrypoint, c.env, &buf)
			wantRefusal(t, err, c.path, c.want)
			if buf.Len() != 0 {
				t.Errorf("%d bytes written", buf.Len())
			}
		})
	}
}

func TestBuildSkipsOnlyFoldersOfThoseNames(t *testing.T) {
	t.Parallel()
	dir := tree(t, map[string]string{"main.py": "", ".gitignore": "x", "__pycache__.py": ""})
	var buf bytes.Buffer
	m, err := Build(dir, Python, "main.py", nil, &buf)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, f := range m.Files {
		paths = append(paths, f.Path)
	}
	if got := strings.Join(paths, " "); got != ".gitignore __pycache__.py main.py" {
		t.Errorf("files %s", got)
	}
}
