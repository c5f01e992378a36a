package dispatch_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/dispatch/dispatchtest"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// gatedStore holds every transaction while closed, so that transitions queue up behind it.
type gatedStore struct {
	store.Store
	mu      sync.Mutex
	gate    chan struct{} // nil: open
	waiting int           // transactions held at the gate
}

// waitHeld waits until a transaction is held at the gate.
func (g *gatedStore) waitHeld(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		g.mu.Lock()
		n := g.waiting
		g.mu.Unlock()
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no transaction reached the gate")
		}
		time.Sleep(time.Millisecond) // a goroutine reaching the gate
	}
}

func (g *gatedStore) close() {
	g.mu.Lock()
	g.gate = make(chan struct{})
	g.mu.Unlock()
}

func (g *gatedStore) open() {
	g.mu.Lock()
	close(g.gate)
	g.gate = nil
	g.mu.Unlock()
}

func (g *gatedStore) InTx(ctx context.Context, fn func(store.Tx) error) error {
	g.mu.Lock()
	gate := g.gate
	if gate != nil {
		g.waiting++
	}
	g.mu.Unlock()
	if gate != nil {
		<-gate
		g.mu.Lock()
		g.waiting--
		g.mu.Unlock()
	}
	return g.Store.InTx(ctx, fn)
}

// batches records the group commits of a dispatcher.
type batches struct {
	mu    sync.Mutex
	sizes []int
}

func (b *batches) observe(n int, committed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if committed {
		b.sizes = append(b.sizes, n)
	}
}

func (b *batches) max() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := 0
	for _, n := range b.sizes {
		m = max(m, n)
	}
	return m
}

// newGroupEnv is newEnv with one committer behind a gate the test controls.
func newGroupEnv(t *testing.T, st store.Store) (*env, *gatedStore, *batches) {
	return newGroupEnvOver(t, st, func(g *gatedStore) store.Store { return g })
}

// newGroupEnvOver is newGroupEnv with the dispatcher on wrap(the gate).
func newGroupEnvOver(t *testing.T, st store.Store, wrap func(*gatedStore) store.Store) (*env, *gatedStore, *batches) {
	g := &gatedStore{Store: st}
	b := &batches{}
	clock := clockwork.NewFakeClockAt(epoch)
	d, err := dispatch.New(wrap(g), dispatch.Config{Clock: clock, Jitter: func() float64 { return 0.5 }, MaxTasksPerJob: 50,
		Logger: quiet, GroupCommit: dispatch.GroupCommit{Committers: 1, Observe: b.observe}})
	if err != nil {
		t.Fatal(err)
	}
	return &env{&dispatchtest.Env{T: t, Ctx: context.Background(), Store: st, Clock: clock, D: d}}, g, b
}

// waitQueued waits until n transitions wait for the committer.
func waitQueued(t *testing.T, d *dispatch.Dispatcher, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for d.Queued() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d transitions queued, want %d", d.Queued(), n)
		}
		time.Sleep(time.Millisecond) // goroutines reaching the queue
	}
}

// A stale completion committed in the same transaction as the winning one is refused and has no
// effect, whichever comes first in the batch; the winner's effects all stand.
func TestGroupCommit_StaleCompletionInTheWinnersBatchIsRefused(t *testing.T) {
	for _, staleFirst := range []bool{true, false} {
		name := "winner first"
		if staleFirst {
			name = "stale first"
		}
		t.Run(name, func(t *testing.T) {
			storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
				e, gate, b := newGroupEnv(t, st)
				job := e.Submit(spec("a"), spec("b", "a"))
				first := e.Claim(job, "a")
				e.Expire()
				e.Clock.Advance(10 * time.Second) // the backoff after attempt 1
				second := e.Claim(job, "a")
				eventsBefore := len(e.Events(job, "a"))

				// Hold the committer with a heartbeat, queue both completions behind it, then let
				// them commit together.
				gate.close()
				var wg sync.WaitGroup
				wg.Go(func() {
					_, _ = e.D.Heartbeat(e.Ctx, dispatch.HeartbeatParams{TaskID: second.Task.ID, Attempt: 2, LeaseToken: second.Task.LeaseToken})
				})
				gate.waitHeld(t) // the heartbeat holds the only committer
				var staleErr, winErr error
				stale := func() {
					_, staleErr = e.D.Complete(e.Ctx, dispatch.CompleteParams{TaskID: first.Task.ID, Attempt: 1,
						LeaseToken: first.Task.LeaseToken, Outcome: store.OutcomeSucceeded, Output: []byte(`{"by":"stale"}`)})
				}
				win := func() {
					_, winErr = e.D.Complete(e.Ctx, dispatch.CompleteParams{TaskID: second.Task.ID, Attempt: 2,
						LeaseToken: second.Task.LeaseToken, Outcome: store.OutcomeSucceeded, Output: []byte(`{"by":"winner"}`)})
				}
				order := []func(){win, stale}
				if staleFirst {
					order = []func(){stale, win}
				}
				for i, f := range order {
					wg.Go(f)
					waitQueued(t, e.D, i+1)
				}
				gate.open()
				wg.Wait()

				if b.max() < 2 {
					t.Fatalf("the completions were not committed in one batch (batch sizes %v)", b.sizes)
				}
				dispatchtest.WantErr[*dispatch.AttemptMismatchError](t, staleErr)
				if winErr != nil {
					t.Fatalf("winning completion: %v", winErr)
				}
				a := e.Task(job, "a")
				if a.Status != lifecycle.Completed || a.Attempt != 2 || string(a.Output) != `{"by":"winner"}` {
					t.Errorf("task a: %s attempt %d output %s", a.Status, a.Attempt, a.Output)
				}
				if n := count(e.Events(job, "a"), dispatch.EventTaskCompleted); n != 1 {
					t.Errorf("%d Task Completed events, want 1", n)
				}
				var written []string
				for _, ev := range e.Events(job, "a")[eventsBefore:] {
					if ev != dispatch.EventTaskHeartbeat {
						written = append(written, ev)
					}
				}
				if len(written) != 1 || written[0] != dispatch.EventTaskCompleted {
					t.Errorf("events written for a: %v, want only the winner's completion", written)
				}
				if s := e.Status(job, "b"); s != lifecycle.Pending {
					t.Errorf("child b is %s, want pending (released once)", s)
				}
			})
		})
	}
}

