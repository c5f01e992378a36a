// Contract of output resets (bootstrap.reset_outputs) and of discarding a dataset's queued
// buffered publishes.

package storetest

import (
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/store"
)

// testOutputResetsRoundTripNewestFirst: a reset reads back as written, newest first, selected
// by tenant and by pipeline or dataset, and limited.
func testOutputResetsRoundTripNewestFirst(t *testing.T, st store.Store) {
	ctx := t.Context()
	reset := func(tenant, pipeline, ds string, rows int64, after time.Duration) *store.OutputReset {
		return &store.OutputReset{Tenant: tenant, Pipeline: pipeline, Version: "v1", Job: "scan", APIKey: "key-1",
			DatasetUUID: ds, DatasetName: "alert_events", OutputIndex: 2, PreviousVersion: "old", DatasetVersion: "new",
			RowsRemoved: rows, BatchesDiscarded: rows + 1, At: at(after)}
	}
	a1, a2 := reset("acme", "alerts", "ds-a", 3, time.Second), reset("acme", "alerts", "ds-b", 1<<40, 2*time.Second)
	b1 := reset("acme", "other", "ds-a", 5, 3*time.Second)
	z1 := reset("zeta", "alerts", "ds-a", 7, 4*time.Second)
	inTx(t, st, func(tx store.Tx) error { return tx.OutputResetInsertMany(ctx, []*store.OutputReset{a1, a2, b1, z1}) })
	if a1.ID == 0 || !(a1.ID < a2.ID && a2.ID < b1.ID && b1.ID < z1.ID) {
		t.Fatalf("ids %d %d %d %d: want increasing in insertion order", a1.ID, a2.ID, b1.ID, z1.ID)
	}
	list := func(p store.OutputResetListParams) []*store.OutputReset {
		t.Helper()
		if p.Limit == 0 {
			p.Limit = 100
		}
		rs, err := st.OutputResetList(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return rs
	}
	ids := func(rs []*store.OutputReset) []int64 {
		var out []int64
		for _, r := range rs {
			out = append(out, r.ID)
		}
		return out
	}
	got := list(store.OutputResetListParams{Tenant: "acme", Pipeline: "alerts"})
	if len(got) != 2 || got[0].ID != a2.ID || got[1].ID != a1.ID {
		t.Fatalf("pipeline alerts of acme: %v, want [%d %d]", ids(got), a2.ID, a1.ID)
	}
	checkSame(t, "an output reset", a2, got[0])
	if g := ids(list(store.OutputResetListParams{Tenant: "acme", DatasetUUID: "ds-a"})); len(g) != 2 || g[0] != b1.ID || g[1] != a1.ID {
		t.Errorf("dataset ds-a of acme: %v, want [%d %d]", g, b1.ID, a1.ID)
	}
	if g := ids(list(store.OutputResetListParams{Tenant: "acme", Pipeline: "other", DatasetUUID: "ds-b"})); len(g) != 0 {
		t.Errorf("pipeline other, dataset ds-b: %v, want none", g)
	}
	if g := ids(list(store.OutputResetListParams{Tenant: "acme", Limit: 1})); len(g) != 1 || g[0] != b1.ID {
		t.Errorf("acme, limit 1: %v, want [%d]", g, b1.ID)
	}
	if g := ids(list(store.OutputResetListParams{Tenant: "nobody"})); len(g) != 0 {
		t.Errorf("another tenant sees %v", g)
	}
}

// testDiscardQueuedBufferPublishes: only the queued publishes of the tenant's dataset become
// dead, with the reason and time; committed and dead ones, other datasets' and other tenants'
// are left as they were.
func testDiscardQueuedBufferPublishes(t *testing.T, st store.Store) {
	ctx := t.Context()
	job := newJob("acme")
	tk := newTask(job.ID, "a")
	seed(t, st, job, tk)
	pub := func(name, tenant, ds, state string) *store.BufferPublish {
		return &store.BufferPublish{TaskID: tk.ID, Attempt: 1, BatchURI: "file:///b/" + name, JobID: job.ID, Tenant: tenant,
			DatasetUUID: ds, CreatedAt: t0, State: state, VisibleAt: t0}
	}
	queued, queued2 := pub("q1", "acme", "ds", store.BufferQueued), pub("q2", "acme", "ds", store.BufferQueued)
	committed, dead := pub("c", "acme", "ds", store.BufferCommitted), pub("d", "acme", "ds", store.BufferDead)
	otherDS, otherTenant := pub("o", "acme", "ds2", store.BufferQueued), pub("z", "zeta", "ds", store.BufferQueued)
	all := []*store.BufferPublish{queued, queued2, committed, dead, otherDS, otherTenant}
	inTx(t, st, func(tx store.Tx) error {
		for _, p := range all {
			if _, err := tx.BufferPublishInsert(ctx, p); err != nil {
				return err
			}
			if err := tx.BufferPublishUpdate(ctx, p); err != nil {
				return err
			}
		}
		return nil
	})
	before := map[int64]*store.BufferPublish{}
	for _, p := range all {
		got, err := st.BufferPublishGet(ctx, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		before[p.ID] = got
	}
	var n int
	inTx(t, st, func(tx store.Tx) error {
		var err error
		n, err = tx.BufferPublishDiscardQueued(ctx, store.BufferPublishDiscardParams{Tenant: "acme", DatasetUUID: "ds",
			Reason: "discarded by a reset", Now: at(time.Minute)})
		return err
	})
	if n != 2 {
		t.Errorf("discarded %d, want 2", n)
	}
	for _, p := range all {
		got, err := st.BufferPublishGet(ctx, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		if p == queued || p == queued2 {
			checkSame(t, "a discarded publish", before[p.ID], got, "State", "LastError", "FinishedAt")
			if got.State != store.BufferDead || got.LastError != "discarded by a reset" || !got.FinishedAt.Equal(at(time.Minute)) {
				t.Errorf("discarded publish: state %s, error %q, finished %v", got.State, got.LastError, got.FinishedAt)
			}
			continue
		}
		checkSame(t, "a publish left alone", before[p.ID], got)
	}
}
