package dispatch

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/metrics"
	"github.com/baton-dev/baton/internal/store"
)

// CompleteMany applies several reports, each exactly as Complete would (same fencing, same
// idempotency, same answers), and returns their results and errors in order. Successes of
// running attempts without final events — the common case — are applied together, with
// set-based statements in one transaction: a batch of them costs a handful of round trips to the
// database rather than several per task. Every other report goes through Complete.
func (d *Dispatcher) CompleteMany(ctx context.Context, ps []CompleteParams) ([]*CompleteResult, []error) {
	results := make([]*CompleteResult, len(ps))
	errs := make([]error, len(ps))
	var fast []int
	for i := range ps {
		d.redact(&ps[i])
	}
	for i, p := range ps {
		if p.Outcome == store.OutcomeSucceeded && len(p.Events) == 0 && len(p.Published) == 0 {
			fast = append(fast, i)
		}
	}
	slow := d.completeFast(ctx, ps, fast, results, errs)
	isFast := map[int]bool{}
	for _, i := range fast {
		isFast[i] = true
	}
	for _, i := range slow {
		isFast[i] = false
	}
	var wg sync.WaitGroup
	for i := range ps {
		if isFast[i] {
			d.count(metrics.Complete, errs[i]) // the others are counted by Complete
			continue
		}
		wg.Go(func() { results[i], errs[i] = d.Complete(ctx, ps[i]) })
	}
	wg.Wait()
	return results, errs
}

// completeFast applies the successes ps[idx...] in one transaction and fills in their results
// and errors. It returns the indexes it left for Complete: reports of attempts that are not
// simply running (a late report after a timeout), or all of them if the transaction failed.
func (d *Dispatcher) completeFast(ctx context.Context, ps []CompleteParams, idx []int, results []*CompleteResult, errs []error) (slow []int) {
	if len(idx) == 0 {
		return nil
	}
	if d.commit != nil {
		// With the other plain successes of the group commit, set-based.
		return d.commit.doCompletes(ctx, ps, idx, results, errs)
	}
	locks := store.LockSet{Tasks: make([]string, len(idx))}
	for k, i := range idx {
		locks.Tasks[k] = ps[i].TaskID
	}
	err := d.update(ctx, locks, func(tx store.Tx, c *changes) error {
		var err error
		slow, err = d.completeBatch(ctx, tx, c, ps, idx, results, errs)
		return err
	})
	if err != nil {
		d.log.WarnContext(ctx, "batch completion failed; applying its reports one by one", "reports", len(idx), "err", err)
		// Nothing was committed: let Complete apply each report alone.
		for _, i := range idx {
			results[i], errs[i] = nil, nil
		}
		return idx
	}
	return slow
}

