// Contract of buffered publishes: insertion, the claimable queue, receipts and dead letters.

package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/baton-dev/baton/internal/store"
)

// testExtendBufferPublishIsFencedByTheReceipt: only the latest receive of a queued message moves
// its visibility, and only that; a stale or unknown receipt, a settled message or an unknown id
// changes nothing.
func testExtendBufferPublishIsFencedByTheReceipt(t *testing.T, st store.Store) {
	ctx := t.Context()
	job := newJob("acme")
	tk := newTask(job.ID, "a")
	seed(t, st, job, tk)
	bp := &store.BufferPublish{TaskID: tk.ID, Attempt: 1, BatchURI: "file:///b/batch.jsonl", JobID: job.ID, Tenant: "acme",
		DatasetUUID: "ds", CreatedAt: t0}
	other := &store.BufferPublish{TaskID: tk.ID, Attempt: 1, BatchURI: "file:///b/other.jsonl", JobID: job.ID, Tenant: "acme",
		DatasetUUID: "ds", CreatedAt: t0}
	inTx(t, st, func(tx store.Tx) error {
		for _, p := range []*store.BufferPublish{bp, other} {
			if _, err := tx.BufferPublishInsert(ctx, p); err != nil {
				return err
			}
			// Received once, its claim lasting a minute.
			p.State, p.ReceiveCount, p.VisibleAt = store.BufferQueued, 1, at(time.Minute)
			if err := tx.BufferPublishUpdate(ctx, p); err != nil {
				return err
			}
		}
		return nil
	})
	get := func(id int64) *store.BufferPublish {
		t.Helper()
		p, err := st.BufferPublishGet(ctx, id)
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
			ok, err = tx.BufferPublishExtend(ctx, store.BufferPublishExtendParams{ID: id, Receipt: receipt, VisibleAt: until})
			return err
		})
		return ok
	}
	update := func(p *store.BufferPublish) {
		t.Helper()
		inTx(t, st, func(tx store.Tx) error { return tx.BufferPublishUpdate(ctx, p) })
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

// newPublish is a batch a task's first attempt wrote into a buffered dataset, as the dispatcher
// records it.
func newPublish(tk *store.Task, tenant, dataset, batchURI string) *store.BufferPublish {
	return &store.BufferPublish{TaskID: tk.ID, Attempt: 1, BatchURI: batchURI, JobID: tk.JobID, Tenant: tenant,
		DatasetUUID: dataset, DatasetVersion: "v1", RecordCount: int64p(120), ContentType: "application/x-ndjson",
		BatchSizeBytes: int64p(48_213), DedupeScope: "orders", CreatedAt: t0, State: store.BufferQueued, VisibleAt: t0}
}

// insertPublishes stores new publish records, each in its own transaction, in order.
func insertPublishes(t testing.TB, st store.Store, ps ...*store.BufferPublish) {
	t.Helper()
	for _, p := range ps {
		var ok bool
		inTx(t, st, func(tx store.Tx) error {
			var err error
			ok, err = tx.BufferPublishInsert(t.Context(), p)
			return err
		})
		if !ok || p.ID <= 0 {
			t.Fatalf("InsertBufferPublish(%s) of a new record = %v, ID %d", p.BatchURI, ok, p.ID)
		}
	}
}

// setQueue writes the queue fields of stored publish records.
func setQueue(t testing.TB, st store.Store, ps ...*store.BufferPublish) {
	t.Helper()
	inTx(t, st, func(tx store.Tx) error {
		for _, p := range ps {
			if err := tx.BufferPublishUpdate(t.Context(), p); err != nil {
				return err
			}
		}
		return nil
	})
}

func getPublish(t testing.TB, st store.Reader, id int64) *store.BufferPublish {
	t.Helper()
	p, err := st.BufferPublishGet(t.Context(), id)
	if err != nil {
		t.Fatalf("GetBufferPublish(%d): %v", id, err)
	}
	return p
}

func publishIDs(ps []*store.BufferPublish) []int64 {
	out := make([]int64, len(ps))
	for i, p := range ps {
		out[i] = p.ID
	}
	return out
}

// claimable runs BufferPublishListClaimable in a transaction it rolls back.
func claimable(t testing.TB, st store.Store, now time.Time, id int64, limit int) []*store.BufferPublish {
	t.Helper()
	rollback := errors.New("rollback")
	var out []*store.BufferPublish
	err := st.InTx(t.Context(), func(tx store.Tx) error {
		var err error
		if out, err = tx.BufferPublishListClaimable(t.Context(), store.BufferPublishListClaimableParams{Now: now, ID: id, Limit: limit}); err != nil {
			return err
		}
		return rollback
	})
	if !errors.Is(err, rollback) {
		t.Fatalf("ClaimableBufferPublishes: %v", err)
	}
	return out
}

// checkPublishes checks that got lists the stored records of want, in order, with every field.
func checkPublishes(t testing.TB, st store.Store, what string, got []*store.BufferPublish, want ...*store.BufferPublish) {
	t.Helper()
	if !slices.Equal(publishIDs(got), publishIDs(want)) {
		t.Errorf("%s: IDs %v, want %v", what, publishIDs(got), publishIDs(want))
		return
	}
	for i, w := range want {
		checkSame(t, fmt.Sprintf("%s: publish %d", what, w.ID), getPublish(t, st, w.ID), got[i])
	}
}

// testInsertBufferPublishIsIdempotent: BufferPublishInsert stores a queued record with every
// field once per (task, attempt, batch URI); a repeat reports false and changes nothing.
// BufferPublishGet reads a record back (ErrNotFound for an unknown id) and BufferPublishListByTask
// lists a task's records in the order they were published.
func testInsertBufferPublishIsIdempotent(t *testing.T, st store.Store) {
	ctx := t.Context()
	job := newJob("acme")
	a, b := newTask(job.ID, "a"), newTask(job.ID, "b")
	seed(t, st, job, a, b)
	ds := uuid.NewString()

	p := newPublish(a, "acme", ds, "s3://lake/buffers/"+ds+"/"+a.ID+"/1/part-0001.jsonl")
	bare := newPublish(a, "acme", ds, "s3://lake/buffers/"+ds+"/"+a.ID+"/1/part-0002.jsonl")
	bare.DatasetVersion, bare.RecordCount, bare.ContentType, bare.BatchSizeBytes, bare.DedupeScope = "", nil, "", nil, ""
	bare.CreatedAt = at(time.Second)
	insertPublishes(t, st, p, bare)
	if p.ID == bare.ID {
		t.Fatalf("two records got the same ID %d", p.ID)
	}
	// Stored queued, never received, claimable at once.
	for _, w := range []*store.BufferPublish{p, bare} {
		got := getPublish(t, st, w.ID)
		checkSame(t, "stored publish "+w.BatchURI, w, got, "VisibleAt")
		if got.VisibleAt.After(w.CreatedAt) {
			t.Errorf("publish %s is visible from %v, after its publish at %v", w.BatchURI, got.VisibleAt, w.CreatedAt)
		}
	}
	checkPublishes(t, st, "a new record", claimable(t, st, p.CreatedAt, p.ID, 10), p)

	// A repeat of the same task, attempt and URI: nothing stored, nothing changed.
	before := getPublish(t, st, p.ID)
	repeat := newPublish(a, "acme", ds, p.BatchURI)
	repeat.RecordCount, repeat.DatasetVersion, repeat.CreatedAt = int64p(1), "v2", at(time.Hour)
	var ok bool
	inTx(t, st, func(tx store.Tx) error {
		var err error
		ok, err = tx.BufferPublishInsert(ctx, repeat)
		return err
	})
	if ok {
		t.Error("InsertBufferPublish of a recorded (task, attempt, batch URI) = true, want false")
	}
	checkSame(t, "a record after its repeat", before, getPublish(t, st, p.ID))

	// Another attempt, or another task, with the same URI is another record.
	second := newPublish(a, "acme", ds, p.BatchURI)
	second.Attempt, second.CreatedAt = 2, at(2*time.Second)
	ofB := newPublish(b, "acme", ds, p.BatchURI)
	insertPublishes(t, st, second, ofB)

	list := func(taskID string) []*store.BufferPublish {
		t.Helper()
		ps, err := st.BufferPublishListByTask(ctx, taskID)
		if err != nil {
			t.Fatalf("ListBufferPublishes(%s): %v", taskID, err)
		}
		return ps
	}
	checkPublishes(t, st, "ListBufferPublishes(a)", list(a.ID), p, bare, second)
	checkPublishes(t, st, "ListBufferPublishes(b)", list(b.ID), ofB)
	checkPublishes(t, st, "ListBufferPublishes(unknown)", list(uuid.NewString()))

	unknown := ofB.ID + 1000
	if got, err := st.BufferPublishGet(ctx, unknown); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetBufferPublish(unknown) = %v, %v; want ErrNotFound", got, err)
	}
	inTx(t, st, func(tx store.Tx) error {
		if got, err := tx.BufferPublishGet(ctx, unknown); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("GetBufferPublish(unknown) inside a transaction = %v, %v; want ErrNotFound", got, err)
		}
		got, err := tx.BufferPublishGet(ctx, second.ID)
		if err != nil {
			return err
		}
		checkSame(t, "GetBufferPublish inside a transaction", getPublish(t, st, second.ID), got)
		return nil
	})
}

