package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/client"
	"github.com/baton-dev/baton/internal/buildtest"
	"github.com/baton-dev/baton/internal/store/storetest"
	"github.com/baton-dev/baton/worker"
)

// skipOrFail skips the test with why, or fails it on CI (CI=true), where the check must run.
func skipOrFail(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true: "+format, args...)
	}
	t.Skipf(format, args...)
}

// gitOut runs git in dir and returns its trimmed output.
func gitOut(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// previousSchemaCommit finds the code of the schema before the newest PostgreSQL migration: the
// parent of the commit that added the newest migration file, or HEAD while that file is not
// committed yet. It skips (fails on CI) when git or the history is not there.
func previousSchemaCommit(t *testing.T) (root, commit, why string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		skipOrFail(t, "git is not installed; the rolling-upgrade test needs the previous release's code from the history")
	}
	root, err := gitOut(".", "rev-parse", "--show-toplevel")
	if err != nil {
		skipOrFail(t, "not in a git checkout (%v); the rolling-upgrade test needs the previous release's code from the history", err)
	}
	files, err := filepath.Glob(filepath.Join(root, "internal", "store", "postgres", "migrations", "*.sql"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no PostgreSQL migrations under %s (%v)", root, err)
	}
	slices.Sort(files)
	rel, err := filepath.Rel(root, files[len(files)-1])
	if err != nil {
		t.Fatal(err)
	}
	migration := filepath.ToSlash(rel)
	added, err := gitOut(root, "log", "--diff-filter=A", "--format=%H", "--", migration)
	if err != nil {
		t.Fatal(err)
	}
	if added == "" {
		if _, err := gitOut(root, "cat-file", "-e", "HEAD:"+migration); err != nil {
			return root, "HEAD", migration + " is not committed yet"
		}
		skipOrFail(t, "the commit that added %s is not in this clone (shallow?); fetch the full history (git fetch --unshallow)", migration)
	}
	added = strings.Fields(added)[0] // the newest addition, should the file have been re-added
	parent, err := gitOut(root, "rev-parse", "--verify", "--quiet", added+"^")
	if err != nil {
		skipOrFail(t, "the parent of %s (which added %s) is not in this clone (shallow?); fetch the full history (git fetch --unshallow)", added, migration)
	}
	return root, parent, "the parent of " + added + ", which added " + migration
}

// previousBuild returns baton built from commit's tree with this test binary's build flags, and
// how it came (built, and in how long, or kept from an earlier run). The tree and the binary are
// kept under the user's cache directory, keyed by the commit, the Go version and those flags: the
// same commit builds the same binary, and CI's next run starts it at once. Without the cache, the
// tree extracted into a new temporary directory each run compiled every one of its packages
// again, a minute of CI, since a package's directory is part of the build cache's keys.
func previousBuild(t *testing.T, root, commit string) (bin, how string) {
	t.Helper()
	hash, err := gitOut(root, "rev-parse", "--verify", commit+"^{commit}")
	if err != nil {
		t.Fatal(err)
	}
	cache, err := os.UserCacheDir()
	if err != nil { // no home: build into the test's own directory
		tree := t.TempDir()
		extractTree(t, root, hash, tree)
		bin = filepath.Join(t.TempDir(), "baton-previous")
		return bin, "built in " + buildtest.Build(t, tree, "./cmd/baton", bin).Round(time.Millisecond).String()
	}
	key := sha256.Sum256([]byte(strings.Join(append([]string{hash, runtime.Version()}, buildtest.Flags()...), "\n")))
	dir := filepath.Join(cache, "baton-test", "rolling")
	bin = filepath.Join(dir, fmt.Sprintf("baton-%x", key[:8]))
	if _, err := os.Stat(bin); err == nil {
		return bin, "built by an earlier run: " + bin
	}
	tree := filepath.Join(dir, "tree-"+hash)
	if _, err := os.Stat(tree); err != nil {
		// Extracted beside its place and renamed into it, so a tree there is always whole.
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		tmp, err := os.MkdirTemp(dir, "extract-")
		if err != nil {
			t.Fatal(err)
		}
		extractTree(t, root, hash, tmp)
		if err := os.Rename(tmp, tree); err != nil {
			_ = os.RemoveAll(tmp) // another run renamed its copy first
		}
	}
	pruneRolling(t, dir, filepath.Base(bin), filepath.Base(tree))
	tmp := fmt.Sprintf("%s.%d.tmp", bin, os.Getpid())
	took := buildtest.Build(t, tree, "./cmd/baton", tmp)
	if err := os.Rename(tmp, bin); err != nil {
		t.Fatal(err)
	}
	return bin, "built in " + took.Round(time.Millisecond).String()
}

// pruneRolling removes what earlier runs kept in dir for other commits or flags, once a day old
// (a run beside this one may still use a newer one).
func pruneRolling(t *testing.T, dir string, keep ...string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || slices.Contains(keep, e.Name()) || time.Since(info.ModTime()) < 24*time.Hour {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			t.Logf("pruning the rolling-upgrade cache: %v", err)
		}
	}
}

