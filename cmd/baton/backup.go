package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"runtime"

	"github.com/baton-dev/baton/internal/store/sqlite"
)

// dataSuffix names the copy of the data database (buffered datasets' rows) beside a backup file.
const dataSuffix = ".data"

// backupPart is one database file of a data directory and where its copy goes.
type backupPart struct {
	what     string // for messages
	src, dst string
}

// runBackup is `baton backup`: an online copy of a `baton dev` data directory's databases. The
// store (baton.db) goes to --out, the data database (data.db) beside it as --out.data, each a
// consistent snapshot taken with VACUUM INTO while the server goes on serving. The store first:
// the sink commits a batch in the store only after loading its rows, so every batch the store
// copy calls committed has its rows in the data copy taken after it.
func runBackup(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("baton backup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "", "`FILE` to write the copy of the store to; the data database's goes to FILE"+dataSuffix)
	dataDir := fs.String("data-dir", "./.baton", "`DIR`, the data directory of the baton dev to back up")
	force := fs.Bool("force", false, "replace FILE (and FILE"+dataSuffix+") if they exist")
	if code, ok := parseFlags(ctx, fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "baton backup: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *out == "" {
		fmt.Fprintln(stderr, "baton backup: set --out FILE, the file to write the copy to")
		return 2
	}
	src := filepath.Join(*dataDir, dbFile)
	if _, err := os.Stat(src); err != nil {
		fmt.Fprintf(stderr, "baton backup: no database to back up: %v (is --data-dir right?)\n", err)
		return 1
	}
	parts := []backupPart{{what: "store", src: src, dst: *out}}
	if _, err := os.Stat(filepath.Join(*dataDir, dataFile)); err == nil {
		parts = append(parts, backupPart{what: "data database", src: filepath.Join(*dataDir, dataFile), dst: *out + dataSuffix})
	}
	for _, p := range parts {
		if f := dataDirFile(*dataDir, p.dst); f != "" {
			fmt.Fprintf(stderr, "baton backup: --out %s would write over %s, a file of the data directory; write the backup elsewhere\n", *out, f)
			return 2
		}
	}
	if dst := existingDst(parts); dst != "" && !*force {
		fmt.Fprintf(stderr, "baton backup: %s exists; pass --force to replace it\n", dst)
		return 1
	}
	var tmps []string
	defer func() {
		for _, t := range tmps {
			os.Remove(t)
		}
	}()
	for _, p := range parts {
		tmp, err := backupTemp(p.dst)
		if err != nil {
			fmt.Fprintln(stderr, "baton backup:", err)
			return 1
		}
		tmps = append(tmps, tmp)
		if err := sqlite.Copy(ctx, p.src, tmp); err != nil {
			fmt.Fprintf(stderr, "baton backup: %s: %v\n", p.what, err)
			return 1
		}
		if err := syncFile(tmp); err != nil {
			fmt.Fprintln(stderr, "baton backup:", err)
			return 1
		}
	}
	for i, p := range parts {
		if err := install(tmps[i], p.dst, *force); err != nil {
			if errors.Is(err, iofs.ErrExist) {
				err = fmt.Errorf("%s appeared meanwhile; pass --force to replace it", p.dst)
			}
			fmt.Fprintln(stderr, "baton backup:", err)
			return 1
		}
		info, err := os.Stat(p.dst)
		if err != nil {
			fmt.Fprintln(stderr, "baton backup:", err)
			return 1
		}
		fmt.Fprintf(stderr, "baton backup: %s %s -> %s (%d bytes)\n", p.what, p.src, p.dst, info.Size())
	}
	if len(parts) == 1 {
		fmt.Fprintf(stderr, "baton backup: no data database (%s) to copy\n", filepath.Join(*dataDir, dataFile))
	}
	if _, err := os.Stat(filepath.Join(*dataDir, "blobs")); err == nil {
		fmt.Fprintf(stderr, "baton backup: not copied: the batch files under %s (copy that directory after the backup)\n", filepath.Join(*dataDir, "blobs"))
	}
	for _, p := range parts {
		fmt.Fprintln(stdout, p.dst)
	}
	return 0
}

// runRestore is `baton restore`: installs a backup as a data directory's database while no
// `baton dev` runs there. The next `baton dev` migrates it to this binary's level.
func runRestore(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("baton restore", flag.ContinueOnError)
	fs.SetOutput(stderr)
	from := fs.String("from", "", "backup `FILE` as baton backup --out wrote it (FILE"+dataSuffix+" beside it is the data database's)")
	dataDir := fs.String("data-dir", "./.baton", "`DIR`, the data directory to restore into")
	force := fs.Bool("force", false, "replace the databases already in DIR (what they hold is lost)")
	if code, ok := parseFlags(ctx, fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "baton restore: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *from == "" {
		fmt.Fprintln(stderr, "baton restore: set --from FILE, a file `baton backup` wrote")
		return 2
	}
	if info, err := os.Stat(*from); err != nil || !info.Mode().IsRegular() {
		if err == nil {
			err = fmt.Errorf("%s is not a regular file", *from)
		}
		fmt.Fprintln(stderr, "baton restore:", err)
		return 1
	}
	parts := []backupPart{{what: "store", src: *from, dst: filepath.Join(*dataDir, dbFile)}}
	if _, err := os.Stat(*from + dataSuffix); err == nil {
		parts = append(parts, backupPart{what: "data database", src: *from + dataSuffix, dst: filepath.Join(*dataDir, dataFile)})
	}
	// The header first, before anything is created: the full checks run on the copy.
	for _, p := range parts {
		if f := dataDirFile(*dataDir, p.src); f != "" {
			fmt.Fprintf(stderr, "baton restore: %s is %s itself: restore from a backup that `baton backup` wrote\n", p.src, f)
			return 2
		}
		if err := sqliteHeader(p.src); err != nil {
			fmt.Fprintf(stderr, "baton restore: %s: %v\n", p.src, restoreReason(err))
			return 1
		}
	}
	lock, err := lockDataDir(*dataDir, true)
	if errors.Is(err, errDirLocked) {
		fmt.Fprintf(stderr, "baton restore: a `baton dev` is running on %s (or another restore is); stop it first\n", *dataDir)
		return 1
	}
	if err != nil {
		fmt.Fprintln(stderr, "baton restore:", err)
		return 1
	}
	defer lock.Release()
	if dst := existingDst(parts); dst != "" && !*force {
		fmt.Fprintf(stderr, "baton restore: %s exists; pass --force to replace it (what it holds is lost)\n", dst)
		return 1
	}
	var tmps []string
	defer func() {
		for _, t := range tmps {
			removeDB(t)
		}
	}()
	var version int64
	for _, p := range parts {
		tmp, err := copyToTemp(p.src, p.dst)
		if tmp != "" {
			tmps = append(tmps, tmp)
		}
		if err != nil {
			fmt.Fprintln(stderr, "baton restore:", err)
			return 1
		}
		// Checked on the copy: the backup file itself is left untouched.
		if p.what == "store" {
			version, err = sqlite.CheckBaton(ctx, tmp)
		} else {
			err = sqlite.Check(ctx, tmp)
		}
		if err != nil {
			fmt.Fprintf(stderr, "baton restore: %s: %v\n", p.src, restoreReason(err))
			return 1
		}
		if err := syncFile(tmp); err != nil {
			fmt.Fprintln(stderr, "baton restore:", err)
			return 1
		}
	}
	for i, p := range parts {
		// A -wal file left beside the new database would be replayed into it: remove the old
		// database's first (with --force, what they hold is being discarded anyway).
		for _, suffix := range []string{"-wal", "-shm"} {
			if err := os.Remove(p.dst + suffix); err != nil && !errors.Is(err, iofs.ErrNotExist) {
				fmt.Fprintln(stderr, "baton restore:", err)
				return 1
			}
		}
		if err := install(tmps[i], p.dst, true); err != nil {
			fmt.Fprintln(stderr, "baton restore:", err)
			return 1
		}
		fmt.Fprintf(stderr, "baton restore: %s %s -> %s\n", p.what, p.src, p.dst)
	}
	if latest, _ := sqlite.LatestVersion(); version < latest {
		fmt.Fprintf(stderr, "baton restore: the backup is at migration %d; `baton dev --data-dir %s` brings it to %d when it starts\n", version, *dataDir, latest)
	} else {
		fmt.Fprintf(stderr, "baton restore: the backup is at migration %d, this binary's newest\n", version)
	}
	if len(parts) == 1 {
		if _, err := os.Stat(filepath.Join(*dataDir, dataFile)); err == nil {
			fmt.Fprintf(stderr, "baton restore: kept %s: there is no %s beside the backup\n", filepath.Join(*dataDir, dataFile), *from+dataSuffix)
		}
	}
	for _, p := range parts {
		fmt.Fprintln(stdout, p.dst)
	}
	return 0
}

// dataDirFile returns the database file (or its -wal, -shm, or the lock file) of dataDir that
// path is, "" when it is none of them.
func dataDirFile(dataDir, path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return ""
	}
	info, statErr := os.Stat(path)
	for _, name := range []string{dbFile, dataFile, lockFile} {
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

// sqliteHeader checks that the file at path starts like a SQLite database: sqlite.ErrNotDatabase
// when it does not.
func sqliteHeader(path string) error {
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

// restoreReason says why a restored file was refused.
func restoreReason(err error) string {
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

// backupTemp makes an empty temporary file beside dst (VACUUM INTO accepts an empty file), so that
// the rename that puts it in place stays on one file system.
func backupTemp(dst string) (string, error) {
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

// existingDst is the first destination of parts that exists already, or "".
func existingDst(parts []backupPart) string {
	for _, p := range parts {
		if _, err := os.Lstat(p.dst); err == nil {
			return p.dst
		}
	}
	return ""
}
