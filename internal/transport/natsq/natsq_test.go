package natsq

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/transport"
	"github.com/baton-dev/baton/internal/transport/transporttest"
)

func serverURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv("BATON_TEST_NATS_URL")
	if u == "" {
		t.Skip("BATON_TEST_NATS_URL not set; skipping NATS tests")
	}
	return u
}

// isolated returns options naming a stream and subjects of their own.
func isolated(t *testing.T) Options {
	t.Helper()
	b := make([]byte, 6)
	rand.Read(b)
	suffix := strings.ToUpper(strings.NewReplacer("-", "X", "_", "Y").Replace(base64.RawURLEncoding.EncodeToString(b)))
	return Options{
		Stream:        "BATON_TEST_" + suffix,
		SubjectPrefix: "baton.test." + suffix,
	}
}

// open opens a transport with opts, deleting its stream and closing it when the test ends.
func open(t *testing.T, opts Options) *Transport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr, err := Open(ctx, serverURL(t), opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tr.js.DeleteStream(ctx, tr.opts.Stream)
		if err := tr.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return tr
}

func deleteStream(t *testing.T, tr *Transport) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tr.js.DeleteStream(ctx, tr.opts.Stream); err != nil {
		t.Fatalf("DeleteStream: %v", err)
	}
}

func TestContract(t *testing.T) {
	serverURL(t)
	var (
		mu   sync.Mutex
		opts = make(map[*testing.T]Options)
	)
	transporttest.Run(t, transporttest.Harness{
		Open: func(t *testing.T) transport.Transport {
			mu.Lock()
			o, ok := opts[t]
			if !ok {
				o = isolated(t)
				opts[t] = o
			}
			mu.Unlock()
			return open(t, o)
		},
		Reset: func(t *testing.T, tr transport.Transport) {
			deleteStream(t, tr.(*Transport))
		},
		SelfRedelivering: true,
	})
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func publish(t *testing.T, ctx context.Context, tr *Transport, queue string, ids ...string) {
	t.Helper()
	msgs := make([]transport.Wakeup, len(ids))
	for i, id := range ids {
		msgs[i] = transport.Wakeup{ID: int64(i + 1), Queue: queue, TaskID: id}
	}
	if failed := tr.Publish(ctx, msgs); len(failed) > 0 {
		t.Fatalf("Publish failed: %v", failed)
	}
}

func receive(t *testing.T, ctx context.Context, c transport.Consumer, queue string, wait time.Duration) []transport.Delivery {
	t.Helper()
	ds, err := c.Receive(ctx, []string{queue}, 10, wait)
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	return ds
}

func TestOpenFailsFastAndClearly(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, url, want string
	}{
		{"empty URL", "", "empty server URL"},
		{"malformed URL", "nats://127.0.0.1:notaport", "invalid port"},
		{"foreign scheme", "http://127.0.0.1:4222", `unsupported URL scheme "http"`},
		// Port 1 on the loopback interface refuses connections.
		{"unreachable server", "nats://127.0.0.1:1", "nats: connect to nats://127.0.0.1:1"},
		{"password redacted", "nats://user:secret@127.0.0.1:1", "nats://user:xxxxx@127.0.0.1:1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			start := time.Now()
			tr, err := Open(ctx, tc.url, Options{})
			if err == nil {
				tr.Close()
				t.Fatalf("Open(%q) succeeded", tc.url)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Open(%q) = %v, want an error containing %q", tc.url, err, tc.want)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("Open error reveals the password: %v", err)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("Open(%q) took %v to fail", tc.url, d)
			}
		})
	}
}

func TestOpenGivesUpWhenContextEnds(t *testing.T) {
	t.Parallel()
	// A non-routable address: the dial hangs until a timeout unless the network refuses it.
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	tr, err := Open(ctx, "nats://10.255.255.1:4222", Options{})
	if err == nil {
		tr.Close()
		t.Fatal("Open of a non-routable address succeeded")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Open took %v to fail with a 500ms context", d)
	}
}

func TestOptionsValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts Options
		ok   bool
	}{
		{"defaults", Options{}, true},
		{"custom", Options{Stream: "S", SubjectPrefix: "a.b", AckWait: time.Second, PublishTimeout: time.Second}, true},
		{"dotted stream", Options{Stream: "a.b"}, false},
		{"stream with space", Options{Stream: "a b"}, false},
		{"wildcard prefix", Options{SubjectPrefix: "a.*"}, false},
		{"full wildcard prefix", Options{SubjectPrefix: "a.>"}, false},
		{"empty prefix token", Options{SubjectPrefix: "a..b"}, false},
		{"negative ack wait", Options{AckWait: -time.Second}, false},
		{"negative publish timeout", Options{PublishTimeout: -time.Second}, false},
	}
	for _, tc := range tests {
		if err := tc.opts.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: Validate() = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

func TestTokenIsOneSubjectTokenAndInjective(t *testing.T) {
	t.Parallel()
	names := []string{"", "a", "a.b", "with space", "star*gt>", "ünïcode/slash", "_", "-", "Xw", strings.Repeat("long", 100)}
	seen := make(map[string]string)
	seenConsumer := make(map[string]string)
	for _, q := range names {
		tok := token(q)
		if tok == "" || strings.ContainsAny(tok, ".*> \t\r\n/\\") {
			t.Errorf("token(%q) = %q, not a valid single subject token", q, tok)
		}
		if other, dup := seen[tok]; dup {
			t.Errorf("token(%q) = token(%q) = %q", q, other, tok)
		}
		seen[tok] = q
		name := consumerName(q)
		if len(name) > 200 || strings.ContainsAny(name, ".*> \t\r\n/\\") {
			t.Errorf("consumerName(%q) = %q, not a valid consumer name", q, name)
		}
		if other, dup := seenConsumer[name]; dup {
			t.Errorf("consumerName(%q) = consumerName(%q) = %q", q, other, name)
		}
		seenConsumer[name] = q
	}
}

func TestUnacknowledgedIsRedeliveredAfterAckWait(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	opts := isolated(t)
	opts.AckWait = time.Second
	tr := open(t, opts)
	dead, other := tr.NewConsumer("dead"), tr.NewConsumer("other")
	publish(t, ctx, tr, "q", "t1")
	if ds := receive(t, ctx, dead, "q", time.Second); len(ds) != 1 {
		t.Fatalf("first delivery: got %d, want 1", len(ds))
	}
	received := time.Now()
	if ds := receive(t, ctx, other, "q", 300*time.Millisecond); len(ds) != 0 {
		t.Fatalf("redelivered before the ack wait passed: %d", len(ds))
	}
	ds := receive(t, ctx, other, "q", 5*time.Second)
	if len(ds) != 1 || ds[0].TaskID() != "t1" || ds[0].Queue() != "q" {
		t.Fatalf("after the ack wait got %d deliveries, want t1 of q", len(ds))
	}
	if d := time.Since(received); d < 900*time.Millisecond {
		t.Errorf("redelivered %v after the first delivery, before the 1s ack wait", d)
	}
	if err := ds[0].Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := tr.Outstanding(ctx, "q"); err != nil || n != 0 {
		t.Fatalf("Outstanding after the redelivery was acknowledged = %d, %v; want 0", n, err)
	}
}

func TestInProgressPostponesRedelivery(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	opts := isolated(t)
	opts.AckWait = time.Second
	tr := open(t, opts)
	busy, other := tr.NewConsumer("busy"), tr.NewConsumer("other")
	publish(t, ctx, tr, "q", "t1")
	ds := receive(t, ctx, busy, "q", time.Second)
	if len(ds) != 1 {
		t.Fatalf("first delivery: got %d, want 1", len(ds))
	}
	// Three ack waits of work, reported in progress every 400ms.
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		if err := ds[0].InProgress(ctx); err != nil {
			t.Fatalf("InProgress: %v", err)
		}
		if got := receive(t, ctx, other, "q", 400*time.Millisecond); len(got) != 0 {
			t.Fatal("redelivered while in progress")
		}
	}
	// Once progress reports stop, the message is redelivered.
	got := receive(t, ctx, other, "q", 5*time.Second)
	if len(got) != 1 || got[0].TaskID() != "t1" {
		t.Fatalf("after progress stopped got %d deliveries, want t1", len(got))
	}
	if err := got[0].Ack(ctx); err != nil {
		t.Fatal(err)
	}
	// The first worker's late Ack of the same message is not an error.
	if err := ds[0].Ack(ctx); err != nil {
		t.Fatalf("late Ack: %v", err)
	}
}

