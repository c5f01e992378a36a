package maintenance_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/baton-dev/baton/internal/maintenance"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// recorder is a thread-safe Publisher that counts publishes per message and fails a message
// while fail says so.
type recorder struct {
	mu     sync.Mutex
	counts map[int64]int // successful publishes
	calls  map[int64]int // every publish, failed or not
	fail   func(m *store.OutboxMessage, call int) bool
}

func newRecorder() *recorder { return &recorder{counts: map[int64]int{}, calls: map[int64]int{}} }

func (r *recorder) Publish(_ context.Context, msgs []*store.OutboxMessage) map[int64]error {
	r.mu.Lock()
	defer r.mu.Unlock()
	failed := map[int64]error{}
	for _, m := range msgs {
		r.calls[m.ID]++
		if r.fail != nil && r.fail(m, r.calls[m.ID]) {
			failed[m.ID] = errors.New("transport down")
			continue
		}
		r.counts[m.ID]++
	}
	return failed
}

func (r *recorder) count(id int64) (published, calls int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts[id], r.calls[id]
}

var errRollback = errors.New("rollback")

// unsent lists the unsent messages due at t, without changing anything.
func unsent(t *testing.T, st store.Store, at time.Time) []*store.OutboxMessage {
	t.Helper()
	var out []*store.OutboxMessage
	err := st.InTx(t.Context(), func(tx store.Tx) error {
		var err error
		out, err = tx.OutboxClaim(t.Context(), store.OutboxClaimParams{Now: at, Limit: 100000})
		if err != nil {
			return err
		}
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		t.Fatalf("ClaimOutbox: %v", err)
	}
	return out
}

func insertOutbox(t *testing.T, st store.Store, n int, availableAt time.Time) []int64 {
	t.Helper()
	msgs := make([]*store.OutboxMessage, n)
	for i := range msgs {
		msgs[i] = &store.OutboxMessage{Topic: store.TopicTaskReady, Key: "default",
			Payload: json.RawMessage(fmt.Sprintf(`{"task_id":"t%d"}`, i)), AvailableAt: availableAt, CreatedAt: availableAt}
	}
	if err := st.InTx(t.Context(), func(tx store.Tx) error { return tx.OutboxInsertMany(t.Context(), msgs) }); err != nil {
		t.Fatal(err)
	}
	all, err := st.OutboxListAfter(t.Context(), 0, 1000000)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int64, 0, n)
	for _, m := range all[len(all)-n:] {
		ids = append(ids, m.ID)
	}
	return ids
}

func runOnce(t *testing.T, r *maintenance.Relay) int {
	t.Helper()
	n, err := r.RunOnce(t.Context())
	if err != nil {
		t.Fatalf("RunOnce: %v", err)
	}
	return n
}

var farFuture = epoch.Add(1000 * time.Hour)

func TestRelayPublishesCreateJobWakeUpsOnce(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		e.submit(spec("a"), spec("b"), spec("c", "a"))
		msgs, err := st.OutboxListAfter(e.ctx, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) != 2 {
			t.Fatalf("CreateJob wrote %d outbox messages, want 2 (a and b are ready)", len(msgs))
		}
		rec := newRecorder()
		r := maintenance.NewRelay(e.maint(), maintenance.RelayConfig{Publisher: rec})
		if n := runOnce(t, r); n != 2 {
			t.Errorf("first pass published %d, want 2", n)
		}
		if n := runOnce(t, r); n != 0 {
			t.Errorf("second pass published %d, want 0", n)
		}
		for _, m := range msgs {
			if pub, _ := rec.count(m.ID); pub != 1 {
				t.Errorf("message %d published %d times, want 1", m.ID, pub)
			}
			if m.Topic != store.TopicTaskReady {
				t.Errorf("message %d topic %q", m.ID, m.Topic)
			}
		}
		if left := unsent(t, st, farFuture); len(left) != 0 {
			t.Errorf("%d messages left unsent", len(left))
		}
	})
}