// completeBatch is completeFast's transaction: it applies the plain successes among ps[idx...]
// with set-based statements and returns the indexes left for Complete. It may run again.
func (d *Dispatcher) completeBatch(ctx context.Context, tx store.Tx, c *changes, ps []CompleteParams, idx []int,
	results []*CompleteResult, errs []error) (slow []int, err error) {
	ids := make([]string, len(idx))
	for k, i := range idx {
		ids[k] = ps[i].TaskID
		results[i], errs[i] = nil, nil
	}
	{
		tasks, err := tx.TaskLockMany(ctx, ids)
		if err != nil {
			return nil, fmt.Errorf("batch of %d completions: %w", len(ids), err)
		}
		byID := make(map[string]*store.Task, len(tasks))
		for _, t := range tasks {
			byID[t.ID] = t
		}
		var (
			done    []store.CompletedTask
			ended   []*store.Attempt
			doneIdx []int
			doneIDs = map[string]bool{}
		)
		for _, i := range idx {
			p := ps[i]
			t := byID[p.TaskID]
			if t == nil {
				errs[i] = ErrTaskNotFound
				continue
			}
			if err := checkFence(t, p.Attempt, p.LeaseToken); err != nil {
				errs[i] = err
				continue
			}
			// A running task's current attempt has not ended: it is stored when it ends, so the
			// task row alone says this report is the first.
			switch {
			case t.Status != lifecycle.Running:
				slow = append(slow, i) // a repeat, a late report or an expired attempt
			case doneIDs[t.ID]:
				// A second report of the attempt in this batch: a repeat, as Complete would see it.
				results[i] = &CompleteResult{Task: t, Status: lifecycle.Completed, Duplicate: true}
			default:
				doneIDs[t.ID] = true
				output := p.Output
				if len(output) == 0 {
					output = json.RawMessage("null")
				}
				done = append(done, store.CompletedTask{ID: t.ID, Attempt: t.Attempt, Output: output})
				ended = append(ended, &store.Attempt{TaskID: t.ID, Attempt: t.Attempt, WorkerID: t.WorkerID,
					LeaseToken: t.LeaseToken, StartedAt: t.StartedAt, FinishedAt: c.now, Outcome: store.OutcomeSucceeded,
					Result: lifecycle.Completed, Metrics: p.Metrics, Traceparent: p.Traceparent})
				doneIdx = append(doneIdx, i)
			}
		}
		if len(done) == 0 {
			return slow, nil
		}
		now := c.now
		if err := tx.TaskCompleteMany(ctx, done, now); err != nil {
			return nil, fmt.Errorf("batch of %d completions: %w", len(ids), err)
		}
		if err := tx.AttemptPutMany(ctx, ended); err != nil {
			return nil, fmt.Errorf("batch of %d completions: %w", len(ids), err)
		}
		parents := make([]string, len(done))
		finished := map[string]int{} // per job
		for k, dn := range done {
			t := byID[dn.ID]
			parents[k] = t.ID
			finished[t.JobID]++
			t.Status, t.Output, t.Error = lifecycle.Completed, dn.Output, nil
			endAttempt(t, now)
			t.LastEventType, t.LastEventAt = EventTaskCompleted, now
			c.event(t.JobID, t.ID, t.Key, EventTaskCompleted, map[string]any{"attempt": t.Attempt, "workerId": t.WorkerID})
			c.freed(t)
			results[doneIdx[k]] = &CompleteResult{Task: t, Status: lifecycle.Completed}
		}
		c.release(parents...)
		for j, n := range finished {
			c.finish(j, n, "")
		}
		return slow, nil
	}
}

// claimMany serves the ClaimNext requests ps of one batch together: requests for the same
// queues share one ready-task query per queue and one claiming statement, and each request gets
// the next ready tasks in queue-priority order, up to its limit, in the order the requests came.
func (d *Dispatcher) claimMany(ctx context.Context, tx store.Tx, c *changes, ps []*pending) error {
	groups := map[string][]*pending{}
	var keys []string
	for _, p := range ps {
		p.claims, p.err = nil, nil
		k := strings.Join(p.claimNext.Queues, "\x00")
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], p)
	}
	for _, k := range keys {
		group := groups[k]
		total := 0
		for _, p := range group {
			total += p.claimNext.Limit
		}
		var ids []string
		for _, q := range group[0].claimNext.Queues {
			if len(ids) == total {
				break
			}
			got, err := tx.TaskListReadyIDs(ctx, store.TaskListReadyIDsParams{Queue: q, Now: c.now, Limit: total - len(ids)})
			if err != nil {
				return fmt.Errorf("batch of %d claims: %w", len(group), err)
			}
			ids = append(ids, got...)
		}
		workers := make([]string, len(ids))
		owner := make(map[string]*pending, len(ids))
		next := 0
		for _, p := range group {
			for range p.claimNext.Limit {
				if next == len(ids) {
					break
				}
				workers[next], owner[ids[next]] = p.claimNext.WorkerID, p
				next++
			}
		}
		claims, err := d.claimFor(ctx, tx, c, ids, workers, "pull")
		if err != nil {
			return err
		}
		for _, cl := range claims {
			p := owner[cl.Task.ID]
			p.claims = append(p.claims, cl)
		}
	}
	return nil
}