// Transitions that fail in a batch roll back alone; the others in the same transaction commit.
func TestGroupCommit_FailedTransitionRollsBackAlone(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e, gate, b := newGroupEnv(t, st)
		job := e.Submit(spec("a"), spec("b"), spec("c"))
		ca, cb := e.Claim(job, "a"), e.Claim(job, "b")
		gate.close()
		var wg sync.WaitGroup
		wg.Go(func() {
			_, _ = e.D.ClaimNext(e.Ctx, dispatch.ClaimNextParams{Queues: []string{"work"}, WorkerID: "w", Limit: 1})
		})
		gate.waitHeld(t)
		errs := make([]error, 3)
		calls := []func(){
			func() {
				_, errs[0] = e.D.Complete(e.Ctx, dispatch.CompleteParams{TaskID: ca.Task.ID, Attempt: 1, LeaseToken: ca.Task.LeaseToken, Outcome: store.OutcomeSucceeded})
			},
			func() {
				_, errs[1] = e.D.Complete(e.Ctx, dispatch.CompleteParams{TaskID: cb.Task.ID, Attempt: 1, LeaseToken: "forged", Outcome: store.OutcomeSucceeded})
			},
			func() {
				_, errs[2] = e.D.Complete(e.Ctx, dispatch.CompleteParams{TaskID: cb.Task.ID, Attempt: 1, LeaseToken: cb.Task.LeaseToken, Outcome: store.OutcomeSucceeded})
			},
		}
		for i, f := range calls {
			wg.Go(f)
			waitQueued(t, e.D, i+1)
		}
		gate.open()
		wg.Wait()
		if b.max() < 3 {
			t.Fatalf("batch sizes %v, want one of at least 3", b.sizes)
		}
		if errs[0] != nil || errs[2] != nil {
			t.Fatalf("valid completions failed: %v, %v", errs[0], errs[2])
		}
		if errs[1] == nil {
			t.Fatal("a forged lease token was accepted")
		}
		e.WantStatus(t, job, map[string]lifecycle.TaskStatus{"a": lifecycle.Completed, "b": lifecycle.Completed, "c": lifecycle.Running})
	})
}