// testClaimableBufferPublishes: BufferPublishListClaimable selects queued records visible at or
// before now, oldest first (the longest visible, then in publish order), at most limit, only
// record id when id > 0.
func testClaimableBufferPublishes(t *testing.T, st store.Store) {
	job := newJob("acme")
	tk := newTask(job.ID, "a")
	seed(t, st, job, tk)
	ds := uuid.NewString()
	now := at(30 * time.Second)
	batch := func(name, state string, receives int, visible time.Time) *store.BufferPublish {
		p := newPublish(tk, "acme", ds, "s3://lake/buffers/"+ds+"/"+tk.ID+"/1/"+name+".jsonl")
		p.State, p.ReceiveCount, p.VisibleAt = state, receives, visible
		if state != store.BufferQueued {
			p.FinishedAt = t0
		}
		return p
	}
	expired := batch("expired", store.BufferQueued, 1, at(10*time.Second)) // a claim that ran out
	fresh := batch("fresh", store.BufferQueued, 0, t0)
	expired2 := batch("expired-2", store.BufferQueued, 2, at(10*time.Second))
	claimed := batch("claimed", store.BufferQueued, 1, at(time.Minute)) // invisible until then
	committed := batch("committed", store.BufferCommitted, 1, t0)
	dead := batch("dead", store.BufferDead, 5, t0)
	due := batch("due", store.BufferQueued, 0, now) // visible from now exactly
	all := []*store.BufferPublish{expired, fresh, expired2, claimed, committed, dead, due}
	insertPublishes(t, st, all...)
	setQueue(t, st, all...)

	checkPublishes(t, st, "claimable now", claimable(t, st, now, 0, 10), fresh, expired, expired2, due)
	checkPublishes(t, st, "claimable now, limit 2", claimable(t, st, now, 0, 2), fresh, expired)
	checkPublishes(t, st, "claimable just before now", claimable(t, st, now.Add(-time.Millisecond), 0, 10), fresh, expired, expired2)
	checkPublishes(t, st, "claimable before any is visible", claimable(t, st, t0.Add(-time.Millisecond), 0, 10))
	checkPublishes(t, st, "claimable in an hour", claimable(t, st, at(time.Hour), 0, 10), fresh, expired, expired2, due, claimed)

	// One record by id: when it is claimable, and only then.
	checkPublishes(t, st, "claimable record expired-2", claimable(t, st, now, expired2.ID, 10), expired2)
	checkPublishes(t, st, "claimable record due", claimable(t, st, now, due.ID, 1), due)
	for _, p := range []*store.BufferPublish{claimed, committed, dead} {
		checkPublishes(t, st, "claimable record "+p.BatchURI+" now", claimable(t, st, now, p.ID, 10))
	}
	checkPublishes(t, st, "claimable record claimed in an hour", claimable(t, st, at(time.Hour), claimed.ID, 10), claimed)
	checkPublishes(t, st, "claimable unknown record", claimable(t, st, at(time.Hour), due.ID+1000, 10))
}

