package bundle

import (
	"archive/zip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// buildTime is every entry's modification time, so that one directory always gives the same
// bytes (the earliest time a zip can hold).
var buildTime = time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC)

// skipped are the folders Build leaves out wherever they are: version control and Python's
// byte-code caches, which differ between machines and are never needed to run.
var skipped = []string{".git", "__pycache__"}

// Build writes a bundle of everything under dir (regular files only: a symlink, device,
// socket... is an error naming it; an existing bundle_manifest.json in dir is replaced, not
// included twice; directories named .git and __pycache__ are skipped) to w: the manifest first,
// then files in path order, with a fixed modification time so that the same directory gives the
// same bytes. runtime and entrypoint as in the manifest ("" entrypoint: bootstrap for binary,
// else an error); entrypoint must be a file of dir. A file marked executable in dir is marked
// so in the bundle, as is a binary bundle's entrypoint.
func Build(dir, runtime, entrypoint string, envAllowlist []string, w io.Writer) (*Manifest, error) {
	files, modes, err := scan(dir)
	if err != nil {
		return nil, err
	}
	m := &Manifest{SchemaVersion: SchemaVersion, Runtime: runtime, Entrypoint: entrypoint, Files: files,
		EnvAllowlist: slices.Clone(envAllowlist)}
	if rt, ok := normRuntime(runtime); ok && entrypoint == "" && rt == Binary {
		m.Entrypoint = DefaultBinaryEntrypoint
	}
	if m.Entrypoint != "" && pathProblem(m.Entrypoint) == "" {
		if _, ok := m.file(m.Entrypoint); !ok {
			return nil, &Error{Path: m.Entrypoint, Reason: "is the entrypoint but not a file of " + dir}
		}
	}
	if err := m.validate(); err != nil {
		return nil, err
	}
	if m.Runtime == Binary {
		modes[m.Entrypoint] = 0o755
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("bundle: build: %w", err)
	}

	zw := zip.NewWriter(w)
	if err := writeEntry(zw, ManifestName, 0o644, func(w io.Writer) error {
		_, err := w.Write(append(b, '\n'))
		return err
	}); err != nil {
		return nil, err
	}
	for _, f := range m.Files {
		err := writeEntry(zw, f.Path, modes[f.Path], func(w io.Writer) error { return copyFile(dir, f, w) })
		if err != nil {
			return nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("bundle: build: %w", err)
	}
	return m, nil
}

// scan lists the regular files under dir, in path order, each with its size and SHA-256, and the
// mode each takes in the bundle.
func scan(dir string) ([]File, map[string]fs.FileMode, error) {
	root, err := filepath.EvalSymlinks(dir) // a folder named through a link is walked, not the link
	if err != nil {
		return nil, nil, fmt.Errorf("bundle: build: %w", err)
	}
	var files []File
	modes := map[string]fs.FileMode{}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("bundle: build: %w", err)
		}
		if p == root {
			if !d.IsDir() {
				return fmt.Errorf("bundle: build: %s is not a folder", dir)
			}
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return fmt.Errorf("bundle: build: %w", err)
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if slices.Contains(skipped, d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if rel == ManifestName {
			return nil // replaced by the one Build writes
		}
		if r := pathProblem(rel); r != "" {
			return &Error{Path: rel, Reason: r}
		}
		if !d.Type().IsRegular() {
			return &Error{Path: rel, Reason: fmt.Sprintf("is a %s; a bundle holds regular files only", kind(d.Type()))}
		}
		info, err := d.Info()
		if err != nil {
			return fmt.Errorf("bundle: build: %w", err)
		}
		sum, n, err := hashFile(p)
		if err != nil {
			return err
		}
		files = append(files, File{Path: rel, SHA256: sum, Bytes: n})
		modes[rel] = 0o644
		if info.Mode()&0o111 != 0 {
			modes[rel] = 0o755
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	// WalkDir orders each folder's names, which is not the order of whole paths ("a.txt" sorts
	// before "a/b" but is visited after it).
	slices.SortFunc(files, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	return files, modes, nil
}

func hashFile(p string) (sum string, n int64, err error) {
	f, err := os.Open(p)
	if err != nil {
		return "", 0, fmt.Errorf("bundle: build: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if n, err = io.Copy(h, f); err != nil {
		return "", 0, fmt.Errorf("bundle: build: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// writeEntry adds one deflated entry to zw, its contents written by write.
func writeEntry(zw *zip.Writer, name string, mode fs.FileMode, write func(io.Writer) error) error {
	h := &zip.FileHeader{Name: name, Method: zip.Deflate, Modified: buildTime}
	h.SetMode(mode)
	w, err := zw.CreateHeader(h)
	if err != nil {
		return fmt.Errorf("bundle: build %s: %w", name, err)
	}
	return write(w)
}

// copyFile writes the file f of dir to w and checks that it is still what scan hashed.
func copyFile(dir string, f File, w io.Writer) error {
	src, err := os.Open(filepath.Join(dir, filepath.FromSlash(f.Path)))
	if err != nil {
		return fmt.Errorf("bundle: build: %w", err)
	}
	defer src.Close()
	h := sha256.New()
	dst := &writeErr{w: w}
	n, err := io.Copy(io.MultiWriter(h, dst), io.LimitReader(src, f.Bytes+1))
	if dst.err != nil {
		return fmt.Errorf("bundle: build: write %s: %w", f.Path, dst.err)
	}
	if err != nil {
		return fmt.Errorf("bundle: build: %w", err)
	}
	if n != f.Bytes || hex.EncodeToString(h.Sum(nil)) != f.SHA256 {
		return &Error{Path: f.Path, Reason: "changed while the bundle was being built; build it again"}
	}
	return nil
}
