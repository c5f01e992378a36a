package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dataplane/bufferqueue"
	"github.com/baton-dev/baton/internal/sink"
	"github.com/baton-dev/baton/wire"
)

// SinkQueue is the Buffer Queue of this process's dispatcher for a sink running in the same
// process (baton dev, baton server --sink): the internal listener's /internal/sink/* operations
// without HTTP, in the same shapes (sink.Queue).
type SinkQueue struct{ P *dataplane.Plane }

var _ sink.Queue = SinkQueue{}

func (q SinkQueue) Claim(ctx context.Context, p wire.SinkClaimRequest) ([]wire.SinkMessage, error) {
	msgs, err := q.P.Buffers().Claim(ctx, bufferqueue.ClaimParams{Max: p.Max, ID: p.ID,
		Visibility: time.Duration(p.VisibilitySeconds) * time.Second, Wait: time.Duration(min(p.WaitSeconds, 30)) * time.Second})
	if err != nil {
		return nil, err
	}
	return bufferqueue.WireMessages(msgs), nil
}

func (q SinkQueue) Extend(ctx context.Context, p wire.SinkExtend) error {
	_, err := q.P.Buffers().Extend(ctx, p.ID, p.ReceiveCount, time.Duration(p.VisibilitySeconds)*time.Second)
	return refusal(err)
}

// refusal is the sink's error for the dispatcher's refusal of an extend or a fail.
func refusal(err error) error {
	switch {
	case errors.Is(err, bufferqueue.ErrNotClaimed):
		return fmt.Errorf("%w: %w", sink.ErrNotClaimed, err)
	case errors.Is(err, bufferqueue.ErrNotFound):
		return fmt.Errorf("%w: %w", sink.ErrNotFound, err)
	}
	return err
}

func (q SinkQueue) Commit(ctx context.Context, p wire.SinkCommit) error {
	return q.P.Buffers().Commit(ctx, p.ID, bufferqueue.Loaded{Cursor: p.Cursor, Inserted: p.Inserted, Facets: p.Facets})
}

func (q SinkQueue) Fail(ctx context.Context, p wire.SinkFail) (bool, error) {
	dead, err := q.P.Buffers().Fail(ctx, p.ID, p.ReceiveCount, p.Error)
	return dead, refusal(err)
}