// testClaimableBufferPublishesSkipsHeldRows: a claim skips the records another transaction's
// claim holds, rather than waiting for it or taking them too. Where write transactions run one
// at a time, the second claim runs once the first transaction ended, and finds both.
func testClaimableBufferPublishesSkipsHeldRows(t *testing.T, st store.Store) {
	ctx := t.Context()
	job := newJob("acme")
	tk := newTask(job.ID, "a")
	seed(t, st, job, tk)
	ds := uuid.NewString()
	first := newPublish(tk, "acme", ds, "s3://lake/buffers/"+ds+"/"+tk.ID+"/1/first.jsonl")
	second := newPublish(tk, "acme", ds, "s3://lake/buffers/"+ds+"/"+tk.ID+"/1/second.jsonl")
	insertPublishes(t, st, first, second)
	_, shared := st.(store.Listener) // a store shared between processes: transactions run side by side

	rollback := errors.New("rollback")
	var (
		held, all, byID []*store.BufferPublish
		otherErr        error
		started, during bool
		done            = make(chan struct{})
	)
	err := st.InTx(ctx, func(tx store.Tx) error {
		var err error
		if held, err = tx.BufferPublishListClaimable(ctx, store.BufferPublishListClaimableParams{Now: t0, Limit: 1}); err != nil {
			return err
		}
		started = true
		go func() {
			defer close(done)
			otherErr = st.InTx(ctx, func(tx store.Tx) error {
				var err error
				if all, err = tx.BufferPublishListClaimable(ctx, store.BufferPublishListClaimableParams{Now: t0, Limit: 10}); err != nil {
					return err
				}
				if byID, err = tx.BufferPublishListClaimable(ctx, store.BufferPublishListClaimableParams{Now: t0, ID: first.ID, Limit: 10}); err != nil {
					return err
				}
				return rollback
			})
		}()
		if shared {
			select {
			case <-done:
				during = true
			case <-time.After(30 * time.Second):
			}
		}
		return rollback
	})
	if !started {
		t.Fatalf("the first claim: %v", err)
	}
	<-done
	if !errors.Is(err, rollback) {
		t.Fatalf("the first claim: %v", err)
	}
	if !errors.Is(otherErr, rollback) {
		t.Fatalf("the second claim: %v", otherErr)
	}
	checkIDs(t, "the first claim", fmtIDs(publishIDs(held)), fmtIDs([]int64{first.ID}))
	switch {
	case during:
		checkIDs(t, "a claim while another holds the first record", fmtIDs(publishIDs(all)), fmtIDs([]int64{second.ID}))
		checkIDs(t, "a claim of the held record by id", fmtIDs(publishIDs(byID)), nil)
	case shared:
		t.Error("a claim waited for the transaction that held another record")
	default:
		checkIDs(t, "a claim after the first transaction ended", fmtIDs(publishIDs(all)), fmtIDs([]int64{first.ID, second.ID}))
		checkIDs(t, "a claim by id after the first transaction ended", fmtIDs(publishIDs(byID)), fmtIDs([]int64{first.ID}))
	}
}

