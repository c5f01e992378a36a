package dispatch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/baton-dev/baton/internal/metrics"
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
	MaxBatch   int  // most transitions per transaction; default 256
	Committers int  // transactions in flight at once; default 2, or 1 on a single-writer store (SQLite)
	// Observe, when set, is called after each batch with its size and whether it committed.
	Observe func(size int, committed bool)
}

// pending is a transition waiting for its batch to commit.
type pending struct {
	ctx   context.Context
	locks store.LockSet // the rows it will change (see Dispatcher.update)
	fn    func(store.Tx, *changes) error
	// A plain success of Complete, applied together with the others of its batch with
	// set-based statements (completeBatch) instead of by fn. slow: it must be applied alone.
	complete *CompleteParams
	result   *CompleteResult
	slow     bool
	// A ClaimNext, claimed together with the others of its batch (claimMany).
	claimNext *ClaimNextParams
	claims    []*Claim

	c    *changes
	err  error
	done chan struct{}
	// alone: the batch failed transiently; the transition was not applied and its caller must
	// apply it in a transaction of its own.
	alone bool
}

// unguardedError is the failure of a group of a batch that ran without its savepoint
// (committer.commit): the batch is run again with one.
type unguardedError struct{ err error }

func (e *unguardedError) Error() string { return e.err.Error() }
func (e *unguardedError) Unwrap() error { return e.err }

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
		c.maxBatch = 256
	}
	if c.committers <= 0 {
		// Two transactions in flight on a database with concurrent writers (PostgreSQL): one
		// backend doing all the writing was the bottleneck (2 took the SDK bench from ~3,700 to
		// ~4,900 tasks/s). Not more: a batch holds the row locks of many transitions, so
		// batches on the same jobs wait for each other. On SQLite writes are serial anyway: one.
		c.committers = 2
		if sw, ok := d.store.(singleWriter); ok && sw.SingleWriter() {
			c.committers = 1
		}
	}
	return c
}

// queued is the number of transitions waiting for a committer.
func (cm *committer) queued() int {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	return len(cm.queue)
}

// singleWriter is implemented by stores that serialise write transactions (SQLite).
type singleWriter interface{ SingleWriter() bool }

// do queues fn and waits until the transaction holding it has committed or failed.
func (cm *committer) do(ctx context.Context, locks store.LockSet, fn func(store.Tx, *changes) error) error {
	p := &pending{ctx: context.WithoutCancel(ctx), locks: locks, fn: fn, done: make(chan struct{})}
	cm.wait(p)
	if p.alone {
		return cm.d.updateAlone(p.ctx, locks, fn)
	}
	return p.err
}

// doComplete queues a plain success to be applied with the others of its batch. slow reports
// that it was not applied and must go through Complete's own transition.
func (cm *committer) doComplete(ctx context.Context, cp CompleteParams) (res *CompleteResult, err error, slow bool) {
	locks := store.LockSet{Tasks: []string{cp.TaskID}}
	p := &pending{ctx: context.WithoutCancel(ctx), locks: locks, complete: &cp, done: make(chan struct{})}
	cm.wait(p)
	if !p.alone {
		return p.result, p.err, p.slow
	}
	d, ps := cm.d, []CompleteParams{cp}
	results, errs := make([]*CompleteResult, 1), make([]error, 1)
	var left []int
	err = d.updateAlone(p.ctx, locks, func(tx store.Tx, c *changes) (err error) {
		left, err = d.completeBatch(p.ctx, tx, c, ps, []int{0}, results, errs)
		return err
	})
	if err != nil {
		return nil, err, false
	}
	return results[0], errs[0], len(left) > 0
}

// doCompletes queues the plain successes ps[idx...] to be applied with the other plain
// successes of their batches, waits for them all and fills in their results and errors. It
// returns the indexes it left for Complete: those doComplete would call slow, and those whose
// batch failed transiently.
func (cm *committer) doCompletes(ctx context.Context, ps []CompleteParams, idx []int, results []*CompleteResult, errs []error) (slow []int) {
	ctx = context.WithoutCancel(ctx)
	pends := make([]*pending, len(idx))
	for k, i := range idx {
		cp := ps[i]
		pends[k] = &pending{ctx: ctx, locks: store.LockSet{Tasks: []string{cp.TaskID}}, complete: &cp, done: make(chan struct{})}
	}
	cm.wait(pends...)
	for k, i := range idx {
		if p := pends[k]; p.alone || p.slow {
			slow = append(slow, i)
		} else {
			results[i], errs[i] = p.result, p.err
		}
	}
	return slow
}

