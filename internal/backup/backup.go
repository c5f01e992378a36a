// Package backup copies the SQLite databases of a `baton dev` data directory to backup files while
// the server runs, and installs such files back into a data directory while none does.
package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"runtime"

	"github.com/baton-dev/baton/internal/store/sqlite"
)

// The files of a data directory.
const (
	StoreFile = "baton.db"
	DataFile  = "data.db" // buffered datasets' rows
	// DataSuffix names the copy of the data database beside a backup file.
	DataSuffix = ".data"
)

// Part is one database file of a data directory and where its copy goes.
type Part struct {
	What     string // "store" or "data database", for messages
	Src, Dst string
}

// BackupParts are the parts of a backup of dataDir to out: the store, and the data database
// (to out+DataSuffix) when dataDir has one.
func BackupParts(dataDir, out string) []Part {
	parts := []Part{{What: "store", Src: filepath.Join(dataDir, StoreFile), Dst: out}}
	if _, err := os.Stat(filepath.Join(dataDir, DataFile)); err == nil {
		parts = append(parts, Part{What: "data database", Src: filepath.Join(dataDir, DataFile), Dst: out + DataSuffix})
	}
	return parts
}

// RestoreParts are the parts of a restore of the backup file from into dataDir: the store, and
// the data database when from+DataSuffix exists.
func RestoreParts(from, dataDir string) []Part {
	parts := []Part{{What: "store", Src: from, Dst: filepath.Join(dataDir, StoreFile)}}
	if _, err := os.Stat(from + DataSuffix); err == nil {
		parts = append(parts, Part{What: "data database", Src: from + DataSuffix, Dst: filepath.Join(dataDir, DataFile)})
	}
	return parts
}

// AppearedError says that a destination was created by another process between the check that
// it did not exist and the copy's install. It wraps io/fs.ErrExist.
type AppearedError struct{ Path string }

func (e *AppearedError) Error() string { return e.Path + " appeared meanwhile" }
func (e *AppearedError) Unwrap() error { return iofs.ErrExist }

// Backup copies each part's database to its Dst: a consistent snapshot (VACUUM INTO) into a
// temporary file beside Dst, synced, while the server goes on serving; then, once every copy is
// taken, each is installed in turn and installed is called with it (its error ends the backup
// there). Without replace an existing
// Dst is never written over: its install fails with an *AppearedError. The parts are copied in
// order: the store first, as the sink commits a batch in the store only after loading its rows,
// so that every batch the store's copy calls committed has its rows in the data database's copy
// taken after it.
func Backup(ctx context.Context, parts []Part, replace bool, installed func(Part) error) error {
	var tmps []string
	defer func() {
		for _, t := range tmps {
			os.Remove(t)
		}
	}()
	for _, p := range parts {
		tmp, err := tempBeside(p.Dst)
		if err != nil {
			return err
		}
		tmps = append(tmps, tmp)
		if err := sqlite.Copy(ctx, p.Src, tmp); err != nil {
			return fmt.Errorf("%s: %w", p.What, err)
		}
		if err := syncFile(tmp); err != nil {
			return err
		}
	}
	for i, p := range parts {
		if err := install(tmps[i], p.Dst, replace); err != nil {
			if errors.Is(err, iofs.ErrExist) {
				return &AppearedError{Path: p.Dst}
			}
			return err
		}
		if err := installed(p); err != nil {
			return err
		}
	}
	return nil
}

// CheckError says why a file given to Restore was refused: Reason's words for Err.
type CheckError struct {
	Path string
	Err  error
}

func (e *CheckError) Error() string { return e.Path + ": " + Reason(e.Err) }
func (e *CheckError) Unwrap() error { return e.Err }

