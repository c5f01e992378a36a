package dispatch

import (
	"context"
	"sync"

	"github.com/baton-dev/baton/internal/store"
)

// GroupCommit configures group commit: transitions requested concurrently (claims, heartbeats,
// completions, ...) are applied in one store transaction, each in its own savepoint, so that one
// commit — one fsync — serves many requests. Each caller returns only once the transaction that
// holds its change has committed, with its own transition's result: a transition that fails
// (a stale lease, say) is rolled back alone and the others stand. There is no waiting window: a
// batch is whatever queued up while the previous one was committing, so an idle server commits
// each request at once.
type GroupCommit struct {
	Off        bool // one transaction per transition
	MaxBatch   int  // most transitions per transaction; default 128
	Committers int  // transactions in flight at once; default 1
	// Observe, when set, is called after each batch with its size and whether it committed.
	Observe func(size int, committed bool)
}

// pending is a transition waiting for its batch to commit.
type pending struct {
	ctx  context.Context
	fn   func(store.Tx, *changes) error
	c    *changes
	err  error
	done chan struct{}
}

// committer batches transitions (see GroupCommit).
type committer struct {
	d          *Dispatcher
	maxBatch   int
	committers int
	observe    func(int, bool)

	mu     sync.Mutex
	queue  []*pending
	active int // committer goroutines running
}

func newCommitter(d *Dispatcher, cfg GroupCommit) *committer {
	c := &committer{d: d, maxBatch: cfg.MaxBatch, committers: cfg.Committers, observe: cfg.Observe}
	if c.maxBatch <= 0 {
		c.maxBatch = 128
	}
	if c.committers <= 0 {
		// One transaction in flight per process: its batch holds the row locks of many
		// transitions at once, and two such batches would take them in different orders and
		// deadlock (PostgreSQL then stalls both for deadlock_timeout). One committer with large
		// batches does the same work without lock waits; on SQLite writes are serial anyway.
		c.committers = 1
	}
	return c
}

// queued is the number of transitions waiting for a committer.
func (cm *committer) queued() int {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	return len(cm.queue)
}

// do queues fn and waits until the transaction holding it has committed or failed.
func (cm *committer) do(ctx context.Context, fn func(store.Tx, *changes) error) error {
	p := &pending{ctx: context.WithoutCancel(ctx), fn: fn, done: make(chan struct{})}
	cm.mu.Lock()
	cm.queue = append(cm.queue, p)
	if cm.active < cm.committers {
		cm.active++
		go cm.loop()
	}
	cm.mu.Unlock()
	// Once queued, the transition may commit whatever the caller does: wait for the outcome, so
	// that the answer never misstates what happened.
	<-p.done
	return p.err
}

// loop commits batches until the queue is empty.
func (cm *committer) loop() {
	for {
		cm.mu.Lock()
		if len(cm.queue) == 0 {
			cm.active--
			cm.mu.Unlock()
			return
		}
		n := min(len(cm.queue), cm.maxBatch)
		batch := make([]*pending, n)
		copy(batch, cm.queue)
		cm.queue = append(cm.queue[:0], cm.queue[n:]...)
		cm.mu.Unlock()
		cm.commit(batch)
	}
}

// commit applies batch in one transaction, each transition in its own savepoint, and then
// releases the callers.
func (cm *committer) commit(batch []*pending) {
	d := cm.d
	if len(batch) == 1 {
		// Alone: no savepoint needed.
		p := batch[0]
		p.err = d.updateAlone(p.ctx, p.fn)
		if cm.observe != nil {
			cm.observe(1, p.err == nil)
		}
		close(p.done)
		return
	}
	ready := false
	err := d.store.InTx(batch[0].ctx, func(tx store.Tx) error {
		// InTx may run this more than once: start afresh.
		ready = false
		for _, p := range batch {
			p.c = &changes{now: d.now()}
			p.err = tx.Nested(p.ctx, func(tx store.Tx) error {
				if err := p.fn(tx, p.c); err != nil {
					return err
				}
				return p.c.write(p.ctx, tx)
			})
			if p.err == nil && p.c.ready {
				ready = true
			}
		}
		if ready {
			return tx.NotifyReady(batch[0].ctx)
		}
		return nil
	})
	if err == nil && ready {
		d.ready.notify()
	}
	if cm.observe != nil {
		cm.observe(len(batch), err == nil)
	}
	for _, p := range batch {
		if err != nil {
			p.err = err
		}
		close(p.done)
	}
}
