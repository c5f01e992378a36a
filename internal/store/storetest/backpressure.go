// Contract of backpressure: held routings and pipeline jobs' backlogs.

package storetest

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/store"
)

// testHeldRoutingsReleaseInOrder: held routings read back as written, oldest first, per
// pipeline job; the summary counts them with their oldest hold and pause; a delete removes
// exactly the ids it names, once.
func testHeldRoutingsReleaseInOrder(t *testing.T, st store.Store) {
	ctx := t.Context()
	held := func(tenant, pipeline, job string, n int, paused time.Duration) *store.HeldRouting {
		return &store.HeldRouting{Tenant: tenant, Pipeline: pipeline, Version: "v1", Job: job, InputIndex: 1,
			Key: "pipeline:" + pipeline + ":" + job + ":" + string(rune('a'+n)), Event: json.RawMessage(`{"event_id":` + string(rune('0'+n)) + `}`),
			HeldAt: at(time.Duration(n) * time.Second), PausedSince: at(paused)}
	}
	a1, b1, a2, z1, a3 := held("acme", "etl", "load", 1, 0), held("acme", "etl", "other", 2, 2*time.Second),
		held("acme", "etl", "load", 3, 0), held("zeta", "etl", "load", 4, 4*time.Second), held("acme", "etl", "load", 5, 0)
	inTx(t, st, func(tx store.Tx) error { return tx.HeldRoutingInsertMany(ctx, []*store.HeldRouting{a1, b1, a2, z1}) })
	inTx(t, st, func(tx store.Tx) error { return tx.HeldRoutingInsertMany(ctx, []*store.HeldRouting{a3}) })
	if !(a1.ID > 0 && a1.ID < b1.ID && b1.ID < a2.ID && a2.ID < z1.ID && z1.ID < a3.ID) {
		t.Fatalf("ids %d %d %d %d %d: want increasing in insertion order", a1.ID, b1.ID, a2.ID, z1.ID, a3.ID)
	}
	load := store.PipelineJobKey{Tenant: "acme", Pipeline: "etl", Job: "load"}
	list := func(limit int) []*store.HeldRouting {
		t.Helper()
		hs, err := st.HeldRoutingList(ctx, load, limit)
		if err != nil {
			t.Fatal(err)
		}
		return hs
	}
	got := list(10)
	if len(got) != 3 || got[0].ID != a1.ID || got[1].ID != a2.ID || got[2].ID != a3.ID {
		t.Fatalf("held of acme etl.load: %d rows, want a1 a2 a3 in order", len(got))
	}
	checkSame(t, "a held routing", a1, got[0])
	if got := list(2); len(got) != 2 || got[1].ID != a2.ID {
		t.Errorf("limit 2: %d rows, want a1 a2", len(got))
	}

	sum, err := st.HeldRoutingSummary(ctx, store.HeldSummaryParams{Tenant: "acme", Pipeline: "etl"})
	if err != nil {
		t.Fatal(err)
	}
	want := []*store.HeldSummary{
		{Tenant: "acme", Pipeline: "etl", Job: "load", Held: 3, Events: 3, OldestHeldAt: at(time.Second), PausedSince: at(0)},
		{Tenant: "acme", Pipeline: "etl", Job: "other", Held: 1, Events: 1, OldestHeldAt: at(2 * time.Second), PausedSince: at(2 * time.Second)},
	}
	if len(sum) != len(want) {
		t.Fatalf("summary of acme etl: %d jobs, want %d", len(sum), len(want))
	}
	for i := range want {
		checkSame(t, "summary of "+want[i].Job, want[i], sum[i])
	}
	if all, err := st.HeldRoutingSummary(ctx, store.HeldSummaryParams{}); err != nil || len(all) != 3 || all[2].Tenant != "zeta" {
		t.Errorf("summary of every tenant: %d jobs, %v; want 3, zeta's last", len(all), err)
	}

	// The newest of a job, one found by its key, and coalescing into one.
	if h, err := st.HeldRoutingNewest(ctx, load); err != nil || h.ID != a3.ID {
		t.Fatalf("newest of acme etl.load: %v, %v; want a3 (%d)", h, err, a3.ID)
	}
	if h, err := st.HeldRoutingByKey(ctx, load, a2.Key); err != nil || h.ID != a2.ID {
		t.Fatalf("by key %s: %v, %v; want a2 (%d)", a2.Key, h, err, a2.ID)
	}
	if _, err := st.HeldRoutingByKey(ctx, load, b1.Key); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("acme etl.load by another job's key: %v, want ErrNotFound", err)
	}
	if _, err := st.HeldRoutingNewest(ctx, store.PipelineJobKey{Tenant: "globex", Pipeline: "etl", Job: "load"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("newest of a job that holds nothing: %v, want ErrNotFound", err)
	}
	a2.Event, a2.Events = json.RawMessage(`{"event_id":3,"cursor_end":9}`), 4
	inTx(t, st, func(tx store.Tx) error { return tx.HeldRoutingCoalesce(ctx, a2) })
	if got := list(10); len(got) != 3 {
		t.Fatalf("after coalescing, %d held, want 3", len(got))
	} else {
		checkSame(t, "the routing coalesced into", a2, got[1])
	}
	if sum, _ := st.HeldRoutingSummary(ctx, store.HeldSummaryParams{Tenant: "acme", Pipeline: "etl"}); len(sum) == 0 || sum[0].Held != 3 || sum[0].Events != 6 {
		t.Errorf("summary after coalescing: %+v, want 3 routings covering 6 events", sum)
	}

	var n1, n2 int
	inTx(t, st, func(tx store.Tx) (err error) { n1, err = tx.HeldRoutingDelete(ctx, []int64{a1.ID, a2.ID}); return err })
	inTx(t, st, func(tx store.Tx) (err error) { n2, err = tx.HeldRoutingDelete(ctx, []int64{a1.ID, a3.ID}); return err })
	if n1 != 2 || n2 != 1 {
		t.Errorf("deleted %d then %d, want 2 then 1 (a1 only once)", n1, n2)
	}
	if got := list(10); len(got) != 0 {
		t.Errorf("after the deletes, %d held of acme etl.load, want none", len(got))
	}
	if all, _ := st.HeldRoutingSummary(ctx, store.HeldSummaryParams{}); len(all) != 2 {
		t.Errorf("summary after deletes: %d jobs, want 2", len(all))
	}
	err = st.InTx(ctx, func(tx store.Tx) error { return tx.HeldRoutingCoalesce(ctx, a2) })
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("coalescing into a released routing: %v, want ErrNotFound", err)
	}
}

