package storetest

import (
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/store"
)

// testExtendBufferPublishIsFencedByTheReceipt: only the latest receive of a queued message moves
// its visibility, and only that; a stale or unknown receipt, a settled message or an unknown id
// changes nothing.
func testExtendBufferPublishIsFencedByTheReceipt(t *testing.T, st store.Store) {
	ctx := t.Context()
	job := newJob("acme")
	tk := seed(t, st, job, newTask(job.ID, "a"))["a"]
	bp := &store.BufferPublish{TaskID: tk.ID, Attempt: 1, BatchURI: "file:///b/batch.jsonl", JobID: job.ID, Tenant: "acme",
		DatasetUUID: "ds", CreatedAt: t0}
	other := &store.BufferPublish{TaskID: tk.ID, Attempt: 1, BatchURI: "file:///b/other.jsonl", JobID: job.ID, Tenant: "acme",
		DatasetUUID: "ds", CreatedAt: t0}
	inTx(t, st, func(tx store.Tx) error {
		for _, p := range []*store.BufferPublish{bp, other} {
			if _, err := tx.InsertBufferPublish(ctx, p); err != nil {
				return err
			}
			// Received once, its claim lasting a minute.
			p.State, p.ReceiveCount, p.VisibleAt = store.BufferQueued, 1, at(time.Minute)
			if err := tx.UpdateBufferPublish(ctx, p); err != nil {
				return err
			}
		}
		return nil
	})
	get := func(id int64) *store.BufferPublish {
		t.Helper()
		p, err := st.GetBufferPublish(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	extend := func(id int64, receipt int, until time.Time) bool {
		t.Helper()
		var ok bool
		inTx(t, st, func(tx store.Tx) error {
			var err error
			ok, err = tx.ExtendBufferPublish(ctx, id, receipt, until)
			return err
		})
		return ok
	}
	update := func(p *store.BufferPublish) {
		t.Helper()
		inTx(t, st, func(tx store.Tx) error { return tx.UpdateBufferPublish(ctx, p) })
	}
	otherBefore := get(other.ID)

	// The current receipt extends the claim, even once its visibility ran out (no one took the
	// message over), and nothing but the visibility changes.
	before := get(bp.ID)
	if !extend(bp.ID, 1, at(3*time.Minute)) {
		t.Fatal("the current receipt did not extend the claim")
	}
	got := get(bp.ID)
	checkSame(t, "an extended publish", before, got, "VisibleAt")
	if !got.VisibleAt.Equal(at(3 * time.Minute)) {
		t.Errorf("visible at %v after the extension, want %v", got.VisibleAt, at(3*time.Minute))
	}
	if !extend(bp.ID, 1, at(2*time.Minute)) || !get(bp.ID).VisibleAt.Equal(at(2*time.Minute)) {
		t.Error("the current receipt could not set an earlier visibility")
	}

	// Another receive takes the message over: the old receipt, and one no claim handed out yet,
	// change nothing.
	got.ReceiveCount, got.VisibleAt = 2, at(4*time.Minute)
	update(got)
	before = get(bp.ID)
	for _, receipt := range []int{1, 3, 0, -1} {
		if extend(bp.ID, receipt, at(time.Hour)) {
			t.Errorf("receipt %d of a message received twice extended it", receipt)
		}
		checkSame(t, "a publish after a refused extension", before, get(bp.ID))
	}
	if !extend(bp.ID, 2, at(6*time.Minute)) || !get(bp.ID).VisibleAt.Equal(at(6*time.Minute)) {
		t.Error("the new receipt did not extend the claim")
	}

	// A settled message is no one's to extend.
	for _, state := range []string{store.BufferCommitted, store.BufferDead} {
		p := get(bp.ID)
		p.State, p.FinishedAt = state, at(7*time.Minute)
		update(p)
		before = get(bp.ID)
		if extend(bp.ID, 2, at(time.Hour)) {
			t.Errorf("a %s message was extended", state)
		}
		checkSame(t, "a settled publish after a refused extension", before, get(bp.ID))
	}
	if extend(bp.ID+other.ID+1000, 1, at(time.Hour)) {
		t.Error("an unknown id was extended")
	}
	// No other message was touched.
	checkSame(t, "another publish", otherBefore, get(other.ID))
}
