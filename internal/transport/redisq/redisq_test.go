package redisq

import (
	"context"
	"crypto/rand"
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/baton-dev/baton/internal/transport"
	"github.com/baton-dev/baton/internal/transport/transporttest"
)

// urlEnv names the environment variable that points the tests at a Redis server. The tests
// share it with other packages' tests, so each keeps to its own key prefix and never flushes.
const urlEnv = "BATON_TEST_REDIS_URL"

func testURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv(urlEnv)
	if u == "" {
		t.Skip("BATON_TEST_REDIS_URL not set; skipping Redis tests")
	}
	return u
}

func newPrefix() string { return "batontest:" + rand.Text() + ":" }

// openPrefixed opens a transport on prefix, whose keys are deleted when the test ends.
func openPrefixed(t *testing.T, prefix string, opts Options) *Transport {
	t.Helper()
	opts.Prefix = prefix
	tr, err := Open(context.Background(), testURL(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	t.Cleanup(func() { deleteKeys(t, tr) }) // runs before Close
	return tr
}

func openTest(t *testing.T) *Transport { return openPrefixed(t, newPrefix(), Options{}) }

// deleteKeys deletes every key of tr's prefix: as far as tr can tell, a FLUSHALL.
func deleteKeys(t *testing.T, tr *Transport) {
	t.Helper()
	ctx := context.Background()
	iter := tr.client.Scan(ctx, 0, escapeGlob(tr.opts.Prefix)+"*", 100).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatalf("scan keys of %s: %v", tr.opts.Prefix, err)
	}
	if len(keys) > 0 {
		if err := tr.client.Del(ctx, keys...).Err(); err != nil {
			t.Fatalf("delete keys of %s: %v", tr.opts.Prefix, err)
		}
	}
}

func TestContract(t *testing.T) {
	testURL(t)
	t.Parallel()
	// Transports opened twice within one test share its prefix.
	var (
		mu       sync.Mutex
		prefixes = make(map[*testing.T]string)
	)
	transporttest.Run(t, transporttest.Harness{
		Open: func(t *testing.T) transport.Transport {
			mu.Lock()
			prefix, ok := prefixes[t]
			if !ok {
				prefix = newPrefix()
				prefixes[t] = prefix
			}
			mu.Unlock()
			return openPrefixed(t, prefix, Options{})
		},
		Reset: func(t *testing.T, tr transport.Transport) { deleteKeys(t, tr.(*Transport)) },
	})
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func publish(t *testing.T, ctx context.Context, tr *Transport, queue string, taskIDs ...string) {
	t.Helper()
	msgs := make([]transport.Wakeup, len(taskIDs))
	for i, id := range taskIDs {
		msgs[i] = transport.Wakeup{ID: int64(i + 1), Queue: queue, TaskID: id}
	}
	if failed := tr.Publish(ctx, msgs); len(failed) > 0 {
		t.Fatalf("Publish failed: %v", failed)
	}
}

func TestOpenRejectsBadURL(t *testing.T) {
	t.Parallel()
	for _, url := range []string{
		"http://127.0.0.1:6379/0",
		"redis://127.0.0.1:6379/notadb",
		"redis://user:s3cret@127.0.0.1:6379/0/extra",
		"redis://user:s3cret@[::1/0", // unparseable: url.Parse would quote the password
	} {
		_, err := Open(context.Background(), url, Options{})
		if err == nil {
			t.Errorf("Open(%q) succeeded, want an error", url)
			continue
		}
		if !strings.HasPrefix(err.Error(), "redis: bad URL") {
			t.Errorf("Open(%q) = %v, want a bad URL error", url, err)
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Open(%q) error %q shows the password", url, err)
		}
	}
}

func TestOpenUnreachableServer(t *testing.T) {
	t.Parallel()
	// A port nothing listens on: take one, then close it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = Open(ctx, "redis://"+addr+"/0", Options{})
	if err == nil {
		t.Fatalf("Open on %s succeeded, want an error", addr)
	}
	if !strings.Contains(err.Error(), "redis: connect to "+addr) {
		t.Fatalf("Open on %s = %v, want it to name the address", addr, err)
	}
}

func TestOpenRejectsNegativePublishTimeout(t *testing.T) {
	t.Parallel()
	if _, err := Open(context.Background(), "redis://127.0.0.1:1/0", Options{PublishTimeout: -time.Second}); err == nil {
		t.Fatal("Open with a negative publish timeout succeeded")
	}
}

// A server that accepts connections and never answers (a hung or partitioned Redis) holds
// Publish no longer than PublishTimeout, well under go-redis's own 5 s read timeout.
func TestPublishGivesUpAfterPublishTimeout(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	t.Cleanup(func() { ln.Close(); conns.Wait() })
	conns.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Go(func() { // swallow everything, answer nothing
				defer c.Close()
				buf := make([]byte, 4096)
				for {
					if _, err := c.Read(buf); err != nil {
						return
					}
				}
			})
		}
	})
	o, err := clientOptions("redis://" + ln.Addr().String() + "/0")
	if err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(o)
	tr := newTransport(client, Options{PublishTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { tr.Close() }) // before the listener's cleanup, so the server sees EOF

	start := time.Now()
	failed := tr.Publish(context.Background(), []transport.Wakeup{
		{ID: 7, Queue: "q", TaskID: "t1"},
		{ID: 8, Queue: "other", TaskID: "t2"},
	})
	elapsed := time.Since(start)
	if len(failed) != 2 || failed[7] == nil || failed[8] == nil {
		t.Fatalf("Publish to a silent server failed %v, want both messages", failed)
	}
	if elapsed > 2*time.Second {
		t.Fatalf("Publish to a silent server took %s with a 200ms PublishTimeout", elapsed)
	}
}

