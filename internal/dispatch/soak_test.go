package dispatch_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/maintenance"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// soakTables are the tables whose size the soak follows.
var soakTables = []string{"jobs", "tasks", "task_deps", "attempts", "events", "outbox"}

// soakServerSettings are the settings of the server the soak starts, over the stock
// configuration. autovacuum is on by default, but the shared test server has it off. The soak
// compresses an hour of traffic into minutes, so autovacuum's clock is compressed alike: its
// launcher wakes every second instead of every minute (autovacuum_naptime, stock 1min), giving a
// 5-minute soak the 300 chances to vacuum a table that an hour gives at the stock setting.
// Everything else is stock. Thresholds are counted in rows, not time (vacuum once dead rows exceed
// autovacuum_vacuum_threshold 50 + autovacuum_vacuum_scale_factor 0.2 of the table), so they need
// no compression: the churn crosses them within a second on every table. The cost-based delay
// (autovacuum_vacuum_cost_delay 2ms, cost limit 200) is left stock too: these tables are a few
// MB, which a vacuum at the stock rate reads in well under a second.
var soakServerSettings = []string{"autovacuum=on", "autovacuum_naptime=1s"}

// TestRetentionSoak churns jobs on a fresh PostgreSQL database (submit, claim, complete) at a steady
// BATON_SOAK_RATE jobs/s (default 75) with a retention of 2 s, for BATON_SOAK_DURATION (default
// 3m), and reports for each table its size on
// disk (pg_total_relation_size), its live rows and how many times autovacuum processed it, at the
// start, at the end of the warm-up (a fifth of the run), in the middle and at the end. Under
// retention the rows left stay bounded; with autovacuum on, the space deleted rows leave is reused
// and the sizes stop growing after the warm-up. It runs only with BATON_SOAK=1.
//
// By default it starts a PostgreSQL server of its own (see soakServerSettings) so that autovacuum
// runs whatever the shared server's configuration; BATON_SOAK_POSTGRES_URL points it at another
// server instead (the sizes are checked only if autovacuum is on there).
func TestRetentionSoak(t *testing.T) {
	if os.Getenv("BATON_SOAK") != "1" {
		t.Skip("BATON_SOAK=1 runs the retention soak (BATON_SOAK_DURATION, default 3m; BATON_SOAK_POSTGRES_URL, default a server of its own)")
	}
	run := 3 * time.Minute
	if v := os.Getenv("BATON_SOAK_DURATION"); v != "" {
		var err error
		if run, err = time.ParseDuration(v); err != nil || run <= 0 {
			t.Fatalf("BATON_SOAK_DURATION=%q: want a positive duration such as 5m", v)
		}
	}
	// A steady rate, below what the machine sustains: the rows a table holds at a time (and so
	// its size once vacuum keeps up) follow the rate, and a soak sharing a machine would otherwise
	// see its rate, and its sizes, move with the other load.
	rate := 75
	if v := os.Getenv("BATON_SOAK_RATE"); v != "" {
		var err error
		if rate, err = strconv.Atoi(v); err != nil || rate <= 0 {
			t.Fatalf("BATON_SOAK_RATE=%q: want a positive number of jobs per second", v)
		}
	}
	adminURL := os.Getenv("BATON_SOAK_POSTGRES_URL")
	if adminURL == "" {
		srv := storetest.StartPostgresServer(t, soakServerSettings...)
		t.Logf("started PostgreSQL %s for the soak with %s", srv.Version, strings.Join(soakServerSettings, " "))
		adminURL = srv.URL
	}
	pg := storetest.NewDatabaseAt(t, adminURL)
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
	ret, err := maintenance.NewRetention(maintenance.Env{Store: st, Logger: quiet}, maintenance.RetentionConfig{Retention: 2 * time.Second, DeadLetterRetention: 2 * time.Second,
		Every: time.Second, Pause: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ret.Start(ctx)
	defer ret.Stop()
	relay := maintenance.NewRelay(maintenance.Env{Store: st, Logger: quiet}, maintenance.RelayConfig{Retention: 2 * time.Second, Wake: d.TaskReady})
	relay.Start(ctx)
	defer relay.Stop()

	var jobs, failures atomic.Int64
	var wg sync.WaitGroup
	churn, stopChurn := context.WithCancel(ctx)
	// At most 200 jobs in flight, so that the workers keep up and what grows is finished jobs.
	inFlight := make(chan struct{}, 200)
	pace := time.NewTicker(time.Second / time.Duration(rate))
	defer pace.Stop()
	for range 4 { // producers
		wg.Add(1)
		go func() {
			defer wg.Done()
			for churn.Err() == nil {
				select {
				case <-pace.C:
				case <-churn.Done():
					return
				}
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
		label      string
		at         time.Duration
		jobs       int64
		bytes      map[string]int64
		rows       map[string]int64
		autovacuum map[string]int64 // pg_stat_user_tables.autovacuum_count
	}
	start := time.Now()
	measure := func(label string) figures {
		f := figures{label: label, at: time.Since(start).Round(time.Second), jobs: jobs.Load(),
			bytes: map[string]int64{}, rows: map[string]int64{}, autovacuum: map[string]int64{}}
		for _, tbl := range soakTables {
			var size, rows, vacuums int64
			if err := db.QueryRow(`SELECT pg_total_relation_size($1::regclass), (SELECT count(*) FROM `+tbl+`),
				(SELECT autovacuum_count FROM pg_stat_user_tables WHERE relid = $1::regclass)`, tbl).Scan(&size, &rows, &vacuums); err != nil {
				t.Fatalf("size of %s: %v", tbl, err)
			}
			f.bytes[tbl], f.rows[tbl], f.autovacuum[tbl] = size, rows, vacuums
		}
		return f
	}
	// A point every tenth of the run: the warm-up ends at the second, the middle is the fifth.
	all := []figures{measure("start")}
	tick := time.NewTicker(run / 10)
	defer tick.Stop()
	for i := 1; i <= 10; i++ {
		<-tick.C
		all = append(all, measure(map[int]string{2: "after warm-up", 5: "middle", 10: "end"}[i]))
	}
	stopChurn()
	wg.Wait()

	total := func(m map[string]int64) int64 {
		var n int64
		for _, v := range m {
			n += v
		}
		return n
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n%d jobs/s; kB on disk (live rows) [autovacuum runs so far]\n| point | elapsed | jobs submitted |", rate)
	for _, tbl := range soakTables {
		fmt.Fprintf(&b, " %s |", tbl)
	}
	fmt.Fprintf(&b, " total |\n|---|---|---|%s---|\n", strings.Repeat("---|", len(soakTables)))
	for _, f := range all {
		fmt.Fprintf(&b, "| %s | %s | %d |", f.label, f.at, f.jobs)
		for _, tbl := range soakTables {
			fmt.Fprintf(&b, " %d (%d) [%d] |", f.bytes[tbl]/1024, f.rows[tbl], f.autovacuum[tbl])
		}
		fmt.Fprintf(&b, " %d (%d) [%d] |\n", total(f.bytes)/1024, total(f.rows), total(f.autovacuum))
	}
	// What autovacuum faced: dead rows left at the end, and how many updates were HOT (they add no
	// index entry, so they bloat no index).
	fmt.Fprintf(&b, "\nat the end, from pg_stat_user_tables\n| table | dead rows | updates | HOT updates | deletes |\n|---|---|---|---|---|\n")
	for _, tbl := range soakTables {
		var dead, upd, hot, del int64
		if err := db.QueryRow(`SELECT n_dead_tup, n_tup_upd, n_tup_hot_upd, n_tup_del FROM pg_stat_user_tables WHERE relid = $1::regclass`, tbl).
			Scan(&dead, &upd, &hot, &del); err != nil {
			t.Fatalf("statistics of %s: %v", tbl, err)
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d |\n", tbl, dead, upd, hot, del)
	}
	t.Log(b.String())
	if n := failures.Load(); n > 0 {
		t.Errorf("%d transitions failed during the churn", n)
	}
	warmFig, end := all[2], all[len(all)-1]
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
	} else if grown, base := total(end.bytes), total(warmFig.bytes); grown > base*3/2 {
		t.Errorf("the tables grew from %d kB after the warm-up to %d kB at the end (more than 50%%): the space of deleted rows is not reused", base/1024, grown/1024)
	}
	if end.jobs < 2*warmFig.jobs {
		t.Errorf("only %d jobs submitted by the end, %d after the warm-up: too little churn to tell", end.jobs, warmFig.jobs)
	}
}
