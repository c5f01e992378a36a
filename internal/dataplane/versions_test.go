package dataplane_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/dataplane/intake"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/dispatch/dispatchtest"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/report"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// published is a datasets_published entry.
func published(ds, version, hash string, start, end *int64, ref string) report.Published {
	p := report.Published{DatasetUUID: ds, DatasetVersion: version, ConfigHash: hash, RangeStart: start, RangeEnd: end}
	if ref != "" {
		p.StorageRef = json.RawMessage(ref)
	}
	return p
}

// completeWith completes the attempt of c with pub, a final event and an output.
func (e *env) completeWith(c *dispatch.Claim, ds string, cursor int64, pub ...report.Published) error {
	_, err := e.D.Complete(e.Ctx, dispatch.CompleteParams{TaskID: c.Task.ID, Attempt: c.Task.Attempt, LeaseToken: c.Task.LeaseToken,
		Outcome: store.OutcomeSucceeded, Output: json.RawMessage(`{"done":true}`), Published: pub,
		Events: []report.Event{{DatasetUUID: ds, DatasetVersion: "v1", Cursor: &cursor}}})
	return err
}

// versionsOf lists a dataset's registered versions as "version/task".
func (e *env) versionsOf(ds string) []string {
	e.T.Helper()
	vs, err := e.Store.DatasetVersionList(e.Ctx, ds)
	if err != nil {
		e.T.Fatal(err)
	}
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.Version + "/" + v.TaskID
	}
	return out
}

// Rule: registration is idempotent per (dataset_uuid, config_hash, range_start, range_end) and
// per dataset version. A completion whose datasets_published contradicts what is registered — the
// same config_hash and range under another version, the same version with another config_hash,
// range or storage_ref (a version a deploy created included), or two of its own entries that
// contradict each other — is refused whole with a dataset_version_conflict naming both versions:
// the task stays running, and nothing of the completion is stored (no version, no event, no
// output). An entry equal to what is registered registers nothing and succeeds.
func TestRegisteringAConflictingDatasetVersionRefusesTheCompletion(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		ds := e.ownDataset()
		x, err := st.DatasetGetMany(e.Ctx, []string{ds})
		if err != nil || len(x) != 1 {
			t.Fatal(x, err)
		}
		deployed := x[0].CurrentVersion
		job := e.Submit(spec("first"), spec("second"))
		first := e.Claim(job, "first")
		if err := e.completeWith(first, ds, 1, published(ds, "v1", "h1", i64(0), i64(99), `{"prefix": "a/", "glob": "*.parquet"}`)); err != nil {
			t.Fatal(err)
		}
		second := e.Claim(job, "second")
		e.Clock.Advance(time.Second) // the second task's versions are listed after the first's
		by := "by task " + first.Task.ID
		for _, tc := range []struct {
			name string
			pub  []report.Published
			want string
		}{
			{"the same config_hash and range under another version",
				[]report.Published{published(ds, "v2", "h1", i64(0), i64(99), `{"prefix":"b/"}`)},
				`datasets_published[0] registers version "v2" of dataset ` + ds + ` for (config_hash "h1", range_start 0, range_end 99), ` +
					`which is registered as version "v1" ` + by},
			{"the same version with another config_hash",
				[]report.Published{published(ds, "m1", "", nil, nil, ""), published(ds, "v1", "h2", i64(0), i64(99), `{"prefix":"a/","glob":"*.parquet"}`)},
				`datasets_published[1] registers version "v1" of dataset ` + ds + ` with (config_hash "h2", range_start 0, range_end 99, ` +
					`storage_ref {"prefix":"a/","glob":"*.parquet"}), but it is registered with (config_hash "h1", range_start 0, range_end 99, ` +
					`storage_ref {"prefix":"a/","glob":"*.parquet"}) ` + by},
			{"the same version with another range",
				[]report.Published{published(ds, "v1", "h1", i64(0), nil, `{"prefix":"a/","glob":"*.parquet"}`)},
				`datasets_published[0] registers version "v1" of dataset ` + ds + ` with (config_hash "h1", range_start 0, range_end null, ` +
					`storage_ref {"prefix":"a/","glob":"*.parquet"}), but it is registered with (config_hash "h1", range_start 0, range_end 99, ` +
					`storage_ref {"prefix":"a/","glob":"*.parquet"}) ` + by},
			{"the same version with another storage_ref",
				[]report.Published{published(ds, "v1", "h1", i64(0), i64(99), `{"prefix":"b/","glob":"*.parquet"}`)},
				`datasets_published[0] registers version "v1" of dataset ` + ds + ` with (config_hash "h1", range_start 0, range_end 99, ` +
					`storage_ref {"prefix":"b/","glob":"*.parquet"}), but it is registered with (config_hash "h1", range_start 0, range_end 99, ` +
					`storage_ref {"prefix":"a/","glob":"*.parquet"}) ` + by},
			{"the deployed version with values",
				[]report.Published{published(ds, deployed, "h9", nil, nil, "")},
				fmt.Sprintf(`datasets_published[0] registers version %q of dataset %s with (config_hash "h9", range_start null, range_end null, `+
					`storage_ref null), but it is registered with (config_hash "", range_start null, range_end null, storage_ref null) `+
					`by a deploy or reset`, deployed, ds)},
			{"two entries with the same config_hash and range",
				[]report.Published{published(ds, "v3", "h3", i64(100), i64(199), ""), published(ds, "v4", "h3", i64(100), i64(199), "")},
				`datasets_published[1] registers version "v4" of dataset ` + ds + ` for (config_hash "h3", range_start 100, range_end 199), ` +
					`which datasets_published[0] registers as version "v3"`},
			{"two entries of one version with other values",
				[]report.Published{published(ds, "v3", "h3", i64(100), i64(199), ""), published(ds, "v3", "h4", i64(100), i64(199), "")},
				`datasets_published[1] registers version "v3" of dataset ` + ds + ` with (config_hash "h4", range_start 100, range_end 199, ` +
					`storage_ref null), but datasets_published[0] registers it with (config_hash "h3", range_start 100, range_end 199, storage_ref null)`},
		} {
			err := e.completeWith(second, ds, 2, tc.pub...)
			conflict := dispatchtest.WantErr[*dispatch.ConflictError](t, err)
			if want := "dataset version conflict: " + tc.want; conflict.Code != "dataset_version_conflict" || conflict.Message != want {
				t.Errorf("%s: refused with %q %q,\nwant %q", tc.name, conflict.Code, conflict.Message, want)
			}
		}
		if s := e.Status(job, "second"); s != lifecycle.Running {
			t.Fatalf("refused completions left the task %s", s)
		}
		if tk := e.Task(job, "second"); tk.Output != nil && string(tk.Output) != "null" {
			t.Fatalf("refused completions stored the output %s", tk.Output)
		}
		if got, want := e.versionsOf(ds), []string{deployed + "/", "v1/" + first.Task.ID}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("after refused completions the versions are %v, want %v", got, want)
		}
		if evs, _ := st.DatasetEventListByTask(e.Ctx, second.Task.ID); len(evs) != 0 {
			t.Fatalf("refused completions stored events: %+v", evs)
		}

		// What repeats the registered values registers nothing and succeeds: v1 again (its
		// storage_ref formatted otherwise), the deployed version without values, and an entry
		// twice; versions without config_hash and range never conflict with one another.
		if err := e.completeWith(second, ds, 2,
			published(ds, "v1", "h1", i64(0), i64(99), `{ "glob" : "*.parquet", "prefix" : "a/" }`),
			published(ds, deployed, "", nil, nil, "null"),
			published(ds, "v3", "h3", i64(100), i64(199), ""),
			published(ds, "v3", "h3", i64(100), i64(199), ""),
			published(ds, "m1", "", nil, nil, ""),
			published(ds, "m2", "", nil, nil, "")); err != nil {
			t.Fatal(err)
		}
		if s := e.Status(job, "second"); s != lifecycle.Completed {
			t.Fatalf("task %s after its completion", s)
		}
		want := []string{deployed + "/", "v1/" + first.Task.ID, "m1/" + second.Task.ID, "m2/" + second.Task.ID, "v3/" + second.Task.ID}
		if got := e.versionsOf(ds); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("versions %v, want %v", got, want)
		}
		if evs, _ := st.DatasetEventListByTask(e.Ctx, second.Task.ID); len(evs) != 1 {
			t.Fatalf("the completion stored %d events, want 1", len(evs))
		}
	})
}