// A wait longer than one blocking read (and than go-redis's read timeout, were it one read) ends
// when a wake-up arrives.
func TestReceiveWaitsAcrossBlockingReads(t *testing.T) {
	testURL(t)
	t.Parallel()
	ctx := ctxFor(t)
	tr := openTest(t)
	c := tr.NewConsumer("c1")
	defer c.Close()
	// The publisher is waited for before the test ends: Receive may get the message while
	// Publish still reads its reply.
	var publisher sync.WaitGroup
	defer publisher.Wait()
	publisher.Go(func() {
		time.Sleep(blockSlice + blockSlice/2) // into the second blocking read
		if failed := tr.Publish(ctx, []transport.Wakeup{{ID: 1, Queue: "q", TaskID: "late"}}); len(failed) > 0 {
			t.Errorf("Publish: %v", failed)
		}
	})
	ds, err := c.Receive(ctx, []string{"q"}, 1, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 1 || ds[0].TaskID() != "late" {
		t.Fatalf("Receive = %d deliveries, want [late]", len(ds))
	}
	if err := ds[0].Ack(ctx); err != nil {
		t.Fatal(err)
	}
}

// Cancelling the context ends a long wait within one blocking read, not at the wait's end.
func TestReceiveEndsOnCancel(t *testing.T) {
	testURL(t)
	t.Parallel()
	tr := openTest(t)
	c := tr.NewConsumer("c1")
	defer c.Close()
	ctx, cancel := context.WithCancel(ctxFor(t))
	timer := time.AfterFunc(200*time.Millisecond, cancel)
	defer timer.Stop()
	start := time.Now()
	ds, err := c.Receive(ctx, []string{"q"}, 1, 15*time.Second)
	if len(ds) != 0 {
		t.Fatalf("a cancelled Receive delivered %d", len(ds))
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled Receive = %v, want nil or context.Canceled", err)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Fatalf("a cancelled 15s Receive returned after %s", elapsed)
	}
}

// A context deadline shorter than the wait ends Receive at the deadline, with nothing or the
// deadline's error, never a socket timeout.
func TestReceiveStopsAtContextDeadline(t *testing.T) {
	testURL(t)
	t.Parallel()
	tr := openTest(t)
	c := tr.NewConsumer("c1")
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	ds, err := c.Receive(ctx, []string{"q"}, 1, 15*time.Second)
	if len(ds) != 0 || (err != nil && !errors.Is(err, context.DeadlineExceeded)) {
		t.Fatalf("Receive past its deadline = %d deliveries, %v; want nothing", len(ds), err)
	}
}

// Receiving from a queue nobody published to creates its group, returns nothing, and a later
// publish is received.
func TestReceiveCreatesGroup(t *testing.T) {
	testURL(t)
	t.Parallel()
	ctx := ctxFor(t)
	tr := openTest(t)
	c := tr.NewConsumer("c1")
	defer c.Close()
	ds, err := c.Receive(ctx, []string{"fresh"}, 5, 0)
	if err != nil || len(ds) != 0 {
		t.Fatalf("Receive on a new queue = %d deliveries, %v; want nothing", len(ds), err)
	}
	groups, err := tr.client.XInfoGroups(ctx, tr.stream("fresh")).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 1 || groups[0].Name != "baton-workers" {
		t.Fatalf("groups of the new queue's stream = %+v, want baton-workers", groups)
	}
	publish(t, ctx, tr, "fresh", "t1")
	ds, err = c.Receive(ctx, []string{"fresh"}, 5, 5*time.Second)
	if err != nil || len(ds) != 1 || ds[0].TaskID() != "t1" {
		t.Fatalf("Receive after publish = %d deliveries, %v; want [t1]", len(ds), err)
	}
}

// Wake-ups published before any consumer created the group are delivered: it starts at id 0.
func TestReceiveGetsWakeupsPublishedBeforeTheGroup(t *testing.T) {
	testURL(t)
	t.Parallel()
	ctx := ctxFor(t)
	tr := openTest(t)
	publish(t, ctx, tr, "q", "early1", "early2")
	c := tr.NewConsumer("c1")
	defer c.Close()
	ds, err := c.Receive(ctx, []string{"q"}, 5, 0)
	if err != nil || len(ds) != 2 {
		t.Fatalf("Receive = %d deliveries, %v; want both early wake-ups", len(ds), err)
	}
}

// Receive claims no more than max: entries it read beyond max would stay pending on this
// consumer, delivered to nobody, until Reclaim.
func TestReceiveClaimsNoMoreThanMax(t *testing.T) {
	testURL(t)
	t.Parallel()
	ctx := ctxFor(t)
	tr := openTest(t)
	c := tr.NewConsumer("c1")
	defer c.Close()
	queues := []string{"high", "low"}
	for _, wait := range []time.Duration{0, time.Second} {
		publish(t, ctx, tr, "high", "h1", "h2")
		publish(t, ctx, tr, "low", "l1", "l2")
		ds, err := c.Receive(ctx, queues, 3, wait)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) != 3 {
			t.Fatalf("Receive(max 3, wait %s) = %d deliveries, want 3", wait, len(ds))
		}
		pending := 0
		for _, q := range queues {
			p, err := tr.client.XPending(ctx, tr.stream(q), "baton-workers").Result()
			if err != nil {
				t.Fatal(err)
			}
			pending += int(p.Count)
		}
		if pending != 3 {
			t.Fatalf("after Receive(max 3, wait %s) %d wake-ups are pending, want 3", wait, pending)
		}
		rest, err := c.Receive(ctx, queues, 3, wait)
		if err != nil || len(rest) != 1 {
			t.Fatalf("then Receive = %d deliveries, %v; want the fourth", len(rest), err)
		}
		for _, d := range append(ds, rest...) {
			if err := d.Ack(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// A heartbeat resets the idle time Reclaim measures, so a live worker's wake-up is not taken.
func TestInProgressPostponesReclaim(t *testing.T) {
	testURL(t)
	t.Parallel()
	ctx := ctxFor(t)
	tr := openTest(t)
	c := tr.NewConsumer("alive")
	defer c.Close()
	publish(t, ctx, tr, "q", "t1")
	ds, err := c.Receive(ctx, []string{"q"}, 1, 5*time.Second)
	if err != nil || len(ds) != 1 {
		t.Fatalf("Receive = %d deliveries, %v", len(ds), err)
	}
	time.Sleep(300 * time.Millisecond) // let the delivery grow idle
	if err := ds[0].InProgress(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := tr.Reclaim(ctx, 250*time.Millisecond, 10)
	if err != nil || len(got) != 0 {
		t.Fatalf("Reclaim right after a heartbeat = %d deliveries, %v; want nothing", len(got), err)
	}
	if err := ds[0].Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ds[0].InProgress(ctx); err != nil {
		t.Fatalf("InProgress after Ack = %v, want nil", err)
	}
}

// Reclaim takes only its own prefix's streams, whatever glob characters the prefix holds.
func TestReclaimKeepsToItsPrefix(t *testing.T) {
	testURL(t)
	t.Parallel()
	ctx := ctxFor(t)
	base := newPrefix()
	mine := openPrefixed(t, base+"a*[b]?:", Options{})
	// Matched by mine's prefix, were it used as a glob unescaped.
	other := openPrefixed(t, base+"aXbY:", Options{})
	for _, tr := range []*Transport{mine, other} {
		publish(t, ctx, tr, "q", "stuck")
		c := tr.NewConsumer("doomed")
		if ds, err := c.Receive(ctx, []string{"q"}, 1, 5*time.Second); err != nil || len(ds) != 1 {
			t.Fatalf("Receive = %d deliveries, %v", len(ds), err)
		}
	}
	ds, err := mine.Reclaim(ctx, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 1 || ds[0].Queue() != "q" {
		t.Fatalf("Reclaim = %d deliveries, want the one of its own prefix", len(ds))
	}
	if err := ds[0].Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := other.Outstanding(ctx, "q"); err != nil || n != 1 {
		t.Fatalf("Outstanding of the other prefix = %d, %v; want 1", n, err)
	}
}

// A published wake-up's entry id is found by its task (MessageIDs) until it is settled, by an
// Ack or by Settle on a worker's behalf; a newer wake-up of the same task is not forgotten when an
// older one is settled.
func TestMessageIDsFollowWakeups(t *testing.T) {
	tr := openTest(t)
	ctx := context.Background()
	const q = "jobs:stream:high"
	if failed := tr.Publish(ctx, []transport.Wakeup{{ID: 1, Queue: q, TaskID: "t1"}, {ID: 2, Queue: q, TaskID: "t2"}}); failed != nil {
		t.Fatal(failed)
	}
	entries, err := tr.client.XRange(ctx, tr.stream(q), "-", "+").Result()
	if err != nil || len(entries) != 2 {
		t.Fatalf("stream: %v %v", entries, err)
	}
	ids, err := tr.MessageIDs(ctx, q, []string{"t1", "t2", "t3"})
	if err != nil || len(ids) != 2 || ids["t1"] != entries[0].ID || ids["t2"] != entries[1].ID {
		t.Fatalf("MessageIDs = %v, %v; entries %v", ids, err, entries)
	}
	// A newer wake-up of t1 replaces its id; settling the older one keeps the newer.
	if failed := tr.Publish(ctx, []transport.Wakeup{{ID: 3, Queue: q, TaskID: "t1"}}); failed != nil {
		t.Fatal(failed)
	}
	newer, _ := tr.MessageIDs(ctx, q, []string{"t1"})
	if newer["t1"] == entries[0].ID {
		t.Fatalf("t1's id did not move to its newer wake-up")
	}
	if err := tr.Settle(ctx, []transport.WakeupRef{{Queue: q, TaskID: "t1", ID: entries[0].ID}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := tr.MessageIDs(ctx, q, []string{"t1"}); got["t1"] != newer["t1"] {
		t.Fatalf("after settling the older wake-up: %v, want %s", got, newer["t1"])
	}
	if n := mustLen(t, tr, q); n != 2 {
		t.Fatalf("outstanding %d, want 2", n)
	}
	// A delivered wake-up acknowledged by a consumer is forgotten too.
	c := tr.NewConsumer("c1")
	defer c.Close()
	ds, err := c.Receive(ctx, []string{q}, 10, time.Second)
	if err != nil || len(ds) != 2 {
		t.Fatalf("receive: %d %v", len(ds), err)
	}
	for _, d := range ds {
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := tr.MessageIDs(ctx, q, []string{"t1", "t2"}); len(got) != 0 {
		t.Fatalf("ids left after every wake-up was acknowledged: %v", got)
	}
	// Settling what is gone, or an id that is not an entry id, is not an error.
	for _, id := range []string{entries[1].ID, "not-an-id", "1-2"} {
		if err := tr.Settle(ctx, []transport.WakeupRef{{Queue: q, TaskID: "t2", ID: id}}); err != nil {
			t.Errorf("Settle(%q): %v", id, err)
		}
	}
}

func mustLen(t *testing.T, tr *Transport, queue string) int {
	t.Helper()
	n, err := tr.Outstanding(context.Background(), queue)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
