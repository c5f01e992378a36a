//go:build cgo

package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/query"
)

// The statements an outside review found the engine could not contain when it ran inside the
// server: each now runs in a worker process the engine kills and the operating system caps.

// nested is a statement of depth nested scalar subqueries: a few hundred bytes whose time goes
// to DuckDB's planner (27 deep: over a minute), where no interrupt reaches.
func nested(depth int) string {
	return strings.Repeat("SELECT (", depth) + "1" + strings.Repeat(")", depth)
}

func check(t *testing.T, e *Engine, sql string) *query.Statement {
	t.Helper()
	st, err := e.Check(t.Context(), sql)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// Row 1: a statement ends by its deadline wherever its time goes, and its slot is free then.
func TestRunEndsAPlannerBoundStatementAtItsDeadline(t *testing.T) {
	e := newEngine(t, Config{MaxConcurrent: 1})
	st := check(t, e, nested(27))
	start := time.Now()
	_, err := e.Run(t.Context(), st, nil, query.Limits{Timeout: time.Second})
	if !errors.Is(err, query.ErrTimeout) {
		t.Fatalf("a planner-bound statement past its 1 s timeout: %v, want ErrTimeout", err)
	}
	if d := time.Since(start); d > 6*time.Second {
		t.Errorf("the statement was stopped %v after it started, its timeout 1 s", d)
	}
	if n := e.slots.inUse(); n != 0 {
		t.Errorf("%d slots still held once Run returned", n)
	}
	if _, err := e.Run(t.Context(), check(t, e, "SELECT 1"), nil, query.Limits{}); err != nil {
		t.Errorf("the next query: %v", err)
	}
}

// Row 1: a caller that goes away frees its slot at once, whatever its statement is doing.
func TestRunFreesTheSlotOfACallerThatWentAway(t *testing.T) {
	e := newEngine(t, Config{MaxConcurrent: 1})
	st := check(t, e, nested(27))
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(300*time.Millisecond, cancel)
	_, err := e.Run(ctx, st, nil, query.Limits{Timeout: time.Minute})
	gone := time.Now()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("a statement whose caller went away: %v, want context.Canceled", err)
	}
	if n := e.slots.inUse(); n != 0 {
		t.Errorf("%d slots still held once Run returned", n)
	}
	_, err = e.Run(t.Context(), check(t, e, "SELECT 1"), nil, query.Limits{})
	if err != nil {
		t.Errorf("the next query: %v", err)
	}
	t.Logf("the next query answered %v after the caller went away", time.Since(gone))
}

// Row 2: a statement's memory is capped for every value, by the operating system where the
// engine does not count it, and the server's own memory does not grow with it.
func TestRunCapsTheMemoryOfEveryValue(t *testing.T) {
	e := newEngine(t, Config{MemoryLimit: "256MB"})
	before := residentPeak(t)
	for _, sql := range []string{
		"SELECT length(range(1000000000))",
		"SELECT repeat('x', 1000000000)",
		"SELECT length(repeat('x', 1000000000))",
	} {
		_, err := e.Run(t.Context(), check(t, e, sql), nil, query.Limits{})
		var tooLarge *query.TooLargeError
		if !errors.As(err, &tooLarge) || !strings.Contains(tooLarge.Message, "memory limit of 256MB") {
			t.Errorf("%s: %v, want a refusal past the memory limit", sql, err)
		}
	}
	if grew := residentPeak(t) - before; grew > 200<<20 {
		t.Errorf("this process's peak memory grew by %d MiB while the statements ran", grew>>20)
	}
	if _, err := e.Run(t.Context(), check(t, e, "SELECT length(range(1000))"), nil, query.Limits{}); err != nil {
		t.Errorf("a statement within the limit: %v", err)
	}
}

// residentPeak is this process's peak resident memory in bytes (VmHWM).
func residentPeak(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Skip("no VmHWM in /proc/self/status")
	return 0
}

// Row 6: one tenant cannot hold every slot; another tenant's query is served while it
// saturates its share.
func TestRunGivesEachTenantAFairShareOfTheSlots(t *testing.T) {
	e := newEngine(t, Config{MaxConcurrent: 2, TenantSlots: 1, SlotWait: 300 * time.Millisecond})
	heavy := check(t, e, nested(27))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := e.Run(ctx, heavy, nil, query.Limits{Tenant: "a", Timeout: time.Minute})
		done <- err
	}()
	for e.slots.inUse() == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	one := check(t, e, "SELECT 1")
	if _, err := e.Run(t.Context(), one, nil, query.Limits{Tenant: "a"}); !errors.Is(err, query.ErrBusy) {
		t.Errorf("a second query of the tenant that holds its share: %v, want ErrBusy", err)
	}
	start := time.Now()
	if _, err := e.Run(t.Context(), one, nil, query.Limits{Tenant: "b"}); err != nil {
		t.Errorf("another tenant's query: %v", err)
	}
	t.Logf("another tenant's SELECT 1 answered in %v", time.Since(start))
	cancel()
	<-done
}

