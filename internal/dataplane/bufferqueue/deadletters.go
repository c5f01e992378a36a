package bufferqueue

import (
	"context"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/baton-dev/baton/internal/dataplane/reads"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/store"
)

// DeadLetters lists the dead-lettered batches of a tenant's dataset (named or by uuid), oldest
// first, with id > after.
func (q *Queue) DeadLetters(ctx context.Context, tenant, dataset string, after int64, limit int) ([]*store.BufferPublish, error) {
	ds, err := reads.Find(ctx, q.st, tenant, dataset)
	if err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = 100
	}
	return q.st.BufferPublishListDeadLetters(ctx, store.BufferPublishListDeadLettersParams{
		DatasetUUID: ds.UUID, AfterID: after, Limit: min(limit, 1000),
	})
}

// Retry puts a dead-lettered batch of a tenant's dataset back on the Buffer Queue with a fresh
// receive budget. A batch of a version that is no longer the dataset's current one (such as those
// a reset_outputs deploy discarded) is refused with a *dispatch.ConflictError: it can no longer
// be loaded.
func (q *Queue) Retry(ctx context.Context, tenant, dataset string, id int64) (*store.BufferPublish, error) {
	ds, err := reads.Find(ctx, q.st, tenant, dataset)
	if err != nil {
		return nil, err
	}
	var r *store.BufferPublish
	err = q.d.UpdateAlone(ctx, store.LockSet{}, func(tx store.Tx, c *dispatch.Work) error {
		if r, err = tx.BufferPublishGet(ctx, id); err != nil {
			return batchNotFound(err)
		}
		if r.DatasetUUID != ds.UUID || r.Tenant != tenant {
			return ErrNotFound
		}
		if r.State != store.BufferDead {
			return &dispatch.InvalidError{Message: fmt.Sprintf("batch %d is %s, not dead-lettered", id, r.State)}
		}
		cur, err := tx.DatasetGetMany(ctx, []string{r.DatasetUUID})
		if err != nil {
			return fmt.Errorf("buffer batch %d: dataset %s: %w", id, r.DatasetUUID, err)
		}
		if len(cur) == 1 && cur[0].CurrentVersion != r.DatasetVersion {
			return &dispatch.ConflictError{Code: "dataset_version_not_current", Message: fmt.Sprintf(
				"batch %d is of dataset version %s, which is no longer the dataset's current version (%s): it can no longer be loaded; "+
					"publish its rows again from a task of the current version", id, r.DatasetVersion, cur[0].CurrentVersion)}
		}
		r.State, r.ReceiveCount, r.VisibleAt, r.FinishedAt = store.BufferQueued, 0, c.Now(), time.Time{}
		c.Signal(&q.sinks)
		return tx.BufferPublishUpdate(ctx, r)
	})
	return r, err
}

// truncate cuts s to at most n bytes, never inside a character (PostgreSQL refuses invalid UTF-8).
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// sortedUnique returns ss sorted, without repeats.
func sortedUnique(ss []string) []string {
	out := slices.Clone(ss)
	slices.Sort(out)
	return slices.Compact(out)
}
