package bundle

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"strings"
	"testing"
)

// entry is one entry of a test archive: written deflated with mode 0644 unless told otherwise;
// with raw set, data is written as the entry's compressed bytes under that header as it is.
type entry struct {
	name string
	data []byte
	mode fs.FileMode
	raw  *zip.FileHeader
}

// makeZip writes the entries, in order, to a zip archive.
func makeZip(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		if e.raw != nil {
			w, err := zw.CreateRaw(e.raw)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Write(e.data); err != nil {
				t.Fatal(err)
			}
			continue
		}
		h := &zip.FileHeader{Name: e.name, Method: zip.Deflate}
		if e.mode == 0 {
			e.mode = 0o644
		}
		h.SetMode(e.mode)
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(e.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// fileOf is the manifest's entry for a file holding b.
func fileOf(p string, b []byte) File { return File{Path: p, SHA256: sum(b), Bytes: int64(len(b))} }

// manifestOf is a schema version 1 manifest of the files.
func manifestOf(runtime, entrypoint string, files ...File) *Manifest {
	return &Manifest{SchemaVersion: 1, Runtime: runtime, Entrypoint: entrypoint, Files: files}
}

func manifestEntry(t *testing.T, m any) entry {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return entry{name: ManifestName, data: b}
}

// fileEntries are the entries of a small, valid python bundle, and its manifest.
func sample(t *testing.T) (*Manifest, []entry) {
	t.Helper()
	main := []byte("print('hello')\n")
	util := []byte("X = 1\n")
	m := manifestOf(Python, "main.py", fileOf("main.py", main), fileOf("lib/util.py", util))
	return m, []entry{{name: "main.py", data: main}, {name: "lib/util.py", data: util}}
}

// bundleOf is an archive of the manifest followed by the entries.
func bundleOf(t *testing.T, m any, entries ...entry) []byte {
	t.Helper()
	return makeZip(t, append([]entry{manifestEntry(t, m)}, entries...)...)
}

// refusals are the *Errors in err, whether it is one or an Errors.
func refusals(t *testing.T, err error) []*Error {
	t.Helper()
	var es Errors
	if errors.As(err, &es) {
		return es
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an *Error", err, err)
	}
	return []*Error{e}
}

// wantRefusal fails unless err holds an *Error about path whose reason contains want.
func wantRefusal(t *testing.T, err error, path, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; want a refusal of %q: %s", path, want)
	}
	for _, e := range refusals(t, err) {
		if e.Path == path && strings.Contains(e.Reason, want) {
			return
		}
	}
	t.Fatalf("error %q; want a refusal of %q containing %q", err, path, want)
}