// extractTree writes the tree of commit into dir, with git archive: no worktree to clean up.
func extractTree(t *testing.T, root, commit, dir string) {
	t.Helper()
	cmd := exec.Command("git", "archive", "--format=tar", commit)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(out)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("git archive %s: %v", commit, err)
		}
		path := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(path, filepath.Clean(dir)+string(filepath.Separator)) {
			t.Fatalf("git archive %s: entry %q leaves the directory", commit, h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(path, 0o755)
		case tar.TypeReg:
			err = writeFile(path, tr, os.FileMode(h.Mode)&0o777)
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, path)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("git archive %s: %v: %s", commit, err, stderr.String())
	}
}

func writeFile(path string, r io.Reader, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// replica is a `baton server` process.
type replica struct {
	name               string
	producer, internal string
	stderr             *syncBuffer
	cmd                *exec.Cmd
	exited             chan error
	stopped            bool
}

func startReplica(t *testing.T, name, bin, dbURL string) *replica {
	t.Helper()
	r := &replica{name: name, producer: freeAddr(t), internal: freeAddr(t), stderr: &syncBuffer{}, exited: make(chan error, 1)}
	r.cmd = exec.Command(bin, "server", "--database-url", dbURL, "--internal-insecure", "--listen", r.producer,
		"--internal-listen", r.internal, "--metrics-listen=")
	r.cmd.Stdout, r.cmd.Stderr = r.stderr, r.stderr
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cmd := r.cmd
	go func() { r.exited <- cmd.Wait() }()
	t.Cleanup(func() { r.stop(t) })
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := http.Get("http://" + r.producer + "/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return r
			}
		}
		select {
		case err := <-r.exited:
			r.exited <- err
			t.Fatalf("%s exited before it was ready: %v\n%s", name, err, r.stderr.String())
		case <-time.After(50 * time.Millisecond): // waiting for a real process to listen
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never became ready:\n%s", name, r.stderr.String())
		}
	}
}

// stop interrupts the replica and checks it shut down cleanly; once only.
func (r *replica) stop(t *testing.T) {
	t.Helper()
	if r.stopped {
		return
	}
	r.stopped = true
	_ = r.cmd.Process.Signal(os.Interrupt)
	select {
	case err := <-r.exited:
		if err != nil {
			t.Errorf("%s: exit after the interrupt: %v\n%s", r.name, err, r.stderr.String())
		}
	case <-time.After(30 * time.Second):
		_ = r.cmd.Process.Kill()
		t.Errorf("%s did not shut down", r.name)
	}
}