func fmtIDs(ids []int64) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = fmt.Sprint(id)
	}
	return out
}

// testUpdateBufferPublishWritesQueueFields: BufferPublishUpdate writes the queue fields of a
// record (clearing them too) and nothing else; an unknown record is ErrNotFound.
func testUpdateBufferPublishWritesQueueFields(t *testing.T, st store.Store) {
	ctx := t.Context()
	job := newJob("acme")
	tk := newTask(job.ID, "a")
	seed(t, st, job, tk)
	ds := uuid.NewString()
	p := newPublish(tk, "acme", ds, "s3://lake/buffers/"+ds+"/"+tk.ID+"/1/part-0001.jsonl")
	neighbour := newPublish(tk, "acme", ds, "s3://lake/buffers/"+ds+"/"+tk.ID+"/1/part-0002.jsonl")
	insertPublishes(t, st, p, neighbour)
	original, neighbourBefore := getPublish(t, st, p.ID), getPublish(t, st, neighbour.ID)

	// A sink committed it: every queue field set. The caller's other fields are not written.
	u := *original
	u.State, u.ReceiveCount, u.VisibleAt, u.LastError = store.BufferCommitted, 3, at(5*time.Minute), "connection reset"
	u.Cursor, u.RowsInserted, u.FinishedAt = int64p(42_000), int64p(117), at(6*time.Minute)
	u.TaskID, u.Attempt, u.BatchURI, u.JobID, u.Tenant = "other-task", 7, "s3://elsewhere", "other-job", "globex"
	u.DatasetUUID, u.DatasetVersion, u.RecordCount, u.ContentType = "other-dataset", "v9", int64p(1), "text/csv"
	u.BatchSizeBytes, u.DedupeScope, u.CreatedAt = int64p(2), "other", at(time.Hour)
	setQueue(t, st, &u)
	want := *original
	want.State, want.ReceiveCount, want.VisibleAt, want.LastError = store.BufferCommitted, 3, at(5*time.Minute), "connection reset"
	want.Cursor, want.RowsInserted, want.FinishedAt = int64p(42_000), int64p(117), at(6*time.Minute)
	checkSame(t, "a record after UpdateBufferPublish", &want, getPublish(t, st, p.ID))

	// Back on the queue (a retried dead letter): the optional fields cleared.
	c := want
	c.State, c.ReceiveCount, c.VisibleAt, c.LastError = store.BufferQueued, 0, at(7*time.Minute), ""
	c.Cursor, c.RowsInserted, c.FinishedAt = nil, nil, time.Time{}
	setQueue(t, st, &c)
	checkSame(t, "a record after clearing its queue fields", &c, getPublish(t, st, p.ID))
	checkSame(t, "a neighbour", neighbourBefore, getPublish(t, st, neighbour.ID))

	ghost := newPublish(tk, "acme", ds, "s3://lake/ghost")
	ghost.ID = neighbour.ID + 1000
	if err := st.InTx(ctx, func(tx store.Tx) error { return tx.BufferPublishUpdate(ctx, ghost) }); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("UpdateBufferPublish(unknown) = %v, want ErrNotFound", err)
	}
	if got, err := st.BufferPublishGet(ctx, ghost.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetBufferPublish after UpdateBufferPublish(unknown) = %v, %v; want ErrNotFound", got, err)
	}
}