// testPipelineJobBacklog: a pipeline job's backlog counts its pending tasks, ready or backing
// off, and no other; the oldest ready one is the earliest available among the ready.
func testPipelineJobBacklog(t *testing.T, st store.Store) {
	ctx := t.Context()
	now := at(time.Minute)
	add := func(job string, available time.Duration, running bool) {
		t.Helper()
		j := pipelineJob("acme", "etl", "v1", job)
		tk := newTask(j.ID, "a")
		tk.AvailableAt = at(available)
		seed(t, st, j, tk)
		if running {
			mustClaim(t, st, tk.ID, now)
		}
	}
	add("load", 10*time.Second, false)
	add("load", 5*time.Second, false)
	add("load", time.Hour, false) // backing off: counted, not ready
	add("load", 0, true)          // running: not counted
	add("other", 0, false)
	other := pipelineJob("globex", "etl", "v1", "load")
	seed(t, st, other, newTask(other.ID, "a"))

	b, err := st.PipelineJobBacklog(ctx, store.PipelineJobBacklogParams{
		Job: store.PipelineJobKey{Tenant: "acme", Pipeline: "etl", Job: "load"}, Queue: "default", Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if b.Depth != 3 || !b.OldestReadyAt.Equal(at(5*time.Second)) {
		t.Errorf("backlog = %d, oldest ready %v; want 3, %v", b.Depth, b.OldestReadyAt, at(5*time.Second))
	}
	b, err = st.PipelineJobBacklog(ctx, store.PipelineJobBacklogParams{
		Job: store.PipelineJobKey{Tenant: "acme", Pipeline: "etl", Job: "none"}, Queue: "default", Now: now})
	if err != nil || b.Depth != 0 || !b.OldestReadyAt.IsZero() {
		t.Errorf("backlog of a job without tasks = %+v, %v; want zero", b, err)
	}
}
