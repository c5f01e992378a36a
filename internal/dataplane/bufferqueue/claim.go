package bufferqueue

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/pipeline"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/wire"
)

// Message is a Buffer Queue message claimed by a sink: the message itself, and what the sink
// needs to load it, all from trusted records.
type Message struct {
	ID           int64           // the publish record's id
	ReceiveCount int             // this claim included; also the receipt FailBatch checks
	VisibleUntil time.Time       // the message is the claimer's until then
	Message      json.RawMessage // the buffer_batch message
	Tenant       string
	BatchURI     string
	Dataset      Dataset
}

// WireMessages renders claimed messages as a sink receives them, over the internal listener
// (/internal/sink/claim) or in the same process; never nil.
func WireMessages(msgs []*Message) []wire.SinkMessage {
	out := make([]wire.SinkMessage, 0, len(msgs))
	for _, m := range msgs {
		schema, _ := json.Marshal(m.Dataset.Schema)
		filter := m.Dataset.FilterFields
		if filter == nil {
			filter = []string{}
		}
		out = append(out, wire.SinkMessage{ID: m.ID, ReceiveCount: m.ReceiveCount, VisibleUntil: m.VisibleUntil.UTC(),
			Message: m.Message, OrgID: m.Tenant, BatchURI: m.BatchURI, Dataset: wire.SinkDataset{UUID: m.Dataset.UUID,
				Name: m.Dataset.Name, Schema: schema, FilterFields: filter}})
	}
	return out
}

// Dataset is the dataset a sink message loads into.
type Dataset struct {
	UUID         string
	Name         string
	Schema       *pipeline.Schema
	FilterFields []string
}

// ClaimParams asks for Buffer Queue messages.
type ClaimParams struct {
	Max        int           // at most this many; default 1, at most 100
	Visibility time.Duration // how long they stay the claimer's; default Config.Visibility, at most 1 h
	ID         int64         // only this message (after a wake-up naming it), when > 0
	Wait       time.Duration // wait up to this long for one when none is ready
}

// Claim claims Buffer Queue messages for a sink: each receive counts, and the message is
// invisible to other sinks until VisibleUntil. A message that was already received MaxReceives
// times without being committed (its sinks died, or failed it) is dead-lettered instead, and so is
// one whose batch is of a dataset version that is no longer current (queued before a cutover, or
// published while a reset_outputs deploy committed): it is never handed out.
func (q *Queue) Claim(ctx context.Context, p ClaimParams) ([]*Message, error) {
	cfg := q.cfg
	p.Max = min(cmp.Or(p.Max, 1), 100)
	p.Visibility = min(cmp.Or(p.Visibility, cfg.Visibility), time.Hour)
	if p.Max < 0 || p.Visibility < 0 || p.Wait < 0 {
		return nil, &dispatch.InvalidError{Message: "max, visibility and wait must not be negative"}
	}
	deadline := q.clock.Now().Add(p.Wait)
	for {
		woken := q.sinks.Wait()
		msgs, err := q.claim(ctx, p, cfg)
		if err != nil || len(msgs) > 0 || p.ID > 0 {
			return msgs, err
		}
		left := deadline.Sub(q.clock.Now())
		if left <= 0 {
			return nil, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-woken:
		case <-q.clock.After(min(left, time.Second)): // publishes committed by other replicas
		}
	}
}

func (q *Queue) claim(ctx context.Context, p ClaimParams, cfg Config) ([]*Message, error) {
	var out []*Message
	err := q.d.UpdateAlone(ctx, store.LockSet{}, func(tx store.Tx, c *dispatch.Work) error {
		out = nil
		recs, err := tx.BufferPublishListClaimable(ctx, store.BufferPublishListClaimableParams{Now: c.Now(), ID: p.ID, Limit: p.Max})
		if err != nil {
			return err
		}
		uuids := make([]string, 0, len(recs))
		for _, r := range recs {
			uuids = append(uuids, r.DatasetUUID)
		}
		datasets, err := tx.DatasetGetMany(ctx, sortedUnique(uuids))
		if err != nil {
			return fmt.Errorf("the datasets of %d claimable buffer batches: %w", len(recs), err)
		}
		byUUID := make(map[string]*store.Dataset, len(datasets))
		for _, x := range datasets {
			byUUID[x.UUID] = x
		}
		for _, r := range recs {
			ds := byUUID[r.DatasetUUID]
			sd, derr := sinkDataset(ds)
			switch {
			case derr != nil:
				r.State, r.FinishedAt = store.BufferDead, c.Now()
				r.LastError = derr.Error()
			case r.ReceiveCount >= cfg.MaxReceives:
				r.State, r.FinishedAt = store.BufferDead, c.Now()
				r.LastError = cmp.Or(r.LastError, "no sink committed it") + fmt.Sprintf(" (after %d receives)", r.ReceiveCount)
			case sd.Schema == nil:
				r.State, r.FinishedAt = store.BufferDead, c.Now()
				r.LastError = "the dataset is no longer a buffered dataset with a schema"
			case r.DatasetVersion != ds.CurrentVersion:
				r.State, r.FinishedAt = store.BufferDead, c.Now()
				r.LastError = staleBatch(r, ds)
			default:
				r.ReceiveCount++
				r.VisibleAt = c.Now().Add(p.Visibility)
				out = append(out, &Message{ID: r.ID, ReceiveCount: r.ReceiveCount, VisibleUntil: r.VisibleAt,
					Message: bufferBatchMessage(r), Tenant: r.Tenant, BatchURI: r.BatchURI, Dataset: sd})
			}
			if err := tx.BufferPublishUpdate(ctx, r); err != nil {
				return err
			}
		}
		return nil
	})
	return out, err
}

// sinkDataset is what a sink needs of ds (nil: the dataset is gone); a stored schema or filter
// fields that cannot be read are an error naming the dataset.
func sinkDataset(ds *store.Dataset) (Dataset, error) {
	if ds == nil {
		return Dataset{}, nil
	}
	sd := Dataset{UUID: ds.UUID, Name: ds.Name}
	if len(ds.FilterFields) > 0 {
		if err := json.Unmarshal(ds.FilterFields, &sd.FilterFields); err != nil {
			return sd, fmt.Errorf("dataset %s: its stored filter fields cannot be read: %v", ds.UUID, err)
		}
	}
	if len(ds.Schema) > 0 {
		sd.Schema = &pipeline.Schema{}
		if err := json.Unmarshal(ds.Schema, sd.Schema); err != nil {
			return sd, fmt.Errorf("dataset %s: its stored schema cannot be read: %v", ds.UUID, err)
		}
	}
	return sd, nil
}

// staleBatch is the last_error of a batch dead-lettered because its version is no longer the
// dataset's current one.
func staleBatch(r *store.BufferPublish, ds *store.Dataset) string {
	return fmt.Sprintf("discarded, not loaded: the batch is of dataset version %s, which is no longer the dataset's current version (%s)",
		r.DatasetVersion, ds.CurrentVersion)
}
