package sink_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/blob"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/sink"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/wire"
)

// claimVisibility is the short visibility of the claim tests: their loads last several of it.
const claimVisibility = 2 * time.Second

// slowLoad holds a sink's loads until it is released or the load's context ends.
type slowLoad struct {
	started  chan struct{}
	release  chan struct{}
	canceled atomic.Pointer[error] // the cause of the load's context, when it ended first
}

// slowSink is a sink of f's queue (through queue, when not nil) with a visibility of
// claimVisibility on f's fake clock, whose loads wait for the returned slowLoad.
func (f *fixture) slowSink(queue sink.Queue) (*sink.Sink, *slowLoad) {
	f.t.Helper()
	if queue == nil {
		queue = f.queue
	}
	sk, err := sink.New(sink.Config{Queue: queue, Blob: f.blob, Data: f.data, Logger: quiet, Visibility: claimVisibility, Clock: f.clock})
	if err != nil {
		f.t.Fatal(err)
	}
	slow := &slowLoad{started: make(chan struct{}), release: make(chan struct{})}
	sink.SetLoadHook(sk, func(ctx context.Context, _ wire.SinkMessage) {
		close(slow.started)
		select {
		case <-slow.release:
		case <-ctx.Done():
			cause := context.Cause(ctx)
			slow.canceled.Store(&cause)
		}
	})
	return sk, slow
}

// queued puts a batch of rows in object storage under c's attempt and queues its message, as a
// publish of that attempt does (written straight to the store: who may publish is not what these
// tests are about).
func (f *fixture) queued(c *dispatch.Claim, name string, rows ...string) *store.BufferPublish {
	f.t.Helper()
	key := blob.BatchPrefix(f.dataset.UUID, c.Task.ID, c.Task.Attempt) + name
	if err := f.blob.Put(f.ctx, key, []byte(strings.Join(rows, "\n")+"\n"), "application/jsonl"); err != nil {
		f.t.Fatal(err)
	}
	rec := &store.BufferPublish{TaskID: c.Task.ID, Attempt: c.Task.Attempt, BatchURI: f.blob.URI(key), JobID: c.Task.JobID,
		Tenant: tenant, DatasetUUID: f.dataset.UUID, DatasetVersion: f.dataset.CurrentVersion, CreatedAt: f.clock.Now()}
	err := f.st.InTx(f.ctx, func(tx store.Tx) error {
		_, err := tx.BufferPublishInsert(f.ctx, rec)
		return err
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return rec
}

// rowsOf makes n distinct rows.
func rowsOf(n int) []string {
	rows := make([]string, n)
	for i := range rows {
		rows[i] = fmt.Sprintf(`{"dedupe_key":"k%04d","severity":"%s","block":%d}`, i, []string{"high", "low"}[i%2], i)
	}
	return rows
}

// claimOne claims message id for claimVisibility, as another sink would: want says whether it
// must get it.
func (f *fixture) claimOne(id int64, want bool) wire.SinkMessage {
	f.t.Helper()
	msgs, err := f.queue.Claim(f.ctx, wire.SinkClaimRequest{ID: id, VisibilitySeconds: int(claimVisibility / time.Second)})
	if err != nil {
		f.t.Fatalf("claim: %v", err)
	}
	if (len(msgs) == 1) != want {
		f.t.Fatalf("claim of message %d at %v: %d messages, want it %v", id, f.clock.Now(), len(msgs), want)
	}
	if want {
		return msgs[0]
	}
	return wire.SinkMessage{}
}

// publishRecord reads the only publish record of task taskID.
func (f *fixture) publishRecord(taskID string) *store.BufferPublish {
	f.t.Helper()
	recs, err := f.st.BufferPublishListByTask(f.ctx, taskID)
	if err != nil || len(recs) != 1 {
		f.t.Fatalf("publish records %v %v, want one", recs, err)
	}
	return recs[0]
}

// eventually waits for cond, failing the test if it does not hold within a deadline far longer
// than it needs even on a loaded machine.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within a minute", what)
		}
	}
}

// tick moves f's clock by d once the sink's claim keeper waits on it.
func (f *fixture) tick(t *testing.T, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(f.ctx, time.Minute)
	defer cancel()
	if err := f.clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatalf("the sink does not wait for its next extension: %v", err)
	}
	f.clock.Advance(d)
}

// checkCommittedOnce checks that taskID's one batch of n rows was committed once, by the receive
// receipt, with every row in the table once and one dataset event.
func (f *fixture) checkCommittedOnce(t *testing.T, taskID string, n, receipt int) {
	t.Helper()
	rec := f.publishRecord(taskID)
	if rec.State != store.BufferCommitted || rec.ReceiveCount != receipt || rec.RowsInserted == nil || *rec.RowsInserted != int64(n) ||
		rec.Cursor == nil || *rec.Cursor != 1 {
		t.Errorf("publish %+v: want committed after %d receives with %d rows inserted at cursor 1", rec, receipt, n)
	}
	if got := f.rows(tenant); len(got) != n || len(keys(got)) != n {
		t.Errorf("the table holds %d rows, want %d", len(got), n)
	}
	events, err := f.st.DatasetEventListByTask(f.ctx, taskID)
	if err != nil || len(events) != 1 || events[0].Cursor == nil || *events[0].Cursor != 1 {
		t.Errorf("dataset events %v %v, want one with cursor 1", events, err)
	}
}

