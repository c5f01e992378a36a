package chaos_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/buildtest"
	"github.com/baton-dev/baton/internal/chaos"
)

// The chaos test runs real Baton processes under random faults (internal/chaos). By default it
// runs a short round per store and transport, as CI does; BATON_CHAOS_DURATION=10m makes each
// round longer, BATON_CHAOS_SEED=N replays a round's random choices, and BATON_CHAOS_KEEP=1 keeps
// the processes' output and the execution log of every round (a failed round's are always kept).

func TestMain(m *testing.M) {
	if os.Getenv(chaos.EnvChild) == "1" { // this process is a task's child, run by `baton worker`
		if err := chaos.RunChild(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "chaos child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestChaos(t *testing.T) {
	duration := 30 * time.Second
	if v := os.Getenv("BATON_CHAOS_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("BATON_CHAOS_DURATION: %v", err)
		}
		duration = d
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("BATON_CHAOS_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("BATON_CHAOS_SEED: %v", err)
		}
		seed = s
	}
	bin := t.TempDir()
	// The baton command, built the way this test was (its race detector included).
	baton, child := filepath.Join(bin, "baton"), copyChild(t, bin)
	buildtest.Build(t, ".", "github.com/baton-dev/baton/cmd/baton", baton)

	rounds := []struct {
		name string
		cfg  func(t *testing.T) chaos.Config
	}{
		{"sqlite", func(t *testing.T) chaos.Config { return chaos.Config{Store: chaos.StoreSQLite} }},
		{"postgres", func(t *testing.T) chaos.Config {
			url := os.Getenv("BATON_TEST_POSTGRES_URL")
			if url == "" {
				t.Skip("BATON_TEST_POSTGRES_URL is not set: skipping the chaos round on PostgreSQL")
			}
			// Two replicas on PostgreSQL, with the most kinds of faults: the round that also
			// builds, activates and rolls back a pipeline under them.
			return chaos.Config{Store: chaos.StorePostgres, PostgresURL: url, Pipeline: true}
		}},
		{"redis", func(t *testing.T) chaos.Config {
			return chaos.Config{Store: chaos.StoreSQLite, Transport: chaos.TransportRedis, RedisServer: lookPath(t, "redis-server")}
		}},
		{"nats", func(t *testing.T) chaos.Config {
			return chaos.Config{Store: chaos.StoreSQLite, Transport: chaos.TransportNATS, NATSServer: lookPath(t, "nats-server", "/usr/sbin/nats-server")}
		}},
	}
	// The rounds share nothing (each has its own processes, data directory, schema and transport
	// server), so they run at once, each from a goroutine of its own: the suite takes about one
	// round's time. A round mostly waits (on its leases, backoffs and faults; the four together
	// keep about 1.3 cores busy), so they do not wait for t.Parallel's slots (-parallel, by
	// default one per core), which would run them two by two on a 2-core machine.
	var wg sync.WaitGroup
	for i, round := range rounds {
		wg.Go(func() {
			t.Run(round.name, func(t *testing.T) {
				cfg := round.cfg(t)
				cfg.Baton, cfg.Child, cfg.Dir = baton, child, runDir(t)
				cfg.Seed = seed + uint64(i)
				cfg.Duration = duration
				// Nine jobs in 30 s: the four rounds' backlogs after the faults took seven to nine
				// minutes to work off with eighteen, on a 2-core machine with the rest of the suite.
				cfg.Jobs = max(int(duration.Seconds()*0.3), 4)
				// DAGs of 15 tasks: the faults all fall in Duration, and what runs after it is the
				// backlog's recovery, whose time grows with the tasks left. With 30 per job, the four
				// rounds at once spent two of their three minutes recovering on a 2-core machine.
				cfg.TasksPerJob = 15
				cfg.Log = testWriter{t}
				t.Logf("seed %d (replay: BATON_CHAOS_SEED=%d go test ./internal/chaos -run 'TestChaos/%s$')", cfg.Seed, cfg.Seed-uint64(i), round.name)
				ctx, cancel := context.WithTimeout(context.Background(), duration+20*time.Minute)
				defer cancel()
				rep, err := chaos.Run(ctx, cfg)
				if err != nil {
					t.Fatal(err)
				}
				fmt.Println(rep) // the round's figures, on one line, also without -v
				for _, p := range rep.Problems {
					t.Error(p)
				}
				if !rep.OK() {
					t.Fatalf("invariants broken: %s", rep)
				}
				if rep.Recovery > chaos.RecoveryBound {
					t.Logf("recovery %.1fs took longer than twice the lease TTL plus the backoff cap (%s)", rep.Recovery.Seconds(), chaos.RecoveryBound)
				}
			})
		})
	}
	wg.Wait()
}

// copyChild copies this test binary, which is the task child when chaos.EnvChild is set, to
// where the child user can run it.
func copyChild(t *testing.T, dir string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	path := filepath.Join(dir, "child")
	dst, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	openUp(t, dir)
	return path
}

// runDir is a fresh directory for a round, kept when the round fails (or BATON_CHAOS_KEEP is set).
func runDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "baton-chaos-")
	if err != nil {
		t.Fatal(err)
	}
	openUp(t, dir)
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("BATON_CHAOS_KEEP") != "" {
			t.Logf("the round's processes' output and execution log are kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	return dir
}

// openUp lets other users traverse dir and its parents: task children run as nobody when the
// test runs as root.
func openUp(t *testing.T, dir string) {
	for d := dir; d != "/" && d != "."; d = filepath.Dir(d) {
		info, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm()&0o005 != 0o005 {
			if err := os.Chmod(d, info.Mode().Perm()|0o005); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// lookPath finds a server's executable, or skips the round.
func lookPath(t *testing.T, name string, alternatives ...string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, p := range alternatives {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Skipf("%s is not installed: skipping its chaos round", name)
	return ""
}

// testWriter writes to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p[:len(p)-1]))
	return len(p), nil
}
