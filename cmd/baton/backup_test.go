package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/client"
	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/backup"
	"github.com/baton-dev/baton/internal/store/sqlite"
	"github.com/baton-dev/baton/worker"
)

// backupDev is a `baton dev` running in this process on a data directory.
type backupDev struct {
	producer, internal string
	stdout, stderr     *syncBuffer
	cancel             context.CancelFunc
	exited             chan int
}

var bannerKey = regexp.MustCompile(`API key\s+(bk_\S+)`)

func startBackupDev(t *testing.T, dir string) *backupDev {
	t.Helper()
	return startDevWith(t, dir, "--sink=false")
}

// startDevWith starts `baton dev` on dir with the given flags besides its listeners.
func startDevWith(t *testing.T, dir string, flags ...string) *backupDev {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	d := &backupDev{stdout: &syncBuffer{}, stderr: &syncBuffer{}, cancel: cancel, exited: make(chan int, 1)}
	args := append([]string{"dev", "--data-dir", dir, "--listen", "127.0.0.1:0", "--internal-listen", "127.0.0.1:0",
		"--metrics-listen="}, flags...)
	go func() { d.exited <- run(ctx, args, d.stdout, d.stderr) }()
	t.Cleanup(func() { d.stop(t) })
	waitForLine(t, d.stdout, regexp.MustCompile("Press Ctrl-C"), d.exited, d.stderr)
	banner := d.stdout.String()
	d.producer = "http://" + bannerProducer.FindStringSubmatch(banner)[1]
	d.internal = "http://" + bannerWorker.FindStringSubmatch(banner)[1]
	// The banner comes before the data database is open; /readyz answers once the APIs serve.
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := http.Get(d.producer + "/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return d
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("baton dev on %s never became ready: %v\n%s", dir, err, d.stderr.String())
		}
		time.Sleep(20 * time.Millisecond) // waiting for a real server
	}
}