// Children released and descendants skipped at the end of a group commit, and the job's own
// events, carry the traceparent of the report that caused them, as when it commits alone.
func TestGroupCommit_SettledEventsKeepTheTraceparent(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	e, gate, b := newGroupEnv(t, storetest.OpenSQLite(t))
	job := e.Submit(spec("a"), spec("b", "a"), spec("c"), spec("d", "c"), spec("x"))
	a, c, x := e.Claim(job, "a"), e.Claim(job, "c"), e.Claim(job, "x")

	// Hold the committer with a heartbeat, then queue both reports behind it: one batch.
	gate.close()
	var wg sync.WaitGroup
	wg.Go(func() {
		_, _ = e.D.Heartbeat(e.Ctx, dispatch.HeartbeatParams{TaskID: x.Task.ID, Attempt: 1, LeaseToken: x.Task.LeaseToken})
	})
	gate.waitHeld(t)
	errs := make([]error, 2)
	for i, cl := range []*dispatch.Claim{a, c} {
		p := dispatch.CompleteParams{TaskID: cl.Task.ID, Attempt: 1, LeaseToken: cl.Task.LeaseToken,
			Outcome: store.OutcomeSucceeded, Traceparent: tp}
		if cl == c {
			p.Outcome, p.Error = store.OutcomeFailed, &store.TaskError{Category: lifecycle.Configuration}
		}
		wg.Go(func() { _, errs[i] = e.D.Complete(e.Ctx, p) })
		waitQueued(t, e.D, i+1)
	}
	gate.open()
	wg.Wait()
	if b.max() < 2 {
		t.Fatalf("the reports were not committed in one batch (batch sizes %v)", b.sizes)
	}
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	events, err := e.Store.EventList(e.Ctx, store.EventListParams{JobID: job.ID, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, ev := range events {
		var data map[string]any
		if err := json.Unmarshal(ev.Data, &data); err != nil {
			t.Fatal(err)
		}
		if data["traceparent"] == tp {
			seen[ev.TaskKey+" "+ev.Type] = true
		}
	}
	for _, want := range []string{"b " + dispatch.EventTaskPending, "d " + dispatch.EventTaskSkipped, " " + dispatch.EventJobFailure} {
		if !seen[want] {
			t.Errorf("no %q event with the report's traceparent; those with it: %v", want, seen)
		}
	}
}

// failingTx fails every TaskCompleteMany of its store with a plain (not transient) error.
type failingTx struct {
	store.Tx
	calls *int
}

func (f failingTx) TaskCompleteMany(context.Context, []store.CompletedTask, time.Time) error {
	*f.calls++
	return errors.New("injected failure")
}

func (f failingTx) Nested(ctx context.Context, fn func(store.Tx) error) error {
	return f.Tx.Nested(ctx, func(tx store.Tx) error { return fn(failingTx{Tx: tx, calls: f.calls}) })
}

// failingStore is a gatedStore whose transactions fail TaskCompleteMany while fail is set.
type failingStore struct {
	*gatedStore
	fail  bool // set and read by one goroutine at a time: transactions run one after another
	calls int
}

func (f *failingStore) InTx(ctx context.Context, fn func(store.Tx) error) error {
	return f.gatedStore.InTx(ctx, func(tx store.Tx) error {
		if f.fail {
			tx = failingTx{Tx: tx, calls: &f.calls}
		}
		return fn(tx)
	})
}

// The plain successes and the claims of a batch run without savepoints; when the successes fail
// all the same, the batch runs again with a savepoint around each group: the claims stand, and
// the successes are applied each in a transaction of its own.
func TestGroupCommit_FailedGroupRunsAgainGuarded(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		f := &failingStore{}
		e, _, b := newGroupEnvOver(t, st, func(g *gatedStore) store.Store { f.gatedStore = g; return f })
		job := e.Submit(spec("a"), spec("b"), spec("c"))
		ca := e.Claim(job, "a")
		f.close()
		var wg sync.WaitGroup
		wg.Go(func() {
			_, _ = e.D.ClaimNext(e.Ctx, dispatch.ClaimNextParams{Queues: []string{"work"}, WorkerID: "w1", Limit: 1})
		})
		f.waitHeld(t)
		f.fail = true
		var (
			completeErr, claimErr error
			claims                []*dispatch.Claim
		)
		wg.Go(func() {
			_, completeErr = e.D.Complete(e.Ctx, dispatch.CompleteParams{TaskID: ca.Task.ID, Attempt: 1, LeaseToken: ca.Task.LeaseToken, Outcome: store.OutcomeSucceeded})
		})
		waitQueued(t, e.D, 1)
		wg.Go(func() {
			claims, claimErr = e.D.ClaimNext(e.Ctx, dispatch.ClaimNextParams{Queues: []string{"work"}, WorkerID: "w2", Limit: 1})
		})
		waitQueued(t, e.D, 2)
		f.open()
		wg.Wait()
		if f.calls != 2 {
			t.Fatalf("the plain successes ran %d times, want 2 (without, then with a savepoint)", f.calls)
		}
		if b.max() < 2 {
			t.Fatalf("batch sizes %v, want one of at least 2", b.sizes)
		}
		if claimErr != nil || len(claims) != 1 {
			t.Fatalf("the claim of the failed group's batch: %d claims, err %v; want 1, nil", len(claims), claimErr)
		}
		if completeErr != nil {
			t.Fatalf("the success applied alone: %v", completeErr)
		}
		e.WantStatus(t, job, map[string]lifecycle.TaskStatus{"a": lifecycle.Completed, "b": lifecycle.Running, "c": lifecycle.Running})
	})
}
