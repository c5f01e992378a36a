package bufferqueue

import (
	"context"
	"time"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/store"
)

// ExtendBatch extends the claim of Buffer Queue message id, received as receipt (its
// ReceiveCount at the claim): the message stays invisible to other claims until visibility from
// now, which is 1 s to 1 h. A sink calls it again and again while a load outlasts the visibility
// it claimed with, so that no other sink takes the batch over while it is still being loaded.
//
// Only the latest receive of a queued message may extend it: a receipt that a later claim
// superseded (the visibility ran out and another sink claimed the message), or a message already
// committed or dead-lettered, is refused with ErrNotClaimed, and an unknown id with
// ErrNotFound; either way nothing changes. The receipt still holds after its visibility ran
// out for as long as no other claim took the message.
func (q *Queue) Extend(ctx context.Context, id int64, receipt int, visibility time.Duration) (visibleUntil time.Time, err error) {
	if visibility < time.Second || visibility > time.Hour {
		return time.Time{}, &dispatch.InvalidError{Message: "visibility_seconds must be an integer from 1 to 3600"}
	}
	err = q.d.UpdateAlone(ctx, store.LockSet{}, func(tx store.Tx, c *dispatch.Work) error {
		visibleUntil = c.Now().Add(visibility)
		ok, err := tx.BufferPublishExtend(ctx, store.BufferPublishExtendParams{ID: id, Receipt: receipt, VisibleAt: visibleUntil})
		if err != nil || ok {
			return err
		}
		if _, err := tx.BufferPublishGet(ctx, id); err != nil {
			return batchNotFound(err)
		}
		return ErrNotClaimed
	})
	if err != nil {
		return time.Time{}, err
	}
	return visibleUntil, nil
}