// TestRollingUpgradeOnPostgres upgrades a database under a running replica of the previous
// release: the previous schema's code (the parent of the commit that added the newest PostgreSQL
// migration) migrates a fresh database and serves; this tree's binary migrates it further while
// that replica keeps serving; then a replica of each release serves one job, its tasks claimed
// and completed through both.
func TestRollingUpgradeOnPostgres(t *testing.T) {
	dbURL := storetest.NewPostgresSchema(t)
	root, commit, why := previousSchemaCommit(t)
	t.Parallel()
	ctx := context.Background()

	oldBin, oldBuild := previousBuild(t, root, commit)
	// This tree's baton is this test binary, which runs `baton migrate` and `baton server` as
	// baton does (TestMain): building it again would cost a whole link, DuckDB included.
	newBin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("previous schema's code: %s (%s); %s", commit, why, oldBuild)

	baton := func(bin string, args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, stderr.String())
		}
		return stdout.String()
	}
	baton(oldBin, "migrate", "--database-url", dbURL)
	key := strings.TrimSpace(baton(oldBin, "apikey", "create", "--name", "rolling", "--tenant", "acme", "--database-url", dbURL))
	previous := startReplica(t, "previous release", oldBin, dbURL)
	baton(newBin, "migrate", "--database-url", dbURL)
	current := startReplica(t, "current release", newBin, dbURL)
	if res, err := http.Get("http://" + previous.producer + "/readyz"); err != nil || res.StatusCode != 200 {
		t.Fatalf("the previous release's replica after the migration: %v %v", res, err)
	}

	// One job through the previous release's replica; a worker on each replica. Each worker's
	// first task waits until the other worker has claimed one too, so both replicas hand out work.
	var tasks []client.Task
	for i := range 6 {
		tasks = append(tasks, client.Task{TaskID: fmt.Sprintf("t%d", i), Name: "roll", Input: work(i)})
	}
	res, err := client.New("http://"+previous.producer, key).SubmitJob(ctx, client.SubmitJobRequest{Tasks: tasks})
	if err != nil {
		t.Fatalf("submit through the previous release: %v", err)
	}
	var (
		mu  sync.Mutex
		ran = map[string][]string{} // replica → task keys its worker ran
	)
	started := map[string]chan struct{}{previous.name: make(chan struct{}), current.name: make(chan struct{})}
	other := map[string]string{previous.name: current.name, current.name: previous.name}
	workCtx, stopWorkers := context.WithCancel(ctx)
	var workers sync.WaitGroup
	for _, r := range []*replica{previous, current} {
		w, err := worker.New("http://"+r.internal, worker.WithWorkerID(r.name), worker.WithLogger(slog.New(slog.DiscardHandler)),
			worker.WithPollWait(200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		var once sync.Once
		w.Handle("roll", func(ctx context.Context, tk *worker.Task) (any, error) {
			mu.Lock()
			ran[r.name] = append(ran[r.name], tk.Key)
			mu.Unlock()
			once.Do(func() { close(started[r.name]) })
			select {
			case <-started[other[r.name]]:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			var in struct{ N int }
			if err := json.Unmarshal(tk.Input, &in); err != nil {
				return nil, worker.Permanent(err)
			}
			return map[string]any{"doubled": 2 * in.N, "replica": r.name}, nil
		})
		workers.Go(func() {
			if err := w.Run(workCtx); err != nil {
				t.Errorf("worker on %s: %v", r.name, err)
			}
		})
	}
	for _, r := range []*replica{current, previous} {
		j := waitJob(t, client.New("http://"+r.producer, key), res.JobID, client.JobCompleted)
		for _, tk := range j.Tasks {
			var out struct {
				Doubled int
				Replica string
			}
			if err := json.Unmarshal(tk.Output, &out); err != nil || out.Doubled != 2*int(tk.TaskID[1]-'0') || out.Replica == "" {
				t.Errorf("read through %s: task %s output %s", r.name, tk.TaskID, tk.Output)
			}
		}
	}
	stopWorkers()
	workers.Wait()
	mu.Lock()
	t.Logf("tasks run through the previous release's replica: %v; through the current one: %v", ran[previous.name], ran[current.name])
	if len(ran[previous.name]) == 0 || len(ran[current.name]) == 0 {
		t.Errorf("tasks ran through one replica only: %v", ran)
	}
	mu.Unlock()
	for _, r := range []*replica{previous, current} {
		r.stop(t)
		for _, line := range strings.Split(r.stderr.String(), "\n") {
			if strings.Contains(line, "level=ERROR") {
				t.Errorf("%s logged an error: %s", r.name, line)
			}
		}
	}
}
