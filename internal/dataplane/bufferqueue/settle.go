package bufferqueue

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/baton-dev/baton/internal/dataplane/intake"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/report"
	"github.com/baton-dev/baton/internal/store"
)

// Loaded is what a sink's load of a batch did.
type Loaded struct {
	Cursor   int64            // the dataset's cursor of the rows it added; 0 when it added none
	Inserted int              // rows that were new
	Facets   map[string][]any // per filter field, the values among the new rows (a field left out may have any)
}

// ErrNotClaimed: the message is not the caller's to fail (a later receive took it over, or
// it is settled).
var ErrNotClaimed = errors.New("the buffer batch is not claimed by this receive")

// Commit records that a sink loaded message id and, when the load added rows, emits the
// dataset event of its new cursor in the same transaction, of the batch's dataset version, which
// routing turns into consumer tasks while that version is current. Any receive may commit, even
// a late one whose visibility ran out, or one of a message dead-lettered meanwhile: a load
// happens once (the data database keeps a ledger of loaded batches), so a commit only ever
// reports what is true. A message already committed is not an error.
func (q *Queue) Commit(ctx context.Context, id int64, res Loaded) error {
	if res.Cursor < 0 || res.Inserted < 0 || (res.Cursor == 0) != (res.Inserted == 0) {
		return &dispatch.InvalidError{Message: "cursor and inserted must both be positive, or both 0 for a batch that added no rows"}
	}
	return q.d.UpdateAlone(ctx, store.LockSet{}, func(tx store.Tx, c *dispatch.Work) error {
		r, err := tx.BufferPublishGet(ctx, id)
		if err != nil {
			return batchNotFound(err)
		}
		if r.State == store.BufferCommitted {
			return nil
		}
		r.State, r.FinishedAt, r.LastError = store.BufferCommitted, c.Now(), ""
		inserted := int64(res.Inserted)
		r.RowsInserted = &inserted
		if res.Cursor > 0 {
			r.Cursor = &res.Cursor
		}
		if err := tx.BufferPublishUpdate(ctx, r); err != nil {
			return err
		}
		if res.Cursor == 0 {
			return nil
		}
		return q.emitBatchEvent(ctx, tx, c, r, res)
	})
}

// emitBatchEvent stores the dataset event of a committed batch, of the batch's version, and queues
// it for routing, which drops it unless that version is current.
func (q *Queue) emitBatchEvent(ctx context.Context, tx store.Tx, c *dispatch.Work, r *store.BufferPublish, res Loaded) error {
	ds, err := tx.DatasetGetMany(ctx, []string{r.DatasetUUID})
	if err != nil {
		return fmt.Errorf("buffer batch %d: dataset %s: %w", r.ID, r.DatasetUUID, err)
	}
	if len(ds) == 0 {
		return nil
	}
	cursor := res.Cursor
	e := &store.DatasetEvent{DedupeKey: "buffer:" + strconv.FormatInt(r.ID, 10), JobID: r.JobID, TaskID: r.TaskID,
		Attempt: r.Attempt, DatasetUUID: r.DatasetUUID, DatasetVersion: r.DatasetVersion, Cursor: &cursor, CreatedAt: c.Now()}
	if _, err := tx.DatasetEventInsertMany(ctx, []*store.DatasetEvent{e}); err != nil {
		return fmt.Errorf("buffer batch %d: store its dataset event: %w", r.ID, err)
	}
	if e.ID == 0 {
		return nil
	}
	intake.Queue(c, &intake.Routed{Tenant: r.Tenant, EventID: e.ID, TaskID: r.TaskID, Facets: res.Facets,
		Event: report.Event{DatasetUUID: e.DatasetUUID, DatasetVersion: e.DatasetVersion, Cursor: e.Cursor}})
	c.Signal(q.routing)
	return nil
}

// Fail records that a sink could not load message id, received as receipt, for reason: it
// becomes visible again after a doubling delay, or is dead-lettered once it was received
// MaxReceives times, or at once when its batch is of a dataset version that is no longer current
// (a retry could only dead-letter it at its claim). dead reports the latter two.
func (q *Queue) Fail(ctx context.Context, id int64, receipt int, reason string) (dead bool, err error) {
	cfg := q.cfg
	if reason == "" {
		return false, &dispatch.InvalidError{Message: "error is required"}
	}
	err = q.d.UpdateAlone(ctx, store.LockSet{}, func(tx store.Tx, c *dispatch.Work) error {
		dead = false
		r, err := tx.BufferPublishGet(ctx, id)
		if err != nil {
			return batchNotFound(err)
		}
		if r.State != store.BufferQueued || r.ReceiveCount != receipt {
			return ErrNotClaimed
		}
		r.LastError = truncate(reason, 4000)
		ds, err := tx.DatasetGetMany(ctx, []string{r.DatasetUUID})
		if err != nil {
			return fmt.Errorf("buffer batch %d: dataset %s: %w", id, r.DatasetUUID, err)
		}
		if r.ReceiveCount >= cfg.MaxReceives || (len(ds) == 1 && ds[0].CurrentVersion != r.DatasetVersion) {
			r.State, r.FinishedAt, dead = store.BufferDead, c.Now(), true
		} else {
			delay := cfg.RetryBase << min(r.ReceiveCount-1, 30)
			if delay <= 0 || delay > cfg.RetryMax {
				delay = cfg.RetryMax
			}
			r.VisibleAt = c.Now().Add(delay)
		}
		return tx.BufferPublishUpdate(ctx, r)
	})
	return dead, err
}

// ErrNotFound: no Buffer Queue message has that id (for the tenant, where one is named).
var ErrNotFound = errors.New("buffer batch not found")

func batchNotFound(err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return ErrNotFound
	}
	return err
}