// A load that lasts five visibilities keeps its claim: the sink extends it every third of the
// visibility, no other sink can claim the batch meanwhile, and the batch is committed once, after
// one receive.
func TestSinkKeepsItsClaimWhileALoadOutlastsTheVisibility(t *testing.T) {
	forEachSetup(t, func(t *testing.T, f *fixture) {
		sk, slow := f.slowSink(nil)
		w := f.writer("scan")
		const n = 300
		m := f.claimOne(f.queued(w, "slow.jsonl", rowsOf(n)...).ID, true)
		done := make(chan error, 1)
		go func() { done <- sk.Process(f.ctx, m) }()
		<-slow.started
		for range 10 {
			f.tick(t, claimVisibility/2)
			until := f.clock.Now().Add(claimVisibility)
			eventually(t, "the claim extended to "+until.String(), func() bool { return f.publishRecord(w.Task.ID).VisibleAt.Equal(until) })
			f.claimOne(m.ID, false)
		}
		close(slow.release)
		if err := <-done; err != nil {
			t.Fatalf("process: %v", err)
		}
		f.checkCommittedOnce(t, w.Task.ID, n, 1)
	})
}

// outOfReach is a queue whose extensions fail, as when the server is out of the sink's reach,
// while down is set.
type outOfReach struct {
	sink.Queue
	down  atomic.Bool
	tries atomic.Int32
}

func (q *outOfReach) Extend(ctx context.Context, p wire.SinkExtend) error {
	q.tries.Add(1)
	if q.down.Load() {
		return errors.New("the server is out of reach")
	}
	return q.Queue.Extend(ctx, p)
}

// A sink whose claim ran out while it could not extend it, and that another sink claimed
// meanwhile, learns at its next extension that the claim is lost: its load is canceled before it
// writes anything and it reports nothing; the new holder loads the batch (not a repeat: nothing
// of it was loaded) and commits it once.
func TestSinkThatLostItsClaimLoadsNothing(t *testing.T) {
	forEachSetup(t, func(t *testing.T, f *fixture) {
		q := &outOfReach{Queue: f.queue}
		sk, slow := f.slowSink(q)
		w := f.writer("scan")
		const n = 300
		first := f.claimOne(f.queued(w, "slow.jsonl", rowsOf(n)...).ID, true)
		done := make(chan error, 1)
		go func() { done <- sk.Process(f.ctx, first) }()
		<-slow.started

		// Two visibilities without an extension: another sink takes the batch over.
		q.down.Store(true)
		for i := range 4 {
			f.tick(t, claimVisibility/2)
			eventually(t, "an extension tried", func() bool { return q.tries.Load() == int32(i+1) })
		}
		second := f.claimOne(first.ID, true)
		if second.ReceiveCount != 2 {
			t.Fatalf("the takeover is receive %d, want 2", second.ReceiveCount)
		}

		// The first sink's next extension is refused: its load ends, unwritten and unreported.
		q.down.Store(false)
		f.tick(t, claimVisibility/2)
		if err := <-done; !errors.Is(err, sink.ErrClaimLost) || !errors.Is(err, sink.ErrNotClaimed) {
			t.Fatalf("process after the claim was lost: %v, want the claim lost", err)
		}
		if cause := slow.canceled.Load(); cause == nil || !errors.Is(*cause, sink.ErrClaimLost) {
			t.Fatalf("the load was not canceled for the lost claim (cause %v)", cause)
		}
		if rows := f.rows(tenant); len(rows) != 0 {
			t.Fatalf("a load whose claim was lost wrote %d rows", len(rows))
		}
		if rec := f.publishRecord(w.Task.ID); rec.State != store.BufferQueued || rec.ReceiveCount != 2 || rec.LastError != "" {
			t.Fatalf("publish %+v after the lost claim: want it queued, the second receive's, not failed", rec)
		}

		// The new holder loads it, and it is applied once.
		if err := f.sink.Process(f.ctx, second); err != nil {
			t.Fatal(err)
		}
		f.checkCommittedOnce(t, w.Task.ID, n, 2)
	})
}

// heldCommits is a queue whose commits wait until release is closed.
type heldCommits struct {
	sink.Queue
	entered, release chan struct{}
}

func (q *heldCommits) Commit(ctx context.Context, p wire.SinkCommit) error {
	close(q.entered)
	<-q.release
	return q.Queue.Commit(ctx, p)
}

// A sink whose load committed in the data database but whose claim ran out before it reported,
// and another sink took the batch over: the new holder's load is a repeat that commits the first
// load's result, and the late commit of the first sink changes nothing. The batch is applied
// once, with one dataset event.
func TestSinkLateCommitAfterATakeoverAppliesTheBatchOnce(t *testing.T) {
	forEachSetup(t, func(t *testing.T, f *fixture) {
		q := &heldCommits{Queue: f.queue, entered: make(chan struct{}), release: make(chan struct{})}
		sk, err := sink.New(sink.Config{Queue: q, Blob: f.blob, Data: f.data, Logger: quiet, Visibility: claimVisibility, Clock: f.clock})
		if err != nil {
			t.Fatal(err)
		}
		w := f.writer("scan")
		const n = 300
		first := f.claimOne(f.queued(w, "late.jsonl", rowsOf(n)...).ID, true)
		done := make(chan error, 1)
		go func() { done <- sk.Process(f.ctx, first) }()
		<-q.entered // loaded; its commit waits
		if got := f.rows(tenant); len(got) != n {
			t.Fatalf("the table holds %d rows after the load, want %d", len(got), n)
		}
		f.clock.Advance(2 * claimVisibility)
		second := f.claimOne(first.ID, true)
		if err := f.sink.Process(f.ctx, second); err != nil {
			t.Fatal(err)
		}
		f.checkCommittedOnce(t, w.Task.ID, n, 2)
		close(q.release)
		if err := <-done; err != nil {
			t.Fatalf("the late commit: %v", err)
		}
		f.checkCommittedOnce(t, w.Task.ID, n, 2)
	})
}
