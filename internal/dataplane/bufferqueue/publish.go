package bufferqueue

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/baton-dev/baton/internal/blob"
	"github.com/baton-dev/baton/internal/dataplane/intake"
	"github.com/baton-dev/baton/internal/dataplane/reads"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/pipeline"
	"github.com/baton-dev/baton/internal/scope"
	"github.com/baton-dev/baton/internal/store"
)

// PublishParams is a buffered dataset publish.
type PublishParams struct {
	dispatch.Fence
	BatchURI       string
	DatasetUUID    string
	DatasetVersion string
	RecordCount    *int64
	ContentType    string
	BatchSizeBytes *int64
	DedupeScope    string
}

// maxBatchURI keeps the sink's queue message far below its 256 KB limit.
const maxBatchURI = 2048

// Publish records that the current attempt wrote a batch for the sink, and queues the
// sink's message in the same transaction. The batch must be under the attempt's own prefix in
// the object storage (BatchPrefix), for a buffered dataset of the task's tenant; anything else is
// refused, so a task can never make the sink read another task's artifact or a file of the
// server. A repeat of the same (task, attempt, batch URI) is accepted without a second record;
// duplicate reports true then.
//
// The batch is of the dataset version the task's route pins for the dataset (the version current
// when the task was created). A dataset_version other than that one, or a pinned version that is
// no longer the dataset's current one (a reset_outputs deploy or a cutover since), is refused
// with a *dispatch.ConflictError, and nothing is recorded: the rows of a version that is no
// longer current are never loaded where readers of the current one look, nor routed.
func (q *Queue) Publish(ctx context.Context, p PublishParams) (duplicate bool, err error) {
	if p.BatchURI == "" || len(p.BatchURI) > maxBatchURI {
		return false, &dispatch.InvalidError{Message: fmt.Sprintf("batch_uri is required and at most %d characters", maxBatchURI)}
	}
	if (p.RecordCount != nil && *p.RecordCount < 0) || (p.BatchSizeBytes != nil && *p.BatchSizeBytes < 0) {
		return false, &dispatch.InvalidError{Message: "record_count and batch_size_bytes must not be negative"}
	}
	if q.blob == nil {
		return false, &dispatch.InvalidError{Message: "buffered publishes need object storage: this server runs without --blob-url"}
	}
	key, err := q.blob.Key(p.BatchURI)
	if err != nil {
		return false, &dispatch.InvalidError{Message: fmt.Sprintf("batch_uri: %v", err)}
	}
	err = q.d.Update(ctx, store.LockSet{Tasks: []string{p.TaskID}}, func(tx store.Tx, c *dispatch.Work) error {
		duplicate = false
		t, err := q.d.LockAttempt(ctx, tx, p.Fence)
		if err != nil {
			return fmt.Errorf("task %s: lock attempt %d: %w", p.TaskID, p.Attempt, err)
		}
		// Read for its tenant, which never changes: outside the transaction, so as not to lock it.
		job, err := q.d.JobRef(ctx, t.JobID)
		if err != nil {
			return fmt.Errorf("task %s: job %s: %w", t.ID, t.JobID, err)
		}
		ds, err := q.batchDataset(ctx, tx, job.Tenant, t, key, p)
		if err != nil {
			return err
		}
		out, writes := scope.Of(t, job.Tenant).Publishable(ds.UUID)
		if !writes {
			return &dispatch.ForbiddenError{Message: fmt.Sprintf("dataset %q is not an output of this task's job: only tasks of the pipeline job "+
				"that publishes a buffered dataset may publish batches into it", reads.Label(ds))}
		}
		if gone, err := intake.RolledBack(ctx, tx, job.Tenant, t); err != nil {
			return fmt.Errorf("task %s: %w", t.ID, err)
		} else if gone != nil {
			return &dispatch.ConflictError{Code: "pipeline_version_rolled_back", Message: fmt.Sprintf(
				"version %s of pipeline %q was rolled back: what its tasks write is not loaded; nothing was recorded", gone.Version, gone.Pipeline)}
		}
		version := out.Version
		switch {
		case p.DatasetVersion != "" && p.DatasetVersion != version:
			return &dispatch.ConflictError{Code: "dataset_version_conflict", Message: fmt.Sprintf(
				"dataset_version %q is not the version of dataset %q this task writes (%s, current when the task was created); nothing was recorded",
				p.DatasetVersion, reads.Label(ds), version)}
		case version != ds.CurrentVersion:
			return &dispatch.ConflictError{Code: "dataset_version_not_current", Message: fmt.Sprintf(
				"this task writes version %s of dataset %q, which is no longer its current version (%s: its outputs were reset, "+
					"or its current version was switched, since the task was created); nothing was recorded",
				version, reads.Label(ds), ds.CurrentVersion)}
		}
		rec := &store.BufferPublish{TaskID: t.ID, Attempt: t.Attempt, BatchURI: q.blob.URI(key), JobID: t.JobID,
			Tenant: job.Tenant, DatasetUUID: ds.UUID, DatasetVersion: version,
			RecordCount: p.RecordCount, ContentType: p.ContentType, BatchSizeBytes: p.BatchSizeBytes,
			DedupeScope: p.DedupeScope, CreatedAt: c.Now(), State: store.BufferQueued, VisibleAt: c.Now()}
		ok, err := tx.BufferPublishInsert(ctx, rec)
		if err != nil {
			duplicate = !ok
			return fmt.Errorf("task %s attempt %d: record its batch of dataset %s: %w", t.ID, t.Attempt, ds.UUID, err)
		}
		if !ok {
			duplicate = true
			return nil
		}
		c.Outbox(&store.OutboxMessage{Topic: store.TopicBufferBatch, Key: ds.UUID, Payload: bufferBatchMessage(rec),
			AvailableAt: c.Now(), CreatedAt: c.Now()})
		c.Signal(&q.sinks)
		return nil
	})
	return duplicate, err
}