// heldHook is the data plane, except that a completion's registration, once done, waits for
// release before its transaction goes on.
type heldHook struct {
	*intake.Intake
	registered, release chan struct{}
}

func (h *heldHook) RegisterVersions(ctx context.Context, tx store.Tx, w *dispatch.Work, t *store.Task, pub []report.Published) error {
	err := h.Intake.RegisterVersions(ctx, tx, w, t, pub)
	close(h.registered)
	<-h.release
	return err
}

// Two replicas on one PostgreSQL completing two tasks that register the same config_hash and
// range under two versions: the second registration waits for the first's transaction, then sees
// its version, and is refused; never do both succeed.
func TestConflictingRegistrationsOnTwoReplicasOnePostgres(t *testing.T) {
	db := storetest.NewPostgresDatabase(t)
	a, b := newEnv(t, db.Open(t)), newEnv(t, db.Open(t))
	ds := a.ownDataset()
	held := &heldHook{Intake: a.dp.Intake(), registered: make(chan struct{}), release: make(chan struct{})}
	a.D.SetHook(held)
	ca := a.Claim(a.Submit(spec("a")), "a")
	cb := b.Claim(b.Submit(spec("b")), "b")

	conn, err := sql.Open("pgx", db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// waiting reports whether a transaction of the database waits for a transaction lock of a key.
	waiting := func() bool {
		var n int
		if err := conn.QueryRow(`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}

	errA, errB := make(chan error, 1), make(chan error, 1)
	go func() { errA <- a.completeWith(ca, ds, 1, published(ds, "v1", "h", i64(0), i64(9), "")) }()
	<-held.registered // a holds its transaction open, v1 registered in it
	go func() { errB <- b.completeWith(cb, ds, 2, published(ds, "v2", "h", i64(0), i64(9), "")) }()
	for !waiting() {
		select {
		case err := <-errB:
			close(held.release)
			t.Fatalf("the second registration answered %v while the first's transaction was open", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	close(held.release)
	if err := <-errA; err != nil {
		t.Fatal(err)
	}
	conflict := dispatchtest.WantErr[*dispatch.ConflictError](t, <-errB)
	if want := `dataset version conflict: datasets_published[0] registers version "v2" of dataset ` + ds +
		` for (config_hash "h", range_start 0, range_end 9), which is registered as version "v1" by task ` + ca.Task.ID; conflict.Message != want {
		t.Errorf("refusal %q, want %q", conflict.Message, want)
	}
	if s := b.Task(b.Job(cb.Task.JobID), "b").Status; s != lifecycle.Running {
		t.Errorf("the refused task is %s", s)
	}
	if got := a.versionsOf(ds); len(got) != 2 || got[1] != "v1/"+ca.Task.ID {
		t.Errorf("versions %v", got)
	}
}