func TestRelayStorePublisherMarksSent(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		insertOutbox(t, st, 250, epoch)
		r := maintenance.NewRelay(e.maint(), maintenance.RelayConfig{}) // the default store transport, batches of 100
		total := 0
		for range 3 {
			total += runOnce(t, r)
		}
		if total != 250 {
			t.Errorf("published %d, want 250", total)
		}
		if left := unsent(t, st, farFuture); len(left) != 0 {
			t.Errorf("%d messages left unsent", len(left))
		}
	})
}

func TestRelayRetriesWithBackoff(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		ids := insertOutbox(t, st, 1, epoch)
		id := ids[0]
		rec := newRecorder()
		rec.fail = func(_ *store.OutboxMessage, call int) bool { return call <= 2 }
		r := maintenance.NewRelay(e.maint(), maintenance.RelayConfig{Publisher: rec})

		if n := runOnce(t, r); n != 0 {
			t.Fatalf("failing pass published %d", n)
		}
		left := unsent(t, st, farFuture)
		if len(left) != 1 || left[0].Attempts != 1 || !left[0].AvailableAt.Equal(epoch.Add(time.Second)) {
			t.Fatalf("after one failure: %+v, want attempts 1, available at +1s", left)
		}
		e.clock.Advance(999 * time.Millisecond)
		runOnce(t, r)
		if _, calls := rec.count(id); calls != 1 {
			t.Fatalf("retried before its backoff: %d calls", calls)
		}
		e.clock.Advance(time.Millisecond) // +1s: second try, fails
		runOnce(t, r)
		left = unsent(t, st, farFuture)
		if len(left) != 1 || left[0].Attempts != 2 || !left[0].AvailableAt.Equal(epoch.Add(3*time.Second)) {
			t.Fatalf("after two failures: %+v, want attempts 2, available at +3s", left)
		}
		e.clock.Advance(2*time.Second - time.Millisecond)
		runOnce(t, r)
		if _, calls := rec.count(id); calls != 2 {
			t.Fatalf("retried before its second backoff: %d calls", calls)
		}
		e.clock.Advance(time.Millisecond) // +3s: third try, succeeds
		if n := runOnce(t, r); n != 1 {
			t.Fatalf("third try published %d, want 1", n)
		}
		if pub, calls := rec.count(id); pub != 1 || calls != 3 {
			t.Errorf("published %d times in %d calls, want 1 in 3", pub, calls)
		}
		if left := unsent(t, st, farFuture); len(left) != 0 {
			t.Errorf("%d messages left unsent", len(left))
		}
	})
}

func TestRelayGivesUpAfterMaxAttempts(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		id := insertOutbox(t, st, 1, epoch)[0]
		rec := newRecorder()
		rec.fail = func(*store.OutboxMessage, int) bool { return true }
		r := maintenance.NewRelay(e.maint(), maintenance.RelayConfig{Publisher: rec, MaxAttempts: 3, BackoffBase: time.Second, BackoffMax: 90 * time.Second})
		for range 10 {
			runOnce(t, r)
			e.clock.Advance(time.Minute)
		}
		if pub, calls := rec.count(id); pub != 0 || calls != 3 {
			t.Errorf("published %d times in %d calls, want 0 in 3", pub, calls)
		}
		if left := unsent(t, st, farFuture); len(left) != 0 {
			t.Errorf("given-up message still queued: %+v", left)
		}
	})
}

func TestRelayPrunesOldSentOnly(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		r := maintenance.NewRelay(e.maint(), maintenance.RelayConfig{Retention: 24 * time.Hour})
		old := insertOutbox(t, st, 3, epoch)
		if n := runOnce(t, r); n != 3 {
			t.Fatalf("published %d, want 3", n)
		}
		e.clock.Advance(23 * time.Hour)
		recent := insertOutbox(t, st, 2, e.clock.Now())
		if n := runOnce(t, r); n != 2 {
			t.Fatalf("published %d, want 2", n)
		}
		pending := insertOutbox(t, st, 1, farFuture) // never sent: must survive
		e.clock.Advance(time.Hour + time.Millisecond)
		n, err := r.Prune(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n != len(old) {
			t.Errorf("pruned %d, want %d", n, len(old))
		}
		all, err := st.OutboxListAfter(e.ctx, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		want := append(append([]int64{}, recent...), pending...)
		if len(all) != len(want) {
			t.Fatalf("%d messages left, want %d", len(all), len(want))
		}
		for i, m := range all {
			if m.ID != want[i] {
				t.Errorf("left message %d: id %d, want %d", i, m.ID, want[i])
			}
		}
	})
}