// batchDataset checks that key is under the attempt's own prefix for a buffered dataset of tenant,
// and returns that dataset. The prefix is BatchPrefix: buffers/{dataset}/{task_id}/{attempt}/,
// {dataset} being the dataset's uuid or name. The shorter buffers/{task_id}/{attempt}/ is accepted
// too when the body names the dataset (dataset_uuid, or its name as dedupe_scope), as the
// task-scoped dialect's own example does.
func (q *Queue) batchDataset(ctx context.Context, tx store.Tx, tenant string, t *store.Task, key string,
	p PublishParams) (*store.Dataset, error) {
	attempt := strconv.Itoa(t.Attempt)
	rest, _ := strings.CutPrefix(key, blob.BufferPrefix)
	parts := strings.Split(rest, "/")
	var ref string
	switch {
	case !strings.HasPrefix(key, blob.BufferPrefix):
	case len(parts) >= 4 && parts[1] == t.ID && parts[2] == attempt:
		ref = parts[0]
	case len(parts) >= 3 && parts[0] == t.ID && parts[1] == attempt:
		ref = cmp.Or(p.DatasetUUID, p.DedupeScope)
		if ref == "" {
			return nil, &dispatch.InvalidError{Message: "dataset_uuid is required when batch_uri does not name the dataset (" +
				q.blob.URI(blob.BatchPrefix("{dataset}", t.ID, t.Attempt)) + "...)"}
		}
	}
	if ref == "" || strings.HasSuffix(key, "/") {
		return nil, &dispatch.InvalidError{Message: fmt.Sprintf("batch_uri must be an object under the task's own prefix %s",
			q.blob.URI(blob.BatchPrefix("{dataset}", t.ID, t.Attempt)))}
	}
	ds, err := reads.Find(ctx, tx, tenant, ref)
	switch {
	case errors.Is(err, reads.ErrDatasetNotFound):
		return nil, &dispatch.InvalidError{Message: fmt.Sprintf("dataset %q: this tenant has no such dataset", ref)}
	case err != nil:
		return nil, err
	case ds.WriteMode != pipeline.WriteBuffered || len(ds.Schema) == 0:
		return nil, &dispatch.InvalidError{Message: fmt.Sprintf("dataset %q is not a buffered dataset", ref)}
	case p.DatasetUUID != "" && p.DatasetUUID != ds.UUID:
		return nil, &dispatch.InvalidError{Message: fmt.Sprintf("dataset_uuid %q is not the dataset batch_uri names (%s)", p.DatasetUUID, ds.UUID)}
	}
	return ds, nil
}

// bufferBatchMessage is the Buffer Queue message of a publish: small, never the rows. The sink
// takes the tenant (org_id) from it, never from the batch's rows; id is the message's id.
func bufferBatchMessage(p *store.BufferPublish) json.RawMessage {
	msg, _ := json.Marshal(map[string]any{"kind": "buffer_batch", "id": p.ID, "org_id": p.Tenant, "dataset_uuid": p.DatasetUUID,
		"dataset_version": p.DatasetVersion, "batch_uri": p.BatchURI, "record_count": p.RecordCount,
		"content_type": p.ContentType, "batch_size_bytes": p.BatchSizeBytes, "dedupe_scope": p.DedupeScope,
		"producer": map[string]any{"task_id": p.TaskID, "attempt": p.Attempt}})
	return msg
}