// Restore installs each part's backup file as its Dst, replacing what is there: each is copied
// beside its Dst and checked there (the backup file itself is left untouched), the store as
// Baton's at a migration this binary knows, the data database as a sound SQLite database; once
// all passed, each is installed in turn and installed is called with it. It returns the store's
// migration version. A refused file is a *CheckError. The caller holds the data directory's
// exclusive lock.
func Restore(ctx context.Context, parts []Part, installed func(Part)) (version int64, err error) {
	var tmps []string
	defer func() {
		for _, t := range tmps {
			removeDB(t)
		}
	}()
	for _, p := range parts {
		tmp, err := copyToTemp(p.Src, p.Dst)
		if tmp != "" {
			tmps = append(tmps, tmp)
		}
		if err != nil {
			return 0, err
		}
		if p.What == "store" {
			version, err = sqlite.CheckBaton(ctx, tmp)
		} else {
			err = sqlite.Check(ctx, tmp)
		}
		if err != nil {
			return 0, &CheckError{Path: p.Src, Err: err}
		}
		if err := syncFile(tmp); err != nil {
			return 0, err
		}
	}
	for i, p := range parts {
		// A -wal file left beside the new database would be replayed into it: remove the old
		// database's first (what they hold is being discarded anyway).
		for _, suffix := range []string{"-wal", "-shm"} {
			if err := os.Remove(p.Dst + suffix); err != nil && !errors.Is(err, iofs.ErrNotExist) {
				return 0, err
			}
		}
		if err := install(tmps[i], p.Dst, true); err != nil {
			return 0, err
		}
		installed(p)
	}
	return version, nil
}

// OwnFile returns the database file (or its -wal, -shm, or the lock file) of dataDir that path
// is, "" when it is none of them.
func OwnFile(dataDir, path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return ""
	}
	info, statErr := os.Stat(path)
	for _, name := range []string{StoreFile, DataFile, LockFile} {
		for _, suffix := range []string{"", "-wal", "-shm"} {
			f := filepath.Join(dataDir, name+suffix)
			if fa, err := filepath.Abs(f); err == nil && fa == abs {
				return f
			}
			if fi, err := os.Stat(f); err == nil && statErr == nil && os.SameFile(fi, info) {
				return f
			}
		}
	}
	return ""
}

// CheckHeader checks that the file at path starts like a SQLite database: sqlite.ErrNotDatabase
// when it does not.
func CheckHeader(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	const magic = "SQLite format 3\x00"
	head := make([]byte, len(magic))
	if _, err := io.ReadFull(f, head); err != nil || string(head) != magic {
		return sqlite.ErrNotDatabase
	}
	return nil
}

// Reason says why a restored file was refused.
func Reason(err error) string {
	switch {
	case errors.Is(err, sqlite.ErrNotDatabase):
		return "not a SQLite database, or a damaged one (PRAGMA integrity_check failed)"
	case errors.Is(err, sqlite.ErrNotBaton):
		return "a SQLite database, but not Baton's: it has no goose_db_version table"
	case errors.Is(err, sqlite.ErrTooNew):
		latest, _ := sqlite.LatestVersion()
		return fmt.Sprintf("made by a newer Baton: its schema is past migration %d, the newest this binary knows; restore it with that version of baton", latest)
	}
	return err.Error()
}

// Existing is the first destination of parts that exists already, or "".
func Existing(parts []Part) string {
	for _, p := range parts {
		if _, err := os.Lstat(p.Dst); err == nil {
			return p.Dst
		}
	}
	return ""
}

// tempBeside makes an empty temporary file beside dst (VACUUM INTO accepts an empty file), so
// that the rename that puts it in place stays on one file system.
func tempBeside(dst string) (string, error) {
	f, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp-*")
	if err != nil {
		return "", err
	}
	return f.Name(), f.Close()
}

// copyToTemp copies src to a new temporary file beside dst and returns its name (also when the
// copy failed, for the caller to remove).
func copyToTemp(src, dst string) (string, error) {
	in, err := os.Open(src)
	if err != nil {
		return "", err
	}
	defer in.Close()
	out, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".restore-*")
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return out.Name(), fmt.Errorf("copy %s: %w", src, err)
	}
	return out.Name(), out.Close()
}

// install renames tmp to dst; without replace, it refuses (io/fs.ErrExist) when dst exists, with a
// hard link that fails instead of a check that could race. The directory is synced after, so
// that the new name survives a crash.
func install(tmp, dst string, replace bool) error {
	if replace {
		if err := os.Rename(tmp, dst); err != nil {
			return err
		}
	} else {
		if err := os.Link(tmp, dst); err != nil {
			return err
		}
		os.Remove(tmp)
	}
	return syncDir(filepath.Dir(dst))
}

// removeDB removes a database file and the -wal and -shm files SQLite may have made beside it.
func removeDB(path string) {
	for _, suffix := range []string{"", "-wal", "-shm"} {
		os.Remove(path + suffix)
	}
}

func syncFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return f.Close()
}

// syncDir makes a rename in dir durable. Windows cannot open a directory to sync it (its renames
// are journaled by NTFS).
func syncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