func TestSlotsServeWaitersInOrderWithinTheirShares(t *testing.T) {
	s := newSlots(2, 1)
	ctx := t.Context()
	releaseA, err := s.acquire(ctx, "a", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// a is at its share: its next query waits though a slot is free, and b's is served.
	got := make(chan string, 3)
	go func() {
		if r, err := s.acquire(ctx, "a", 5*time.Second); err == nil {
			got <- "a"
			r()
		}
	}()
	time.Sleep(50 * time.Millisecond)
	releaseB, err := s.acquire(ctx, "b", 100*time.Millisecond)
	if err != nil {
		t.Fatalf("b, with a free slot a may not take: %v", err)
	}
	if _, err := s.acquire(ctx, "b", 50*time.Millisecond); !errors.Is(err, query.ErrBusy) {
		t.Errorf("b past its share: %v, want ErrBusy", err)
	}
	releaseA() // a's waiter gets it
	select {
	case who := <-got:
		if who != "a" {
			t.Errorf("%s got the slot", who)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a's waiter never got the slot a freed")
	}
	releaseB()
	if n := s.inUse(); n != 0 {
		t.Errorf("%d slots held at the end", n)
	}
}

// Row 7: a statement's temporary files are capped, and it is refused past the cap.
func TestRunCapsTemporaryFiles(t *testing.T) {
	e := newEngine(t, Config{MemoryLimit: "64MB", SpillLimit: 32 << 20, Threads: 1})
	_, err := e.Run(t.Context(), check(t, e, "SELECT count(*) FROM (SELECT DISTINCT range || 'x' AS k FROM range(20000000))"), nil, query.Limits{})
	var tooLarge *query.TooLargeError
	if !errors.As(err, &tooLarge) || !strings.Contains(tooLarge.Message, "temporary files") {
		t.Fatalf("a statement past its temporary files' limit: %v, want a refusal naming the limit", err)
	}
	if strings.Contains(tooLarge.Message, e.cfg.SpillDir) {
		t.Errorf("the refusal names the spill directory: %s", tooLarge.Message)
	}
}

// Row 8: a version whose file is no Parquet file is not readable: a refusal naming the dataset
// and the version, never Baton's failure.
func TestRunRefusesAVersionWhoseFilesAreNotParquet(t *testing.T) {
	e := newEngine(t, Config{})
	dir := t.TempDir()
	bad := filepath.Join(dir, "part-0.parquet")
	if err := os.WriteFile(bad, []byte("name,value\nthis is not parquet\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "part-1.parquet")
	writeParquet(t, good, "SELECT 1 AS n")
	for _, files := range [][]string{{bad}, {good, bad}} {
		rel := query.Relation{Name: "blocks", Dataset: "u-blocks", Version: "v-7"}
		for _, f := range files {
			rel.Files = append(rel.Files, query.File{Key: "datasets/u-blocks/v-7/" + filepath.Base(f), Path: f})
		}
		_, err := e.Run(t.Context(), check(t, e, "SELECT count(*) FROM blocks"), []query.Relation{rel}, query.Limits{})
		var notRead *query.NotReadableError
		if !errors.As(err, &notRead) {
			t.Errorf("%d files, one not Parquet: %v, want NotReadableError", len(files), err)
			continue
		}
		for _, want := range []string{`dataset "blocks"`, `"v-7"`, "datasets/u-blocks/v-7/part-0.parquet"} {
			if !strings.Contains(notRead.Message, want) {
				t.Errorf("the refusal %q does not name %s", notRead.Message, want)
			}
		}
		if strings.Contains(notRead.Message, dir) {
			t.Errorf("the refusal names a local path: %s", notRead.Message)
		}
	}
}

// Row 10: Stop ends every statement at once, planner-bound ones too, and leaves no file.
func TestStopEndsEveryStatementAndRemovesItsFiles(t *testing.T) {
	e := newEngine(t, Config{})
	st := check(t, e, nested(27))
	done := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := e.Run(t.Context(), st, nil, query.Limits{Timeout: time.Minute})
			done <- err
		}()
	}
	for e.slots.inUse() < 2 {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // both run their statements
	start := time.Now()
	e.Stop()
	for range 2 {
		select {
		case err := <-done:
			if !errors.Is(err, query.ErrStopped) {
				t.Errorf("a statement stopped with the engine: %v, want ErrStopped", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a statement still runs after Stop")
		}
	}
	t.Logf("Stop ended both statements in %v", time.Since(start))
	if _, err := e.Run(t.Context(), check(t, e, "SELECT 1"), nil, query.Limits{}); !errors.Is(err, query.ErrStopped) {
		t.Errorf("a query after Stop: %v, want ErrStopped", err)
	}
	e.Close()
	if left, _ := os.ReadDir(e.cfg.SpillDir); len(left) != 0 {
		t.Errorf("the spill directory holds %d entries after Stop and Close", len(left))
	}
}
