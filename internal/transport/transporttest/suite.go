// Package transporttest is the contract suite every transport.Transport passes, run against
// real servers by each driver's tests.
package transporttest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/transport"
)

// Harness opens transports for the suite.
type Harness struct {
	// Open returns a transport isolated from every other test's (its own key prefix or stream),
	// closed when the test ends. Transports opened twice within one test share their state.
	Open func(t *testing.T) transport.Transport
	// Reset makes the server lose everything the transport keeps there, as FLUSHALL on Redis or
	// deleting the stream on NATS would.
	Reset func(t *testing.T, tr transport.Transport)
	// SelfRedelivering says the transport redelivers unacknowledged messages by itself, so
	// Reclaim returns nothing.
	SelfRedelivering bool
}

// Run runs the contract suite.
func Run(t *testing.T, h Harness) {
	tests := []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"PublishReceiveAck", testPublishReceiveAck},
		{"PriorityOrderAndMax", testPriorityOrderAndMax},
		{"EmptyWaitReturnsNothing", testEmptyWait},
		{"ReceiveWakesOnPublish", testReceiveWakesOnPublish},
		{"ConsumersShareMessages", testConsumersShare},
		{"AckTwiceIsNotAnError", testAckTwice},
		{"SurvivesReset", testSurvivesReset},
		{"AnyQueueName", testAnyQueueName},
		{"ReclaimIdle", testReclaimIdle},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, h) })
	}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func publish(t *testing.T, ctx context.Context, tr transport.Transport, queue string, ids ...string) {
	t.Helper()
	msgs := make([]transport.Wakeup, len(ids))
	for i, id := range ids {
		msgs[i] = transport.Wakeup{ID: int64(i + 1), Queue: queue, TaskID: id}
	}
	if failed := tr.Publish(ctx, msgs); len(failed) > 0 {
		t.Fatalf("Publish failed: %v", failed)
	}
}

// receiveN receives until it has n deliveries or 10 s pass.
func receiveN(t *testing.T, ctx context.Context, c transport.Consumer, queues []string, n int) []transport.Delivery {
	t.Helper()
	var got []transport.Delivery
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < n && time.Now().Before(deadline) {
		ds, err := c.Receive(ctx, queues, n-len(got), time.Second)
		if err != nil {
			t.Fatalf("Receive: %v", err)
		}
		got = append(got, ds...)
	}
	if len(got) != n {
		t.Fatalf("received %d deliveries, want %d", len(got), n)
	}
	return got
}

func taskIDs(ds []transport.Delivery) []string {
	ids := make([]string, len(ds))
	for i, d := range ds {
		ids[i] = d.TaskID()
	}
	return ids
}

func outstanding(t *testing.T, ctx context.Context, tr transport.Transport, queue string) int {
	t.Helper()
	n, err := tr.Outstanding(ctx, queue)
	if err != nil {
		t.Fatalf("Outstanding(%q): %v", queue, err)
	}
	return n
}

func consumer(t *testing.T, tr transport.Transport, name string) transport.Consumer {
	c := tr.NewConsumer(name)
	t.Cleanup(func() { c.Close() })
	return c
}

func testPublishReceiveAck(t *testing.T, h Harness) {
	ctx := ctxFor(t)
	tr := h.Open(t)
	c := consumer(t, tr, "c1")
	if n := outstanding(t, ctx, tr, "q"); n != 0 {
		t.Fatalf("Outstanding before publishing = %d, want 0", n)
	}
	publish(t, ctx, tr, "q", "t1", "t2", "t3")
	if n := outstanding(t, ctx, tr, "q"); n != 3 {
		t.Fatalf("Outstanding after publishing 3 = %d, want 3", n)
	}
	got := receiveN(t, ctx, c, []string{"q"}, 3)
	ids := taskIDs(got)
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"t1", "t2", "t3"}) {
		t.Fatalf("received %v, want t1 t2 t3", ids)
	}
	for _, d := range got {
		if d.Queue() != "q" {
			t.Errorf("delivery of %s has queue %q, want q", d.TaskID(), d.Queue())
		}
	}
	if n := outstanding(t, ctx, tr, "q"); n != 3 {
		t.Fatalf("Outstanding with 3 delivered, unacknowledged = %d, want 3", n)
	}
	for _, d := range got {
		if err := d.InProgress(ctx); err != nil {
			t.Fatalf("InProgress: %v", err)
		}
		if err := d.Ack(ctx); err != nil {
			t.Fatalf("Ack: %v", err)
		}
	}
	if n := outstanding(t, ctx, tr, "q"); n != 0 {
		t.Fatalf("Outstanding after acknowledging all = %d, want 0", n)
	}
	ds, err := c.Receive(ctx, []string{"q"}, 10, 200*time.Millisecond)
	if err != nil || len(ds) != 0 {
		t.Fatalf("Receive after all acknowledged = %v, %v; want nothing", taskIDs(ds), err)
	}
	if other := outstanding(t, ctx, tr, "other"); other != 0 {
		t.Fatalf("Outstanding of an unused queue = %d, want 0", other)
	}
}