func TestStreamDeletedBetweenPublishAndReceive(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	tr := open(t, isolated(t))
	c := tr.NewConsumer("c1")
	// The consumer exists before the stream goes, so Receive meets a stale consumer.
	if ds := receive(t, ctx, c, "q", 50*time.Millisecond); len(ds) != 0 {
		t.Fatalf("received %d from an empty queue", len(ds))
	}
	publish(t, ctx, tr, "q", "lost")
	deleteStream(t, tr)
	if ds := receive(t, ctx, c, "q", 200*time.Millisecond); len(ds) != 0 {
		t.Fatalf("received %d after the stream was deleted, want 0", len(ds))
	}
	publish(t, ctx, tr, "q", "after")
	ds := receive(t, ctx, c, "q", 5*time.Second)
	if len(ds) != 1 || ds[0].TaskID() != "after" {
		t.Fatalf("after the stream was recreated got %d deliveries, want [after]", len(ds))
	}
	if err := ds[0].Ack(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestStreamDeletedWhileWaiting(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	tr := open(t, isolated(t))
	c := tr.NewConsumer("c1")
	if ds := receive(t, ctx, c, "q", 50*time.Millisecond); len(ds) != 0 {
		t.Fatalf("received %d from an empty queue", len(ds))
	}
	type result struct {
		ds  []transport.Delivery
		err error
	}
	res := make(chan result, 1)
	go func() {
		ds, err := c.Receive(ctx, []string{"q"}, 1, 10*time.Second)
		res <- result{ds, err}
	}()
	time.Sleep(200 * time.Millisecond)
	deleteStream(t, tr)
	time.Sleep(200 * time.Millisecond)
	publish(t, ctx, tr, "q", "after")
	r := <-res
	if r.err != nil {
		t.Fatalf("Receive across the deletion: %v", r.err)
	}
	if len(r.ds) == 0 {
		// The wait ended with the consumer; the next Receive must find the message.
		r.ds = receive(t, ctx, c, "q", 5*time.Second)
	}
	if len(r.ds) != 1 || r.ds[0].TaskID() != "after" {
		t.Fatalf("got %d deliveries, want [after]", len(r.ds))
	}
}

func TestWaitOnSeveralQueuesReturnsInQueueOrder(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	tr := open(t, isolated(t))
	c := tr.NewConsumer("c1")
	queues := []string{"high", "mid", "low"}
	if ds, err := c.Receive(ctx, queues, 5, 50*time.Millisecond); err != nil || len(ds) != 0 {
		t.Fatalf("Receive on empty queues = %d, %v", len(ds), err)
	}
	done := make(chan []transport.Delivery, 1)
	go func() {
		ds, err := c.Receive(ctx, queues, 5, 10*time.Second)
		if err != nil {
			t.Errorf("Receive: %v", err)
		}
		done <- ds
	}()
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	publish(t, ctx, tr, "low", "l1")
	ds := <-done
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Receive returned %v after the publish", d)
	}
	if len(ds) != 1 || ds[0].Queue() != "low" {
		t.Fatalf("waiting on three queues got %d deliveries, want l1 of low", len(ds))
	}
	if err := ds[0].Ack(ctx); err != nil {
		t.Fatal(err)
	}
	// The abandoned pull requests of the other queues must not swallow later wake-ups.
	publish(t, ctx, tr, "high", "h1")
	publish(t, ctx, tr, "mid", "m1")
	got := receive(t, ctx, c, "high", 2*time.Second)
	if len(got) != 1 || got[0].TaskID() != "h1" {
		t.Fatalf("high then delivered %d, want [h1]", len(got))
	}
	got = receive(t, ctx, c, "mid", 2*time.Second)
	if len(got) != 1 || got[0].TaskID() != "m1" {
		t.Fatalf("mid then delivered %d, want [m1]", len(got))
	}
}

func TestPublishRejectsOverlongQueueName(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	tr := open(t, isolated(t))
	long := strings.Repeat("x", maxQueueLen+1)
	failed := tr.Publish(ctx, []transport.Wakeup{{ID: 1, Queue: long, TaskID: "t"}, {ID: 2, Queue: "q", TaskID: "t"}})
	if len(failed) != 1 || failed[1] == nil {
		t.Fatalf("Publish failures = %v, want only message 1", failed)
	}
	// The connection survives.
	if n, err := tr.Outstanding(ctx, "q"); err != nil || n != 1 {
		t.Fatalf("Outstanding = %d, %v; want 1", n, err)
	}
}