// stop shuts the server down and checks it exited cleanly; once only.
func (d *backupDev) stop(t *testing.T) {
	t.Helper()
	if d.cancel == nil {
		return
	}
	d.cancel()
	d.cancel = nil
	select {
	case code := <-d.exited:
		if code != 0 {
			t.Errorf("baton dev exited %d; stderr:\n%s", code, d.stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Error("baton dev did not shut down")
	}
}

// runDoublingWorker runs a worker SDK worker for the named tasks, each answering {"doubled": 2n}
// for its input {"n": n}, until the test ends or the returned stop is called (once its server is to
// stop: a worker whose server is gone cannot deliver the outcomes of the tasks it still runs).
func runDoublingWorker(t *testing.T, internalURL string, names ...string) (stop func()) {
	t.Helper()
	w, err := worker.New(internalURL, worker.WithLogger(slog.New(slog.DiscardHandler)), worker.WithPollWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		w.Handle(name, func(ctx context.Context, tk *worker.Task) (any, error) {
			var in struct{ N int }
			if err := json.Unmarshal(tk.Input, &in); err != nil {
				return nil, worker.Permanent(err)
			}
			return map[string]int{"doubled": 2 * in.N}, nil
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("worker: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func waitJob(t *testing.T, c *client.Client, id, status string) *client.Job {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		j, err := c.GetJob(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if j.Status == status {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s is %s, want %s", id, j.Status, status)
		}
		time.Sleep(20 * time.Millisecond) // polling a real server
	}
}

func work(n int) json.RawMessage { return json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)) }

// A backup taken while `baton dev` serves a stream of submissions and completions holds every
// job acknowledged before it began, with its tasks' ids, statuses and outputs; restored into a
// fresh data directory, `baton dev` serves them and goes on with the unfinished ones.
func TestBackupWhileServingRestoresTheJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	dev := startBackupDev(t, dir)
	key := bannerKey.FindStringSubmatch(dev.stdout.String())
	if key == nil {
		t.Fatalf("the first start prints no API key:\n%s", dev.stdout.String())
	}
	c := client.New(dev.producer, key[1])
	stopWorker := runDoublingWorker(t, dev.internal, "work")

	// Finished jobs of two tasks each, and one whose "hold" task no worker here runs.
	var fixed []string
	for i := range 4 {
		res, err := c.SubmitJob(ctx, client.SubmitJobRequest{Tasks: []client.Task{
			{TaskID: "a", Name: "work", Input: work(i)},
			{TaskID: "b", Name: "work", Input: work(10 + i), DependsOn: []string{"a"}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		fixed = append(fixed, res.JobID)
	}
	held, err := c.SubmitJob(ctx, client.SubmitJobRequest{Tasks: []client.Task{
		{TaskID: "done", Name: "work", Input: work(7)},
		{TaskID: "held", Name: "hold", Input: work(8)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]*client.Job{}
	for _, id := range fixed {
		want[id] = waitJob(t, c, id, client.JobCompleted)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		j, err := c.GetJob(ctx, held.JobID)
		if err != nil {
			t.Fatal(err)
		}
		if j.Progress[client.TaskCompleted] == 1 {
			want[held.JobID] = j
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the held job's first task never completed: %+v", j)
		}
		time.Sleep(20 * time.Millisecond) // polling a real server
	}

	// A writer submits jobs, which the worker completes, all through the backup.
	var (
		started   atomic.Bool
		mu        sync.Mutex
		before    []string // acknowledged before the backup began
		submitted int
	)
	stopWriting := make(chan struct{})
	writerDone := make(chan error, 1)
	go func() {
		for n := 0; ; n++ {
			select {
			case <-stopWriting:
				writerDone <- nil
				return
			default:
			}
			res, err := c.SubmitJob(ctx, client.SubmitJobRequest{Tasks: []client.Task{{TaskID: "w", Name: "work", Input: work(n)}}})
			if err != nil {
				writerDone <- err
				return
			}
			mu.Lock()
			if !started.Load() {
				before = append(before, res.JobID)
			}
			submitted++
			mu.Unlock()
		}
	}()
	for { // some writes first
		mu.Lock()
		n := submitted
		mu.Unlock()
		if n >= 20 {
			break
		}
		time.Sleep(5 * time.Millisecond) // waiting for the writer
	}
	out := filepath.Join(t.TempDir(), "baton-backup.db")
	mu.Lock()
	started.Store(true)
	mu.Unlock()
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"backup", "--data-dir", dir, "--out", out}, &stdout, &stderr)
	mu.Lock()
	during := submitted - len(before)
	mu.Unlock()
	close(stopWriting)
	if err := <-writerDone; err != nil {
		t.Fatalf("writer: %v", err)
	}
	if code != 0 {
		t.Fatalf("backup: exit %d: %s", code, stderr.String())
	}
	if got, wantOut := stdout.String(), out+"\n"+out+backup.DataSuffix+"\n"; got != wantOut {
		t.Errorf("backup printed %q on stdout, want the paths %q", got, wantOut)
	}
	if !strings.Contains(stderr.String(), "store "+filepath.Join(dir, dbFile)+" -> "+out) {
		t.Errorf("backup's stderr does not say what it wrote:\n%s", stderr.String())
	}
	t.Logf("backup taken with %d jobs submitted before it and %d while it ran", len(before), during)
	for _, id := range before {
		if _, ok := want[id]; !ok {
			j, err := c.GetJob(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			want[id] = j
		}
	}
	stopWorker()
	dev.stop(t)

	fresh := filepath.Join(t.TempDir(), "restored")
	stdout.Reset()
	stderr.Reset()
	if code := run(ctx, []string{"restore", "--from", out, "--data-dir", fresh}, &stdout, &stderr); code != 0 {
		t.Fatalf("restore: exit %d: %s", code, stderr.String())
	}
	if got := stdout.String(); got != filepath.Join(fresh, dbFile)+"\n"+filepath.Join(fresh, dataFile)+"\n" {
		t.Errorf("restore printed %q on stdout", got)
	}
	restored := startBackupDev(t, fresh)
	if bannerKey.MatchString(restored.stdout.String()) {
		t.Errorf("the restored server made a new API key instead of keeping the backup's:\n%s", restored.stdout.String())
	}
	rc := client.New(restored.producer, key[1])
	for id, w := range want {
		got, err := rc.GetJob(ctx, id)
		if err != nil {
			t.Fatalf("job %s after restore: %v", id, err)
		}
		if id != held.JobID && !contains(fixed, id) {
			// A writer's job: the worker may have completed it after the backup began.
			checkWriterJob(t, got)
			continue
		}
		if g, e := jobShape(got), jobShape(w); g != e {
			t.Errorf("job %s after restore:\n%s\nwant\n%s", id, g, e)
		}
	}
	// The restored server goes on: the held task runs to the end.
	runDoublingWorker(t, restored.internal, "hold")
	if j := waitJob(t, rc, held.JobID, client.JobCompleted); string(j.Tasks[1].Output) != `{"doubled":16}` {
		t.Errorf("the held task's output after restore: %s", j.Tasks[1].Output)
	}
}

func contains(ids []string, id string) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// checkWriterJob checks a one-task job of the writer is whole: pending or running, or completed
// with its output.
func checkWriterJob(t *testing.T, j *client.Job) {
	t.Helper()
	if len(j.Tasks) != 1 || j.TotalTasks != 1 {
		t.Errorf("job %s after restore has %d tasks (total %d), want 1", j.JobID, len(j.Tasks), j.TotalTasks)
		return
	}
	if tk := j.Tasks[0]; tk.Status == client.TaskCompleted {
		var out struct{ Doubled int }
		if err := json.Unmarshal(tk.Output, &out); err != nil || out.Doubled%2 != 0 || j.Status != client.JobCompleted {
			t.Errorf("job %s after restore: %s, task output %s", j.JobID, j.Status, tk.Output)
		}
	}
}

// jobShape is what a job must keep across a backup and restore.
func jobShape(j *client.Job) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s total=%d created=%d\n", j.JobID, j.Status, j.TotalTasks, j.CreatedAt)
	for _, tk := range j.Tasks {
		fmt.Fprintf(&b, "  %s %s %s attempt=%d output=%s\n", tk.TaskID, tk.ID, tk.Status, tk.Attempt, tk.Output)
	}
	return b.String()
}

// migratedDir makes a data directory with a migrated, empty store and returns it.
func migratedDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, dbFile))
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	return dir
}

func runCmd(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func fileContent(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestBackupRefusesToOverwriteWithoutForce(t *testing.T) {
	t.Parallel()
	dir := migratedDir(t)
	out := filepath.Join(t.TempDir(), "b.db")
	if err := os.WriteFile(out, []byte("earlier"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCmd("backup", "--data-dir", dir, "--out", out)
	if code != 1 || stdout != "" || !strings.Contains(stderr, out+" exists; pass --force") {
		t.Fatalf("backup over an existing file: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if fileContent(t, out) != "earlier" {
		t.Fatal("the refused backup changed the existing file")
	}
	if code, stdout, stderr = runCmd("backup", "--data-dir", dir, "--out", out, "--force"); code != 0 || stdout != out+"\n" {
		t.Fatalf("backup --force: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if _, err := sqlite.CheckBaton(context.Background(), out); err != nil {
		t.Fatalf("the forced backup: %v", err)
	}
	entries, _ := os.ReadDir(filepath.Dir(out))
	if len(entries) != 1 {
		t.Errorf("backup left files beside its output: %v", entries)
	}
}

func TestBackupErrors(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "b.db")
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"no --out", []string{"backup", "--data-dir", t.TempDir()}, 2, "set --out FILE"},
		{"argument", []string{"backup", "--out", out, "extra"}, 2, `unexpected argument "extra"`},
		{"no database", []string{"backup", "--data-dir", t.TempDir(), "--out", out}, 1, "no database to back up"},
	} {
		code, stdout, stderr := runCmd(tc.args...)
		if code != tc.code || stdout != "" || !strings.Contains(stderr, tc.msg) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit %d and %q", tc.name, code, stdout, stderr, tc.code, tc.msg)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a failed backup wrote its output")
	}
}

// backupOf backs up a fresh migrated data directory and returns the backup file.
func backupOf(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "b.db")
	if code, _, stderr := runCmd("backup", "--data-dir", migratedDir(t), "--out", out); code != 0 {
		t.Fatalf("backup: %s", stderr)
	}
	return out
}

func TestRestoreRefusesWhatIsNotABatonDatabase(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	text := filepath.Join(tmp, "notes.txt")
	if err := os.WriteFile(text, []byte("not a database at all, but long enough to have a header"), 0o600); err != nil {
		t.Fatal(err)
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
	tooNew := backupOf(t)
	db, err = sql.Open("sqlite", tooNew)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("INSERT INTO goose_db_version (version_id, is_applied) VALUES (99999, 1)"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	damaged := filepath.Join(tmp, "damaged.db")
	b, err := os.ReadFile(backupOf(t))
	if err != nil {
		t.Fatal(err)
	}
	for i := 4096; i < len(b); i++ { // every page past the first
		b[i] = 0xA5
	}
	if err := os.WriteFile(damaged, b, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, from, msg string }{
		{"missing", filepath.Join(tmp, "missing.db"), "no such file"},
		{"text", text, "not a SQLite database"},
		{"other database", other, "not Baton's"},
		{"newer", tooNew, "made by a newer Baton"},
		{"damaged", damaged, "not a SQLite database, or a damaged one"},
	} {
		into := filepath.Join(t.TempDir(), "restored")
		code, stdout, stderr := runCmd("restore", "--from", tc.from, "--data-dir", into)
		if code != 1 || stdout != "" || !strings.Contains(stderr, tc.msg) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 1 and %q", tc.name, code, stdout, stderr, tc.msg)
		}
		if _, err := os.Stat(filepath.Join(into, dbFile)); err == nil {
			t.Errorf("%s: the refused restore installed a database", tc.name)
		}
		entries, _ := os.ReadDir(into)
		for _, e := range entries {
			if e.Name() != backup.LockFile {
				t.Errorf("%s: the refused restore left %s", tc.name, e.Name())
			}
		}
	}
	if code, _, stderr := runCmd("restore", "--data-dir", tmp); code != 2 || !strings.Contains(stderr, "set --from FILE") {
		t.Errorf("restore without --from: exit %d, %s", code, stderr)
	}
}

func TestRestoreRefusesToReplaceAnExistingDatabaseWithoutForce(t *testing.T) {
	t.Parallel()
	from := backupOf(t)
	dir := migratedDir(t)
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, dbFile))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := auth.CreateKey(context.Background(), st, "old", "acme", "", time.Now()); err != nil {
		t.Fatal(err)
	}
	st.Close()
	code, stdout, stderr := runCmd("restore", "--from", from, "--data-dir", dir)
	if code != 1 || stdout != "" || !strings.Contains(stderr, "exists; pass --force") {
		t.Fatalf("restore over a database: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, _, stderr := runCmd("restore", "--from", from, "--data-dir", dir, "--force"); code != 0 {
		t.Fatalf("restore --force: exit %d: %s", code, stderr)
	}
	st, err = sqlite.Open(context.Background(), filepath.Join(dir, dbFile))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if keys, err := st.APIKeyList(context.Background()); err != nil || len(keys) != 0 {
		t.Fatalf("after restore --force the store has keys %v (%v); the backup had none", keys, err)
	}
}

func TestRestoreRefusesWhileDevRuns(t *testing.T) {
	t.Parallel()
	from := backupOf(t)
	dir := t.TempDir()
	dev := startBackupDev(t, dir)
	before := fileContent(t, filepath.Join(dir, dbFile))
	code, stdout, stderr := runCmd("restore", "--from", from, "--data-dir", dir, "--force")
	if code != 1 || stdout != "" || !strings.Contains(stderr, "a `baton dev` is running on "+dir) {
		t.Fatalf("restore while dev runs: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if fileContent(t, filepath.Join(dir, dbFile)) != before {
		t.Fatal("the refused restore changed the running server's database")
	}
	dev.stop(t)
	if code, _, stderr := runCmd("restore", "--from", from, "--data-dir", dir, "--force"); code != 0 {
		t.Fatalf("restore once dev stopped: exit %d: %s", code, stderr)
	}
}

func TestDevRefusesToStartDuringARestore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	lock, err := backup.LockDir(dir, true)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	var stderr syncBuffer
	code := run(context.Background(), []string{"dev", "--data-dir", dir, "--listen", "127.0.0.1:0", "--internal-listen", "127.0.0.1:0",
		"--metrics-listen="}, io.Discard, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "a `baton restore` is replacing the database") {
		t.Fatalf("dev during a restore: exit %d, %s", code, stderr.String())
	}
	if _, err := os.Stat(filepath.Join(dir, dbFile)); err == nil {
		t.Fatal("dev created a database while the restore held the directory")
	}
}

// A backup of an older release's schema restores as it is, and the next `baton dev` migrates it.
func TestRestoreOfAnOlderSchemaIsMigratedOnTheNextStart(t *testing.T) {
	t.Parallel()
	from := backupOf(t)
	latest, err := sqlite.LatestVersion()
	if err != nil {
		t.Fatal(err)
	}
	// Back to the schema before the newest migration, as its Down section leaves it.
	down := strings.SplitN(fileContent(t, newestSQLiteMigration(t)), "-- +goose Down", 2)[1]
	db, err := sql.Open("sqlite", from)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(down); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("DELETE FROM goose_db_version WHERE version_id = ?", latest); err != nil {
		t.Fatal(err)
	}
	db.Close()
	dir := filepath.Join(t.TempDir(), "restored")
	code, _, stderr := runCmd("restore", "--from", from, "--data-dir", dir)
	if want := fmt.Sprintf("at migration %d; `baton dev --data-dir %s` brings it to %d", latest-1, dir, latest); code != 0 || !strings.Contains(stderr, want) {
		t.Fatalf("restore: exit %d, stderr %q; want %q", code, stderr, want)
	}
	startBackupDev(t, dir).stop(t)
	if v, err := sqlite.CheckBaton(context.Background(), filepath.Join(dir, dbFile)); err != nil || v != latest {
		t.Fatalf("after baton dev started on the restored backup: migration %d (%v), want %d", v, err, latest)
	}
}

func newestSQLiteMigration(t *testing.T) string {
	t.Helper()
	files, err := filepath.Glob("../../internal/store/sqlite/migrations/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("no SQLite migrations (%v)", err)
	}
	return files[len(files)-1]
}

// A backup never writes over the databases it copies, nor a restore reads from the ones it
// replaces.
func TestBackupAndRestoreRefuseTheDataDirectorysOwnFiles(t *testing.T) {
	t.Parallel()
	dir := migratedDir(t)
	db := filepath.Join(dir, dbFile)
	before := fileContent(t, db)
	if code, _, stderr := runCmd("backup", "--data-dir", dir, "--out", db, "--force"); code != 2 || !strings.Contains(stderr, "a file of the data directory") {
		t.Errorf("backup over its own database: exit %d, %s", code, stderr)
	}
	if code, _, stderr := runCmd("restore", "--data-dir", dir, "--from", db, "--force"); code != 2 || !strings.Contains(stderr, "itself") {
		t.Errorf("restore from its own database: exit %d, %s", code, stderr)
	}
	if fileContent(t, db) != before {
		t.Error("the refused commands changed the database")
	}
}
