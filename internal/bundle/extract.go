package bundle

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Modes of an extracted bundle: nothing in it can be written, so that a task cannot alter the
// copy another task runs. Remove undoes them.
const (
	modeFile = 0o444
	modeExec = 0o555
	modeDir  = 0o555
)

// Extract verifies and writes the bundle into dir (which must not exist; made 0755), every file
// read-only (0444, or 0555 when the zip marks it executable or it is a binary bundle's
// entrypoint), directories 0555 once written, dir included; on any error nothing is left (dir
// removed). Remove removes what it wrote.
func Extract(r io.ReaderAt, size int64, dir string, l Limits) (m *Manifest, err error) {
	a, err := open(r, size, l)
	if err != nil {
		return nil, err
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("bundle: extract: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, Remove(dir))
		}
	}()
	for _, d := range a.dirs {
		if err := os.Mkdir(filepath.Join(dir, filepath.FromSlash(d)), 0o755); err != nil {
			return nil, fmt.Errorf("bundle: extract: %w", err)
		}
	}
	for _, mb := range a.files {
		mode := fs.FileMode(modeFile)
		if mb.exec || (a.m.Runtime == Binary && mb.Path == a.m.Entrypoint) {
			mode = modeExec
		}
		if err := writeFile(filepath.Join(dir, filepath.FromSlash(mb.Path)), mb, mode); err != nil {
			return nil, err
		}
	}
	for i := len(a.dirs) - 1; i >= 0; i-- {
		if err := os.Chmod(filepath.Join(dir, filepath.FromSlash(a.dirs[i])), modeDir); err != nil {
			return nil, fmt.Errorf("bundle: extract: %w", err)
		}
	}
	if err := os.Chmod(dir, modeDir); err != nil {
		return nil, fmt.Errorf("bundle: extract: %w", err)
	}
	return a.m, nil
}

// writeFile creates the file at p, which must not exist, with the member's verified bytes.
func writeFile(p string, mb member, mode fs.FileMode) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("bundle: extract: %w", err)
	}
	if err := mb.copyTo(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("bundle: extract: %w", err)
	}
	if err := os.Chmod(p, mode); err != nil {
		return fmt.Errorf("bundle: extract: %w", err)
	}
	return nil
}

// Remove removes a tree Extract wrote (or any tree), making its folders writable first. A tree
// that does not exist is no error.
func Remove(dir string) error {
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if d != nil && d.IsDir() {
			// Before WalkDir reads it (and again if reading failed): its entries can then be listed
			// and removed.
			os.Chmod(p, 0o700)
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("bundle: remove %s: %w", dir, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("bundle: remove %s: %w", dir, err)
	}
	return nil
}
