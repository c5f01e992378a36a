package dispatch_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// soakTables are the tables whose size the soak follows.
var soakTables = []string{"jobs", "tasks", "task_deps", "attempts", "events", "outbox"}

// TestRetentionSoak churns jobs on a fresh PostgreSQL database (submit, claim, complete) with a
// retention of 2 s, for BATON_SOAK_DURATION (default 3m), and reports the size on disk
// (pg_total_relation_size) and the rows of each table at the start, after the warm-up (a fifth of
// the run) and at the end: under retention the tables stop growing, autovacuum reusing the
// space deleted rows leave. It runs only with BATON_SOAK=1.
func TestRetentionSoak(t *testing.T) {
	if os.Getenv("BATON_SOAK") != "1" {
		t.Skip("BATON_SOAK=1 runs the retention soak (BATON_SOAK_DURATION, default 3m)")
	}
	run := 3 * time.Minute
	if v := os.Getenv("BATON_SOAK_DURATION"); v != "" {
		var err error
		if run, err = time.ParseDuration(v); err != nil {
			t.Fatalf("BATON_SOAK_DURATION: %v", err)
		}
	}
	pg := storetest.NewPostgresDatabase(t)
	st := pg.Open(t)
	db, err := sql.Open("pgx", pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	d, err := dispatch.New(st, dispatch.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ret, err := d.NewRetention(dispatch.RetentionConfig{Retention: 2 * time.Second, DeadLetterRetention: 2 * time.Second,
		Every: time.Second, Pause: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ret.Start(ctx)
	defer ret.Stop()
	relay := d.NewRelay(dispatch.RelayConfig{Retention: 2 * time.Second})
	relay.Start(ctx)
	defer relay.Stop()

	var jobs, failures atomic.Int64
	var wg sync.WaitGroup
	churn, stopChurn := context.WithCancel(ctx)
	// At most 200 jobs in flight, so that the workers keep up and what grows is finished jobs.
	inFlight := make(chan struct{}, 200)
	for range 4 { // producers
		wg.Add(1)
		go func() {
			defer wg.Done()
			for churn.Err() == nil {
				select {
				case inFlight <- struct{}{}:
				case <-churn.Done():
					return
				}
				if _, err := d.CreateJob(churn, dispatch.CreateJobParams{Tenant: tenant, Tasks: []lifecycle.TaskSpec{spec("a"), spec("b", "a")}}); err != nil {
					if churn.Err() == nil {
						failures.Add(1)
					}
					<-inFlight
					continue
				}
				jobs.Add(1)
			}
		}()
	}
	for i := range 4 { // workers
		wg.Add(1)
		go func() {
			defer wg.Done()
			for churn.Err() == nil {
				claims, err := d.ClaimNext(churn, dispatch.ClaimNextParams{Queues: []string{"work"}, WorkerID: fmt.Sprintf("w%d", i), Limit: 10})
				if err != nil || len(claims) == 0 {
					time.Sleep(5 * time.Millisecond)
					continue
				}
				for _, c := range claims {
					if _, err := d.Complete(churn, dispatch.CompleteParams{TaskID: c.Task.ID, Attempt: c.Task.Attempt,
						LeaseToken: c.Task.LeaseToken, Outcome: store.OutcomeSucceeded, Output: []byte(`{"ok":true}`)}); err != nil {
						if churn.Err() == nil {
							failures.Add(1)
						}
					} else if c.Task.Key == "b" {
						<-inFlight // its job finished
					}
				}
			}
		}()
	}

	type figures struct {
		label string
		at    time.Duration
		jobs  int64
		bytes map[string]int64
		rows  map[string]int64
	}
	start := time.Now()
	measure := func(label string) figures {
		f := figures{label: label, at: time.Since(start).Round(time.Second), jobs: jobs.Load(), bytes: map[string]int64{}, rows: map[string]int64{}}
		for _, tbl := range soakTables {
			var size, rows int64
			if err := db.QueryRow(`SELECT pg_total_relation_size($1::regclass), (SELECT count(*) FROM `+tbl+`)`, tbl).Scan(&size, &rows); err != nil {
				t.Fatalf("size of %s: %v", tbl, err)
			}
			f.bytes[tbl], f.rows[tbl] = size, rows
		}
		return f
	}
	var all []figures
	all = append(all, measure("start"))
	warm := run / 5
	tick := time.NewTicker(run / 10)
	defer tick.Stop()
	deadline := time.After(run)
	warmed := time.After(warm)
loop:
	for {
		select {
		case <-warmed:
			all = append(all, measure("after warm-up"))
		case <-tick.C:
			if time.Since(start) > warm {
				all = append(all, measure("running"))
			}
		case <-deadline:
			break loop
		}
	}
	all = append(all, measure("end"))
	stopChurn()
	wg.Wait()

	var b strings.Builder
	fmt.Fprintf(&b, "\n| point | elapsed | jobs submitted |")
	for _, tbl := range soakTables {
		fmt.Fprintf(&b, " %s kB (rows) |", tbl)
	}
	fmt.Fprintf(&b, " total kB |\n|---|---|---|%s---|\n", strings.Repeat("---|", len(soakTables)))
	total := func(f figures) int64 {
		var n int64
		for _, v := range f.bytes {
			n += v
		}
		return n
	}
	for _, f := range all {
		fmt.Fprintf(&b, "| %s | %s | %d |", f.label, f.at, f.jobs)
		for _, tbl := range soakTables {
			fmt.Fprintf(&b, " %d (%d) |", f.bytes[tbl]/1024, f.rows[tbl])
		}
		fmt.Fprintf(&b, " %d |\n", total(f)/1024)
	}
	t.Log(b.String())
	if n := failures.Load(); n > 0 {
		t.Errorf("%d transitions failed during the churn", n)
	}
	var warmFig figures
	for _, f := range all {
		if f.label == "after warm-up" {
			warmFig = f
		}
	}
	end := all[len(all)-1]
	// Without retention every job submitted would still be a row. Under retention the jobs left
	// are those of the last few seconds (retention plus a pass), however many the churn submitted:
	// far fewer than it submitted after the warm-up. (The outbox is the relay's to prune, once a
	// minute.)
	if churned := end.jobs - warmFig.jobs; end.rows["jobs"] > churned/5 {
		t.Errorf("%d jobs left at the end of a churn of %d after the warm-up: retention does not keep up", end.rows["jobs"], churned)
	}
	var autovacuum string
	if err := db.QueryRow(`SHOW autovacuum`).Scan(&autovacuum); err != nil {
		t.Fatal(err)
	}
	if autovacuum != "on" {
		t.Logf("autovacuum is %s on this server: the space of deleted rows is not reused, sizes are not checked", autovacuum)
	} else if total(end) > 2*total(warmFig) {
		t.Errorf("the tables grew from %d kB after the warm-up to %d kB at the end: autovacuum does not keep up", total(warmFig)/1024, total(end)/1024)
	}
	if end.jobs < 2*warmFig.jobs {
		t.Errorf("only %d jobs submitted by the end, %d after the warm-up: too little churn to tell", end.jobs, warmFig.jobs)
	}
}