// relayConcurrently runs RunOnce on a relay per store (replicas of one database) at once until the
// outbox is drained, and checks that each message was published exactly once.
func relayConcurrently(t *testing.T, stores []store.Store, n int) {
	t.Helper()
	clock := clockwork.NewFakeClockAt(epoch)
	ids := insertOutbox(t, stores[0], n, epoch)
	rec := newRecorder()
	var wg sync.WaitGroup
	errs := make(chan error, len(stores))
	for _, st := range stores {
		r := maintenance.NewRelay(maintenance.Env{Store: st, Clock: clock, Logger: quiet}, maintenance.RelayConfig{Publisher: rec, Batch: 7})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k, err := r.RunOnce(context.Background())
				if err != nil {
					errs <- err
					return
				}
				if k == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("RunOnce: %v", err)
	}
	// A relay that found only rows the other held stops early; finish what is left, if any.
	r := maintenance.NewRelay(maintenance.Env{Store: stores[0], Clock: clock, Logger: quiet}, maintenance.RelayConfig{Publisher: rec})
	for runOnce(t, r) > 0 {
	}
	for _, id := range ids {
		if pub, calls := rec.count(id); pub != 1 || calls != 1 {
			t.Errorf("message %d published %d times in %d calls, want exactly once", id, pub, calls)
		}
	}
	if left := unsent(t, stores[0], farFuture); len(left) != 0 {
		t.Errorf("%d messages left unsent", len(left))
	}
}

func TestRelayTwoRelaysPublishEachOnce(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		relayConcurrently(t, []store.Store{st, st}, 300)
	})
}

func TestRelayPostgresReplicasPublishEachOnce(t *testing.T) {
	relayConcurrently(t, storetest.OpenPostgresReplicas(t, 2), 500)
}

func TestRelayStartStop(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		rec := newRecorder()
		r := maintenance.NewRelay(e.maint(), maintenance.RelayConfig{Publisher: rec})
		r.Start(e.ctx)
		defer r.Stop()
		id := insertOutbox(t, st, 1, epoch)[0]
		deadline := time.Now().Add(10 * time.Second)
		for {
			if pub, _ := rec.count(id); pub == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("relay did not publish within 10s")
			}
			e.clock.Advance(time.Second) // wake the relay's sleep
			time.Sleep(5 * time.Millisecond)
		}
		r.Stop()
		r.Stop()
	})
}

// A relay given the dispatcher's TaskReady starts a pass as soon as a commit makes a task ready:
// the fake clock never moves here, so without the wake-up nothing would be published.
func TestRelayWakesWhenATaskBecomesReady(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		rec := newRecorder()
		r := maintenance.NewRelay(e.maint(), maintenance.RelayConfig{Publisher: rec, Wake: e.d.TaskReady})
		ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
		defer cancel()
		if err := r.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer r.Stop()
		if err := e.clock.BlockUntilContext(ctx, 1); err != nil { // the first pass found nothing
			t.Fatal(err)
		}
		e.submit(spec("a"))
		msgs, err := st.OutboxListAfter(e.ctx, 0, 10)
		if err != nil || len(msgs) != 1 {
			t.Fatalf("outbox after submitting one task: %d messages, %v", len(msgs), err)
		}
		for {
			if pub, _ := rec.count(msgs[0].ID); pub == 1 {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatal("the relay did not publish the new task's wake-up without its clock moving")
			case <-time.After(5 * time.Millisecond):
			}
		}
	})
}