func testPriorityOrderAndMax(t *testing.T, h Harness) {
	ctx := ctxFor(t)
	tr := h.Open(t)
	c := consumer(t, tr, "c1")
	publish(t, ctx, tr, "low", "l1", "l2")
	publish(t, ctx, tr, "high", "h1")
	// Let both be visible before receiving.
	deadline := time.Now().Add(5 * time.Second)
	for outstanding(t, ctx, tr, "low")+outstanding(t, ctx, tr, "high") < 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	ds, err := c.Receive(ctx, []string{"high", "low"}, 1, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 1 || ds[0].TaskID() != "h1" {
		t.Fatalf("Receive(max 1) = %v, want [h1] (the earlier queue first)", taskIDs(ds))
	}
	rest := receiveN(t, ctx, c, []string{"high", "low"}, 2)
	ids := taskIDs(rest)
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"l1", "l2"}) {
		t.Fatalf("then received %v, want l1 l2", ids)
	}
	for _, d := range append(ds, rest...) {
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func testEmptyWait(t *testing.T, h Harness) {
	ctx := ctxFor(t)
	tr := h.Open(t)
	c := consumer(t, tr, "c1")
	ds, err := c.Receive(ctx, []string{"empty"}, 5, 100*time.Millisecond)
	if err != nil || len(ds) != 0 {
		t.Fatalf("Receive on an empty queue = %v, %v; want nothing, no error", taskIDs(ds), err)
	}
	// A cancelled context ends the wait with the context's error or nothing, never a delivery.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	ds, _ = c.Receive(cctx, []string{"empty"}, 5, time.Second)
	if len(ds) != 0 {
		t.Fatalf("Receive with a cancelled context delivered %v", taskIDs(ds))
	}
}

func testReceiveWakesOnPublish(t *testing.T, h Harness) {
	ctx := ctxFor(t)
	tr := h.Open(t)
	c := consumer(t, tr, "c1")
	// Make sure the consumer exists on the server before publishing.
	if _, err := c.Receive(ctx, []string{"q"}, 1, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	type result struct {
		ds  []transport.Delivery
		err error
	}
	res := make(chan result, 1)
	go func() {
		ds, err := c.Receive(ctx, []string{"q"}, 1, 15*time.Second)
		res <- result{ds, err}
	}()
	time.Sleep(100 * time.Millisecond) // let Receive start waiting
	publish(t, ctx, tr, "q", "late")
	r := <-res
	if r.err != nil {
		t.Fatal(r.err)
	}
	if len(r.ds) != 1 || r.ds[0].TaskID() != "late" {
		t.Fatalf("a waiting Receive got %v, want [late]", taskIDs(r.ds))
	}
	if err := r.ds[0].Ack(ctx); err != nil {
		t.Fatal(err)
	}
}

func testConsumersShare(t *testing.T, h Harness) {
	ctx := ctxFor(t)
	tr := h.Open(t)
	const n = 40
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("t%02d", i)
	}
	publish(t, ctx, tr, "q", ids...)
	var (
		mu  sync.Mutex
		got []string
		wg  sync.WaitGroup
	)
	for i := range 2 {
		c := consumer(t, tr, fmt.Sprintf("c%d", i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				done := len(got) >= n
				mu.Unlock()
				if done {
					return
				}
				ds, err := c.Receive(ctx, []string{"q"}, 3, 300*time.Millisecond)
				if err != nil {
					t.Errorf("Receive: %v", err)
					return
				}
				for _, d := range ds {
					mu.Lock()
					got = append(got, d.TaskID())
					mu.Unlock()
					if err := d.Ack(ctx); err != nil {
						t.Errorf("Ack: %v", err)
					}
				}
				if len(ds) == 0 && ctx.Err() != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	slices.Sort(got)
	if !slices.Equal(got, ids) {
		t.Fatalf("two consumers received %d messages %v, want each of %d exactly once", len(got), got, n)
	}
}

func testAckTwice(t *testing.T, h Harness) {
	ctx := ctxFor(t)
	tr := h.Open(t)
	c := consumer(t, tr, "c1")
	publish(t, ctx, tr, "q", "t1")
	d := receiveN(t, ctx, c, []string{"q"}, 1)[0]
	if err := d.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if err := d.Ack(ctx); err != nil {
		t.Fatalf("second Ack: %v, want nil", err)
	}
}

func testSurvivesReset(t *testing.T, h Harness) {
	ctx := ctxFor(t)
	tr := h.Open(t)
	c := consumer(t, tr, "c1")
	publish(t, ctx, tr, "q", "before")
	d := receiveN(t, ctx, c, []string{"q"}, 1)[0]
	h.Reset(t, tr)
	if err := d.Ack(ctx); err != nil {
		t.Fatalf("Ack of a message the server lost: %v, want nil", err)
	}
	if n := outstanding(t, ctx, tr, "q"); n != 0 {
		t.Fatalf("Outstanding after reset = %d, want 0", n)
	}
	ds, err := c.Receive(ctx, []string{"q"}, 1, 100*time.Millisecond)
	if err != nil || len(ds) != 0 {
		t.Fatalf("Receive after reset = %v, %v; want nothing, no error", taskIDs(ds), err)
	}
	publish(t, ctx, tr, "q", "after")
	got := receiveN(t, ctx, c, []string{"q"}, 1)
	if got[0].TaskID() != "after" {
		t.Fatalf("after reset received %s, want after", got[0].TaskID())
	}
	if err := got[0].Ack(ctx); err != nil {
		t.Fatal(err)
	}
	// A reset while a consumer is between receives is also healed.
	h.Reset(t, tr)
	publish(t, ctx, tr, "q", "again")
	got = receiveN(t, ctx, c, []string{"q"}, 1)
	if got[0].TaskID() != "again" {
		t.Fatalf("after second reset received %s, want again", got[0].TaskID())
	}
}

func testAnyQueueName(t *testing.T, h Harness) {
	ctx := ctxFor(t)
	tr := h.Open(t)
	c := consumer(t, tr, "c1")
	queues := []string{"a.b", "jobs:stream:high", "with space", "star*gt>", "ünïcode/slash", "plain"}
	for i, q := range queues {
		publish(t, ctx, tr, q, fmt.Sprintf("t%d", i))
	}
	for i, q := range queues {
		ds := receiveN(t, ctx, c, []string{q}, 1)
		if ds[0].TaskID() != fmt.Sprintf("t%d", i) || ds[0].Queue() != q {
			t.Fatalf("queue %q delivered %s of queue %q", q, ds[0].TaskID(), ds[0].Queue())
		}
		if err := ds[0].Ack(ctx); err != nil {
			t.Fatal(err)
		}
		if n := outstanding(t, ctx, tr, q); n != 0 {
			t.Fatalf("Outstanding(%q) after ack = %d", q, n)
		}
	}
}

func testReclaimIdle(t *testing.T, h Harness) {
	ctx := ctxFor(t)
	tr := h.Open(t)
	c := consumer(t, tr, "doomed")
	publish(t, ctx, tr, "q", "stuck")
	receiveN(t, ctx, c, []string{"q"}, 1) // never acknowledged: the consumer "dies"
	if ds, err := tr.Reclaim(ctx, time.Hour, 10); err != nil || len(ds) != 0 {
		t.Fatalf("Reclaim(min idle 1h) = %v, %v; want nothing", taskIDs(ds), err)
	}
	time.Sleep(300 * time.Millisecond)
	ds, err := tr.Reclaim(ctx, 200*time.Millisecond, 10)
	if err != nil {
		t.Fatal(err)
	}
	if h.SelfRedelivering {
		if len(ds) != 0 {
			t.Fatalf("Reclaim on a self-redelivering transport = %v, want nothing", taskIDs(ds))
		}
		return
	}
	if len(ds) != 1 || ds[0].TaskID() != "stuck" || ds[0].Queue() != "q" {
		t.Fatalf("Reclaim = %v, want [stuck]", taskIDs(ds))
	}
	if err := ds[0].Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if n := outstanding(t, ctx, tr, "q"); n != 0 {
		t.Fatalf("Outstanding after the reclaimed message was acknowledged = %d, want 0", n)
	}
}