// doClaim queues a ClaimNext to be claimed with the others of its batch.
func (cm *committer) doClaim(ctx context.Context, p ClaimNextParams) ([]*Claim, error) {
	pd := &pending{ctx: context.WithoutCancel(ctx), claimNext: &p, done: make(chan struct{})}
	cm.wait(pd)
	if pd.alone {
		err := cm.d.updateAlone(pd.ctx, store.LockSet{}, func(tx store.Tx, c *changes) error {
			return cm.d.claimMany(pd.ctx, tx, c, []*pending{pd})
		})
		return pd.claims, err
	}
	return pd.claims, pd.err
}

// wait queues ps and waits until the transactions holding them have committed or failed.
func (cm *committer) wait(ps ...*pending) {
	cm.mu.Lock()
	cm.queue = append(cm.queue, ps...)
	if cm.active < cm.committers {
		cm.active++
		go cm.loop()
	}
	cm.mu.Unlock()
	// Once queued, a transition may commit whatever the caller does: wait for the outcome, so
	// that the answer never misstates what happened.
	for _, p := range ps {
		<-p.done
	}
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

// commit applies batch in one transaction and then releases the callers. The transaction first
// locks every row the transitions named (store.LockSet), all at once and in the one lock order,
// so that batches cannot deadlock; then it applies the plain successes together (completeBatch)
// and the ClaimNext requests together (claimMany), each group in a savepoint if it needs one
// (groupTx.run), and every other transition in a savepoint of its own. If the transaction fails
// transiently, none of it stands and each caller applies its transition again alone
// (Dispatcher.updateAlone): a transition is never retried as part of the group that failed.
func (cm *committer) commit(batch []*pending) {
	d := cm.d
	var locks store.LockSet
	for _, p := range batch {
		locks.Add(p.locks)
	}
	// Plain successes are applied together, set-based.
	var completes, claims []*pending
	var ps []CompleteParams
	others := batch[:0:0]
	for _, p := range batch {
		switch {
		case p.complete != nil:
			completes = append(completes, p)
			ps = append(ps, *p.complete)
		case p.claimNext != nil:
			claims = append(claims, p)
		default:
			others = append(others, p)
		}
	}
	batch = others
	start := time.Now()
	if len(batch) == 1 && len(completes) == 0 && len(claims) == 0 {
		// Alone: no savepoint needed.
		p := batch[0]
		p.err = d.updateAlone(p.ctx, p.locks, p.fn)
		d.cfg.Metrics.Commit(1, time.Since(start))
		if cm.observe != nil {
			cm.observe(1, p.err == nil)
		}
		close(p.done)
		return
	}
	var ctx context.Context
	switch {
	case len(batch) > 0:
		ctx = batch[0].ctx
	case len(completes) > 0:
		ctx = completes[0].ctx
	case len(claims) > 0:
		ctx = claims[0].ctx
	default:
		return
	}
	all := slices.Concat(batch, completes, claims)
	end := endSpan(noEnd)
	if d.tracer != nil { // the links are built only when tracing
		links := make([]context.Context, len(all))
		for i, p := range all {
			links[i] = p.ctx
		}
		ctx, end = d.traceTx(ctx, SpanGroupCommit, len(all), links)
	}
	idx := make([]int, len(completes))
	for i := range idx {
		idx[i] = i
	}
	g := &groupTx{d: d, ctx: ctx, locks: locks, others: batch, completes: completes, claims: claims, ps: ps, idx: idx,
		results: make([]*CompleteResult, len(completes)), errs: make([]error, len(completes))}
	err := g.run(false)
	if _, ok := errors.AsType[*unguardedError](err); ok {
		err = g.run(true)
	}
	d.cfg.Metrics.Commit(len(batch)+len(completes)+len(claims), time.Since(start))
	end(err)
	if err == nil {
		d.committed(g.ready, g.signals)
		d.cfg.Metrics.Record(&g.tally)
	}
	alone := err != nil && d.store.Transient(err)
	if alone {
		d.log.WarnContext(ctx, "group commit failed transiently; applying its transitions one by one",
			"transitions", len(batch)+len(completes)+len(claims), "err", err)
	}
	if cm.observe != nil {
		cm.observe(len(batch)+len(completes)+len(claims), err == nil)
	}
	for _, p := range all {
		if err != nil {
			p.err, p.result, p.slow, p.claims, p.alone = err, nil, false, nil, alone
		}
		close(p.done)
	}
}

// groupTx is the transaction of one batch (committer.commit).
type groupTx struct {
	d     *Dispatcher
	ctx   context.Context
	locks store.LockSet
	// The batch's transitions: others each in a savepoint of its own, the plain successes
	// (ps[idx...], results and errs in completeBatch's terms) and the claims as two groups.
	others, completes, claims []*pending
	ps                        []CompleteParams
	idx                       []int
	results                   []*CompleteResult
	errs                      []error
	// What to wake once the transaction committed.
	ready   bool
	signals []*Signal
	// What to count once it committed (Config.Metrics).
	tally metrics.Tally
}

// run runs the transaction. The two groups (completeBatch, claimMany) fail only when the
// database does — a request refused for its own reason is a result of the group, not its error —
// so unguarded they run without a savepoint each, four statements fewer per commit. If one of
// them fails all the same, the transaction fails with an unguardedError and the caller runs it
// again guarded, with a savepoint around each group, so that the failure is the group's alone.
func (g *groupTx) run(guard bool) error {
	d, ctx := g.d, g.ctx
	g.ready, g.signals = false, nil
	return d.store.InTx(ctx, func(tx store.Tx) error {
		// With nothing but plain successes naming rows, completeBatch's own TaskLockMany takes the
		// same locks in the same order, first thing in the transaction.
		l := g.locks
		if len(g.others) > 0 || len(l.Releasing)+len(l.Ending)+len(l.Jobs)+len(l.Keys) > 0 {
			if err := tx.RowsLock(ctx, l); err != nil {
				return fmt.Errorf("group commit of %d transitions: %w", len(g.others)+len(g.completes)+len(g.claims), err)
			}
		}
		// What every part that stood left for the end of the transaction (Dispatcher.settle):
		// children to release, descendants to skip, job counters.
		group := d.newChanges()
		if len(g.completes) > 0 {
			c := d.newChanges()
			var slow []int
			err := g.part(tx, guard, c, group, func(tx store.Tx) error {
				var err error
				slow, err = d.completeBatch(ctx, tx, c, g.ps, g.idx, g.results, g.errs)
				return err
			})
			if err != nil && !guard {
				return err
			}
			for i, p := range g.completes {
				if err != nil {
					// Rolled back: each is applied alone after this batch.
					p.result, p.err, p.slow = nil, nil, true
					continue
				}
				p.result, p.err, p.slow = g.results[i], g.errs[i], false
			}
			for _, i := range slow {
				g.completes[i].result, g.completes[i].err, g.completes[i].slow = nil, nil, true
			}
			if err == nil {
				group.absorb(c)
				g.ready = g.ready || c.ready
			}
		}
		if len(g.claims) > 0 {
			c := d.newChanges()
			err := g.part(tx, guard, c, group, func(tx store.Tx) error { return d.claimMany(ctx, tx, c, g.claims) })
			if err != nil && !guard {
				return err
			}
			if err != nil {
				for _, p := range g.claims {
					p.claims, p.err = nil, err
				}
			} else if c.ready {
				g.ready = true
			}
		}
		for _, p := range g.others {
			p.c = d.newChanges()
			p.err = tx.Nested(p.ctx, func(tx store.Tx) error {
				if err := p.fn(tx, p.c); err != nil {
					return err
				}
				return p.c.write(p.ctx, tx)
			})
			if p.err == nil {
				group.absorb(p.c)
				g.ready = g.ready || p.c.ready
				g.signals = append(g.signals, p.c.signals...)
			}
		}
		if err := d.settle(ctx, tx, group); err != nil {
			return fmt.Errorf("group commit of %d transitions: %w", len(g.others)+len(g.completes)+len(g.claims), err)
		}
		if err := group.write(ctx, tx); err != nil {
			return fmt.Errorf("group commit of %d transitions: %w", len(g.others)+len(g.completes)+len(g.claims), err)
		}
		g.tally = group.tally
		if g.ready = g.ready || group.ready; g.ready {
			if err := tx.TaskReadyNotify(ctx); err != nil {
				return fmt.Errorf("group commit: wake claimers: %w", err)
			}
		}
		return nil
	})
}

// part runs one group's fn, then writes the events and messages it collected in c — or,
// unguarded in a batch of the two groups alone, leaves them to group, to be written with the
// settlement's, in the same order, by one statement less.
func (g *groupTx) part(tx store.Tx, guard bool, c, group *changes, fn func(store.Tx) error) error {
	write := func(tx store.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		if !guard && len(g.others) == 0 {
			group.events, group.outbox = append(group.events, c.events...), append(group.outbox, c.outbox...)
			c.events, c.outbox = nil, nil
			return nil
		}
		return c.write(g.ctx, tx)
	}
	if guard {
		return tx.Nested(g.ctx, write)
	}
	if err := write(tx); err != nil {
		if g.d.store.Transient(err) {
			return err
		}
		return &unguardedError{err: err}
	}
	return nil
}
