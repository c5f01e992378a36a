package backup

import (
	"context"
	"database/sql"
	"errors"
	iofs "io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/baton-dev/baton/internal/store/sqlite"
)

// dataDir makes a data directory with a migrated store, and a data database when withData.
func dataDir(t *testing.T, withData bool) string {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, StoreFile))
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	if withData {
		db, err := sql.Open("sqlite", filepath.Join(dir, DataFile))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec("CREATE TABLE rows (n INTEGER); INSERT INTO rows VALUES (7)"); err != nil {
			t.Fatal(err)
		}
		db.Close()
	}
	return dir
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// A backup copies the store and the data database beside it, and a restore puts both back in
// another directory, checked; neither leaves a temporary file behind.
func TestBackupAndRestore(t *testing.T) {
	ctx := context.Background()
	src := dataDir(t, true)
	out := filepath.Join(t.TempDir(), "b.db")
	parts := BackupParts(src, out)
	if len(parts) != 2 || parts[0].What != "store" || parts[1].Dst != out+DataSuffix {
		t.Fatalf("backup parts: %+v", parts)
	}
	var installed []string
	if err := Backup(ctx, parts, false, func(p Part) error { installed = append(installed, p.Dst); return nil }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(installed, []string{out, out + DataSuffix}) {
		t.Errorf("installed %v", installed)
	}
	if got := names(t, filepath.Dir(out)); !slices.Equal(got, []string{"b.db", "b.db.data"}) {
		t.Errorf("beside the backup: %v", got)
	}

	into := t.TempDir()
	rparts := RestoreParts(out, into)
	if len(rparts) != 2 || rparts[0].Dst != filepath.Join(into, StoreFile) || rparts[1].Src != out+DataSuffix {
		t.Fatalf("restore parts: %+v", rparts)
	}
	for _, p := range rparts {
		if err := CheckHeader(p.Src); err != nil {
			t.Fatalf("header of %s: %v", p.Src, err)
		}
	}
	installed = nil
	version, err := Restore(ctx, rparts, func(p Part) { installed = append(installed, p.Dst) })
	if err != nil {
		t.Fatal(err)
	}
	if latest, _ := sqlite.LatestVersion(); version != latest {
		t.Errorf("restored at migration %d, want %d", version, latest)
	}
	if len(installed) != 2 {
		t.Errorf("installed %v", installed)
	}
	if got := names(t, into); !slices.Equal(got, []string{StoreFile, DataFile}) {
		t.Errorf("after the restore the directory holds %v", got)
	}
	db, err := sql.Open("sqlite", filepath.Join(into, DataFile))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow("SELECT n FROM rows").Scan(&n); err != nil || n != 7 {
		t.Fatalf("the restored data database: %d, %v", n, err)
	}
}

// Without replace, a destination that exists is never written over.
func TestBackupDoesNotReplaceWithout(t *testing.T) {
	src := dataDir(t, false)
	out := filepath.Join(t.TempDir(), "b.db")
	if err := os.WriteFile(out, []byte("earlier"), 0o600); err != nil {
		t.Fatal(err)
	}
	parts := BackupParts(src, out)
	if Existing(parts) != out {
		t.Errorf("Existing: %q, want %q", Existing(parts), out)
	}
	err := Backup(context.Background(), parts, false, func(Part) error { t.Error("installed"); return nil })
	var appeared *AppearedError
	if !errors.As(err, &appeared) || appeared.Path != out || !errors.Is(err, iofs.ErrExist) {
		t.Fatalf("backup over an existing file: %v", err)
	}
	if b, _ := os.ReadFile(out); string(b) != "earlier" {
		t.Fatalf("the file was changed: %q", b)
	}
	if got := names(t, filepath.Dir(out)); !slices.Equal(got, []string{"b.db"}) {
		t.Errorf("beside the backup: %v", got)
	}
	if err := Backup(context.Background(), parts, true, func(Part) error { return nil }); err != nil {
		t.Fatalf("with replace: %v", err)
	}
	if _, err := sqlite.CheckBaton(context.Background(), out); err != nil {
		t.Fatal(err)
	}
}

// A file that is not Baton's is refused, with its reason, and nothing is installed.
func TestRestoreRefuses(t *testing.T) {
	tmp := t.TempDir()
	text := filepath.Join(tmp, "notes.txt")
	if err := os.WriteFile(text, []byte("not a database at all, but long enough to have a header"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := CheckHeader(text); !errors.Is(err, sqlite.ErrNotDatabase) {
		t.Errorf("header of a text file: %v", err)
	}
	other := filepath.Join(tmp, "other.db")
	db, err := sql.Open("sqlite", other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("CREATE TABLE things (id INTEGER)"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	into := t.TempDir()
	_, err = Restore(context.Background(), RestoreParts(other, into), func(Part) { t.Error("installed") })
	var refused *CheckError
	if !errors.As(err, &refused) || refused.Path != other || !errors.Is(err, sqlite.ErrNotBaton) {
		t.Fatalf("restore of another database: %v", err)
	}
	if want := other + ": " + Reason(sqlite.ErrNotBaton); err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
	if got := names(t, into); len(got) != 0 {
		t.Errorf("the refused restore left %v", got)
	}
	for _, e := range []error{sqlite.ErrNotDatabase, sqlite.ErrNotBaton, sqlite.ErrTooNew} {
		if Reason(e) == e.Error() {
			t.Errorf("no reason for %v", e)
		}
	}
}

func TestOwnFile(t *testing.T) {
	dir := dataDir(t, true)
	for _, name := range []string{StoreFile, DataFile, LockFile, StoreFile + "-wal"} {
		if got := OwnFile(dir, filepath.Join(dir, name)); got != filepath.Join(dir, name) {
			t.Errorf("OwnFile(%s) = %q", name, got)
		}
	}
	link := filepath.Join(t.TempDir(), "link.db")
	if err := os.Link(filepath.Join(dir, StoreFile), link); err != nil {
		t.Fatal(err)
	}
	if got := OwnFile(dir, link); got != filepath.Join(dir, StoreFile) {
		t.Errorf("a hard link to the store: %q", got)
	}
	if got := OwnFile(dir, filepath.Join(t.TempDir(), StoreFile)); got != "" {
		t.Errorf("a file elsewhere: %q", got)
	}
}

// The shared locks of servers go together; a restore's exclusive lock excludes them.
func TestLockDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new")
	a, err := LockDir(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	b, err := LockDir(dir, false)
	if err != nil {
		t.Fatalf("a second shared lock: %v", err)
	}
	if _, err := LockDir(dir, true); !errors.Is(err, ErrLocked) {
		t.Fatalf("an exclusive lock beside shared ones: %v", err)
	}
	a.Release()
	b.Release()
	x, err := LockDir(dir, true)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	if _, err := LockDir(dir, false); !errors.Is(err, ErrLocked) {
		t.Fatalf("a shared lock beside an exclusive one: %v", err)
	}
}
