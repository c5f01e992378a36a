package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/postgres"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// within waits up to limit for cond, looking every 10 ms, and returns how long it took.
func within(t *testing.T, limit time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not within %s", what, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// TestWatchFailsFastWhilePartitioned partitions a watching store from PostgreSQL: work waiting on
// a connection that stopped answering, and work started afterwards, fail within the probe's
// bounds instead of hanging; once the partition heals the store works again, without reopening.
func TestWatchFailsFastWhilePartitioned(t *testing.T) {
	pp := storetest.OpenProxiedPostgres(t, postgres.Options{MaxConns: 4, Watch: true})
	st := pp.Store
	ctx := context.Background()
	if _, err := st.JobGet(ctx, "no-such-job"); !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	}
	if err := st.Unreachable(); err != nil {
		t.Fatalf("Unreachable before the partition: %v", err)
	}

	// A transaction that is half done when the network goes.
	inTx, release := make(chan struct{}), make(chan struct{})
	txErr := make(chan error, 1)
	go func() {
		txErr <- st.InTx(ctx, func(tx store.Tx) error {
			if _, err := tx.JobGet(ctx, "no-such-job"); !errors.Is(err, store.ErrNotFound) {
				return err
			}
			close(inTx)
			<-release
			_, err := tx.JobGet(ctx, "no-such-job")
			return err
		})
	}()
	<-inTx
	pp.Proxy.Partition(true)
	start := time.Now()
	close(release)
	// A read sent into the partition.
	readErr := make(chan error, 1)
	go func() { _, err := st.JobGet(ctx, "no-such-job"); readErr <- err }()

	down := within(t, 5*time.Second, "held unreachable", func() bool { return st.Unreachable() != nil })
	t.Logf("held unreachable %s after the partition began", down.Round(time.Millisecond))
	for name, ch := range map[string]chan error{"transaction": txErr, "read": readErr} {
		select {
		case err := <-ch:
			if err == nil || errors.Is(err, store.ErrNotFound) || !st.Transient(err) {
				t.Fatalf("%s during the partition: %v; want a transient failure", name, err)
			}
			t.Logf("%s failed after %s: %v", name, time.Since(start).Round(time.Millisecond), err)
		case <-time.After(5 * time.Second):
			t.Fatalf("%s still waiting %s after the partition began", name, time.Since(start))
		}
	}
	if !errors.Is(st.Unreachable(), store.ErrUnreachable) {
		t.Fatalf("Unreachable: %v, want it to wrap store.ErrUnreachable", st.Unreachable())
	}
	// Work started now fails at once, without dialling.
	start = time.Now()
	_, err := st.JobGet(ctx, "no-such-job")
	if !errors.Is(err, store.ErrUnreachable) || !st.Transient(err) {
		t.Fatalf("read while unreachable: %v; want store.ErrUnreachable", err)
	}
	if err := st.InTx(ctx, func(tx store.Tx) error { _, err := tx.JobGet(ctx, "x"); return err }); !errors.Is(err, store.ErrUnreachable) {
		t.Fatalf("transaction while unreachable: %v; want store.ErrUnreachable", err)
	}
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Fatalf("work while unreachable took %s to fail; want at once", took)
	}

	pp.Proxy.Partition(false)
	up := within(t, 5*time.Second, "reachable again", func() bool { return st.Unreachable() == nil })
	t.Logf("reachable again %s after the partition healed", up.Round(time.Millisecond))
	if _, err := st.JobGet(ctx, "no-such-job"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("read after healing: %v", err)
	}
	if err := st.InTx(ctx, func(tx store.Tx) error { _, err := tx.JobGet(ctx, "x"); return err }); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("transaction after healing: %v", err)
	}
	if err := st.Ping(ctx); err != nil {
		t.Fatalf("ping after healing: %v", err)
	}
}

// TestWatchShrugsOffItsOwnBrokenConnection resets every connection, the probe's own included (as
// pg_terminate_backend or a failover does): the database answers a new connection at once, so
// the store must not hold it unreachable and fail work meanwhile.
func TestWatchShrugsOffItsOwnBrokenConnection(t *testing.T) {
	pp := storetest.OpenProxiedPostgres(t, postgres.Options{MaxConns: 4, Watch: true, ProbeEvery: 50 * time.Millisecond})
	st := pp.Store
	ctx := context.Background()
	for range 5 {
		pp.Proxy.Reset()
		deadline := time.Now().Add(300 * time.Millisecond) // six probes
		for time.Now().Before(deadline) {
			if err := st.Unreachable(); err != nil {
				t.Fatalf("held unreachable after its connections were reset: %v", err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if _, err := st.JobGet(ctx, "no-such-job"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("read after the resets: %v", err)
	}
}
