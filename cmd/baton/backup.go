package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/baton-dev/baton/internal/backup"
	"github.com/baton-dev/baton/internal/cmdline"
	"github.com/baton-dev/baton/internal/store/sqlite"
)

// runBackup is `baton backup`: an online copy of a `baton dev` data directory's databases. The
// store (baton.db) goes to --out, the data database (data.db) beside it as --out.data, each a
// consistent snapshot taken with VACUUM INTO while the server goes on serving. The store first:
// the sink commits a batch in the store only after loading its rows, so every batch the store
// copy calls committed has its rows in the data copy taken after it.
func runBackup(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("baton backup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "", "`FILE` to write the copy of the store to; the data database's goes to FILE"+backup.DataSuffix)
	dataDir := fs.String("data-dir", "./.baton", "`DIR`, the data directory of the baton dev to back up")
	force := fs.Bool("force", false, "replace FILE (and FILE"+backup.DataSuffix+") if they exist")
	if code, ok := cmdline.ParseFlags(ctx, fs, args); !ok {
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
	parts := backup.BackupParts(*dataDir, *out)
	for _, p := range parts {
		if f := backup.OwnFile(*dataDir, p.Dst); f != "" {
			fmt.Fprintf(stderr, "baton backup: --out %s would write over %s, a file of the data directory; write the backup elsewhere\n", *out, f)
			return 2
		}
	}
	if dst := backup.Existing(parts); dst != "" && !*force {
		fmt.Fprintf(stderr, "baton backup: %s exists; pass --force to replace it\n", dst)
		return 1
	}
	err := backup.Backup(ctx, parts, *force, func(p backup.Part) error {
		info, err := os.Stat(p.Dst)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "baton backup: %s %s -> %s (%d bytes)\n", p.What, p.Src, p.Dst, info.Size())
		return nil
	})
	var appeared *backup.AppearedError
	if errors.As(err, &appeared) {
		err = fmt.Errorf("%v; pass --force to replace it", appeared)
	}
	if err != nil {
		fmt.Fprintln(stderr, "baton backup:", err)
		return 1
	}
	if len(parts) == 1 {
		fmt.Fprintf(stderr, "baton backup: no data database (%s) to copy\n", filepath.Join(*dataDir, dataFile))
	}
	if _, err := os.Stat(filepath.Join(*dataDir, "blobs")); err == nil {
		fmt.Fprintf(stderr, "baton backup: not copied: the batch files under %s (copy that directory after the backup)\n", filepath.Join(*dataDir, "blobs"))
	}
	for _, p := range parts {
		fmt.Fprintln(stdout, p.Dst)
	}
	return 0
}

// runRestore is `baton restore`: installs a backup as a data directory's database while no
// `baton dev` runs there. The next `baton dev` migrates it to this binary's level.
func runRestore(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("baton restore", flag.ContinueOnError)
	fs.SetOutput(stderr)
	from := fs.String("from", "", "backup `FILE` as baton backup --out wrote it (FILE"+backup.DataSuffix+" beside it is the data database's)")
	dataDir := fs.String("data-dir", "./.baton", "`DIR`, the data directory to restore into")
	force := fs.Bool("force", false, "replace the databases already in DIR (what they hold is lost)")
	if code, ok := cmdline.ParseFlags(ctx, fs, args); !ok {
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
	parts := backup.RestoreParts(*from, *dataDir)
	// The header first, before anything is created: the full checks run on the copy.
	for _, p := range parts {
		if f := backup.OwnFile(*dataDir, p.Src); f != "" {
			fmt.Fprintf(stderr, "baton restore: %s is %s itself: restore from a backup that `baton backup` wrote\n", p.Src, f)
			return 2
		}
		if err := backup.CheckHeader(p.Src); err != nil {
			fmt.Fprintf(stderr, "baton restore: %s: %v\n", p.Src, backup.Reason(err))
			return 1
		}
	}
	lock, err := backup.LockDir(*dataDir, true)
	if errors.Is(err, backup.ErrLocked) {
		fmt.Fprintf(stderr, "baton restore: a `baton dev` is running on %s (or another restore is); stop it first\n", *dataDir)
		return 1
	}
	if err != nil {
		fmt.Fprintln(stderr, "baton restore:", err)
		return 1
	}
	defer lock.Release()
	if dst := backup.Existing(parts); dst != "" && !*force {
		fmt.Fprintf(stderr, "baton restore: %s exists; pass --force to replace it (what it holds is lost)\n", dst)
		return 1
	}
	version, err := backup.Restore(ctx, parts, func(p backup.Part) {
		fmt.Fprintf(stderr, "baton restore: %s %s -> %s\n", p.What, p.Src, p.Dst)
	})
	if err != nil {
		fmt.Fprintln(stderr, "baton restore:", err)
		return 1
	}
	if latest, _ := sqlite.LatestVersion(); version < latest {
		fmt.Fprintf(stderr, "baton restore: the backup is at migration %d; `baton dev --data-dir %s` brings it to %d when it starts\n", version, *dataDir, latest)
	} else {
		fmt.Fprintf(stderr, "baton restore: the backup is at migration %d, this binary's newest\n", version)
	}
	if len(parts) == 1 {
		if _, err := os.Stat(filepath.Join(*dataDir, dataFile)); err == nil {
			fmt.Fprintf(stderr, "baton restore: kept %s: there is no %s beside the backup\n", filepath.Join(*dataDir, dataFile), *from+backup.DataSuffix)
		}
	}
	for _, p := range parts {
		fmt.Fprintln(stdout, p.Dst)
	}
	return 0
}