// testListBufferDeadLetters: BufferPublishListDeadLetters pages through a dataset's dead records,
// oldest first, after an id.
func testListBufferDeadLetters(t *testing.T, st store.Store) {
	ctx := t.Context()
	job := newJob("acme")
	tk := newTask(job.ID, "a")
	seed(t, st, job, tk)
	ds, other := uuid.NewString(), uuid.NewString()
	batch := func(dataset, name, state string) *store.BufferPublish {
		p := newPublish(tk, "acme", dataset, "s3://lake/buffers/"+dataset+"/"+tk.ID+"/1/"+name+".jsonl")
		p.State, p.ReceiveCount, p.VisibleAt = state, 5, at(time.Minute)
		if state != store.BufferQueued {
			p.FinishedAt, p.LastError = at(2*time.Minute), "no sink committed it (after 5 receives)"
		}
		return p
	}
	d1 := batch(ds, "d1", store.BufferDead)
	queued := batch(ds, "queued", store.BufferQueued)
	elsewhere := batch(other, "elsewhere", store.BufferDead)
	d2 := batch(ds, "d2", store.BufferDead)
	committed := batch(ds, "committed", store.BufferCommitted)
	d3 := batch(ds, "d3", store.BufferDead)
	all := []*store.BufferPublish{d1, queued, elsewhere, d2, committed, d3}
	insertPublishes(t, st, all...)
	setQueue(t, st, all...)

	list := func(dataset string, after int64, limit int) []*store.BufferPublish {
		t.Helper()
		ps, err := st.BufferPublishListDeadLetters(ctx, store.BufferPublishListDeadLettersParams{DatasetUUID: dataset, AfterID: after, Limit: limit})
		if err != nil {
			t.Fatalf("ListBufferDeadLetters(%s, %d, %d): %v", dataset, after, limit, err)
		}
		return ps
	}
	checkPublishes(t, st, "dead letters", list(ds, 0, 10), d1, d2, d3)
	checkPublishes(t, st, "first page", list(ds, 0, 2), d1, d2)
	checkPublishes(t, st, "second page", list(ds, d2.ID, 2), d3)
	checkPublishes(t, st, "after the first", list(ds, d1.ID, 10), d2, d3)
	checkPublishes(t, st, "after the last", list(ds, d3.ID, 10))
	checkPublishes(t, st, "another dataset's", list(other, 0, 10), elsewhere)
	checkPublishes(t, st, "an unknown dataset's", list(uuid.NewString(), 0, 10))

	// A dead letter put back on the queue is no longer one.
	retried := getPublish(t, st, d2.ID)
	retried.State, retried.ReceiveCount, retried.VisibleAt, retried.FinishedAt = store.BufferQueued, 0, at(3*time.Minute), time.Time{}
	setQueue(t, st, retried)
	checkPublishes(t, st, "dead letters after a retry", list(ds, 0, 10), d1, d3)
}
