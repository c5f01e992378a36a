package dataplane

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/baton-dev/baton/internal/blob"
	"github.com/baton-dev/baton/internal/dataplane/intake"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/pipeline"
	"github.com/baton-dev/baton/internal/report"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/wire"
)

// Buffered datasets: a task writes a batch of rows to object storage under its own prefix and
// publishes it (BufferPublish, fenced like every report). The publish record is a message of the
// Buffer Queue: a trusted sink claims it (ClaimBatches), loads the batch into the dataset's table
// in the data database, and reports the outcome (CommitBatch, which emits the dataset event that
// routing delivers, or FailBatch). A message that fails MaxReceives receives is dead-lettered.

// DatasetTables holds buffered datasets' tables in the data database.
type DatasetTables interface {
	// EnsureTables plans the change of every table of a deploy (a new table, added columns, new
	// indexes), checks all of them, and makes them in one transaction of the data database, or
	// none: tables that cannot serve their schemas are refused with an *IncompatibleTablesError
	// that names each of them, and nothing changes. during runs while that transaction is open,
	// holding the datasets' locks, and the transaction commits only when during returns nil;
	// during's error is returned as it is. A table with ClearTenant has that tenant's rows
	// removed in the same transaction, before during runs; cleared counts them by dataset uuid.
	// A table with RetireVersion has that version retired in it: from the commit on, no batch of
	// it is loaded (a load already under way either commits first, and its rows are among those
	// removed, or is refused).
	EnsureTables(ctx context.Context, tables []DatasetTable, during func(cleared map[string]int64) error) error
	// Rows reads a page of the dataset's rows of one tenant, oldest first.
	Rows(ctx context.Context, datasetUUID string, s *pipeline.Schema, q RowQuery) (RowPage, error)
	// Scan hands every row of tenant in the dataset that where keeps to yield, from one
	// snapshot: the values of columns, where "_cursor" is its load's cursor (dataset.DB.Scan).
	Scan(ctx context.Context, datasetUUID string, s *pipeline.Schema, tenant string, where map[string]any, columns []string, yield func([]any) error) error
}

// RowQuery selects rows of a buffered dataset.
type RowQuery struct {
	Tenant string
	Where  map[string]any // column → value or list of values: AND of equality / IN
	Cursor int64          // only the rows of the batch with this dataset cursor; 0: every batch
	// CursorEnd, when above Cursor, widens Cursor to the batches of every cursor from Cursor to
	// CursorEnd.
	CursorEnd int64
	After     int64 // the page after the one whose Next this is
	Limit     int
}

// RowPage is a page of rows: each row's columns and its batch's "_cursor".
type RowPage struct {
	Rows []map[string]any
	Next int64 // 0 on the last page
}

// DatasetRows reads a page of a tenant's buffered dataset (named or by uuid). The where clause
// follows the rules of an input's where on that dataset.
func (dp *Plane) DatasetRows(ctx context.Context, tenant, dataset string, q RowQuery) (RowPage, error) {
	ds, err := dp.findDataset(ctx, dp.store, tenant, dataset)
	if err != nil {
		return RowPage{}, err
	}
	if ds.WriteMode != pipeline.WriteBuffered || len(ds.Schema) == 0 || dp.cfg.Tables == nil {
		return RowPage{}, &dispatch.InvalidError{Message: fmt.Sprintf("dataset %q is not a buffered dataset: Baton keeps no rows of it", dataset)}
	}
	if ps := pipeline.CheckWhere("where", q.Where, allowlistOf(ds)); len(ps) > 0 {
		return RowPage{}, &dispatch.ValidationError{Errors: ps.Strings()}
	}
	if q.Limit < 0 || q.Limit > 1000 || q.Cursor < 0 || q.After < 0 {
		return RowPage{}, &dispatch.InvalidError{Message: "limit must be 1 to 1000, and cursor and after must not be negative"}
	}
	var s pipeline.Schema
	if err := json.Unmarshal(ds.Schema, &s); err != nil {
		return RowPage{}, fmt.Errorf("dataset %s: decode schema: %w", ds.UUID, err)
	}
	q.Tenant, q.Limit = tenant, cmp.Or(q.Limit, 100)
	return dp.cfg.Tables.Rows(ctx, ds.UUID, &s, q)
}

// ErrIncompatibleSchema: a buffered dataset's new schema cannot serve its existing table.
var ErrIncompatibleSchema = errors.New("incompatible schema")

// BufferConfig configures the Buffer Queue. Zero fields take their defaults.
type BufferConfig struct {
	MaxReceives int           // receives before a message is dead-lettered; default 10
	Visibility  time.Duration // how long a claimed message stays invisible by default; default 1 min
	RetryBase   time.Duration // delay before a failed message is visible again, doubling; default 1 s
	RetryMax    time.Duration // cap of that delay; default 1 min
}

// DefaultBufferConfig holds the defaults.
var DefaultBufferConfig = BufferConfig{MaxReceives: 10, Visibility: time.Minute, RetryBase: time.Second, RetryMax: time.Minute}

func (c BufferConfig) withDefaults() BufferConfig {
	def := DefaultBufferConfig
	return BufferConfig{MaxReceives: cmp.Or(c.MaxReceives, def.MaxReceives), Visibility: cmp.Or(c.Visibility, def.Visibility),
		RetryBase: cmp.Or(c.RetryBase, def.RetryBase), RetryMax: cmp.Or(c.RetryMax, def.RetryMax)}
}

// BufferPublishParams is a buffered dataset publish.
type BufferPublishParams struct {
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

// BufferPublish records that the current attempt wrote a batch for the sink, and queues the
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
func (dp *Plane) BufferPublish(ctx context.Context, p BufferPublishParams) (duplicate bool, err error) {
	if p.BatchURI == "" || len(p.BatchURI) > maxBatchURI {
		return false, &dispatch.InvalidError{Message: fmt.Sprintf("batch_uri is required and at most %d characters", maxBatchURI)}
	}
	if (p.RecordCount != nil && *p.RecordCount < 0) || (p.BatchSizeBytes != nil && *p.BatchSizeBytes < 0) {
		return false, &dispatch.InvalidError{Message: "record_count and batch_size_bytes must not be negative"}
	}
	if dp.cfg.Blob == nil {
		return false, &dispatch.InvalidError{Message: "buffered publishes need object storage: this server runs without --blob-url"}
	}
	key, err := dp.cfg.Blob.Key(p.BatchURI)
	if err != nil {
		return false, &dispatch.InvalidError{Message: fmt.Sprintf("batch_uri: %v", err)}
	}
	err = dp.d.Update(ctx, store.LockSet{Tasks: []string{p.TaskID}}, func(tx store.Tx, c *dispatch.Work) error {
		duplicate = false
		t, err := dp.d.LockAttempt(ctx, tx, p.Fence)
		if err != nil {
			return err
		}
		// Read for its tenant, which never changes: outside the transaction, so as not to lock it.
		job, err := dp.d.JobRef(ctx, t.JobID)
		if err != nil {
			return err
		}
		ds, err := dp.batchDataset(ctx, tx, job.Tenant, t, key, p)
		if err != nil {
			return err
		}
		if !writesBuffered(t, ds.UUID) {
			return &dispatch.ForbiddenError{Message: fmt.Sprintf("dataset %q is not an output of this task's job: only tasks of the pipeline job "+
				"that publishes a buffered dataset may publish batches into it", datasetLabel(ds))}
		}
		if gone, err := intake.RolledBack(ctx, tx, job.Tenant, t); err != nil {
			return err
		} else if gone != nil {
			return &dispatch.ConflictError{Code: "pipeline_version_rolled_back", Message: fmt.Sprintf(
				"version %s of pipeline %q was rolled back: what its tasks write is not loaded; nothing was recorded", gone.Version, gone.Pipeline)}
		}
		version := pinnedVersion(t, ds.UUID)
		switch {
		case p.DatasetVersion != "" && p.DatasetVersion != version:
			return &dispatch.ConflictError{Code: "dataset_version_conflict", Message: fmt.Sprintf(
				"dataset_version %q is not the version of dataset %q this task writes (%s, current when the task was created); nothing was recorded",
				p.DatasetVersion, datasetLabel(ds), version)}
		case version != ds.CurrentVersion:
			return &dispatch.ConflictError{Code: "dataset_version_not_current", Message: fmt.Sprintf(
				"this task writes version %s of dataset %q, which is no longer its current version (%s: its outputs were reset, "+
					"or its current version was switched, since the task was created); nothing was recorded",
				version, datasetLabel(ds), ds.CurrentVersion)}
		}
		rec := &store.BufferPublish{TaskID: t.ID, Attempt: t.Attempt, BatchURI: dp.cfg.Blob.URI(key), JobID: t.JobID,
			Tenant: job.Tenant, DatasetUUID: ds.UUID, DatasetVersion: version,
			RecordCount: p.RecordCount, ContentType: p.ContentType, BatchSizeBytes: p.BatchSizeBytes,
			DedupeScope: p.DedupeScope, CreatedAt: c.Now(), State: store.BufferQueued, VisibleAt: c.Now()}
		ok, err := tx.BufferPublishInsert(ctx, rec)
		if err != nil || !ok {
			duplicate = !ok
			return err
		}
		c.Outbox(&store.OutboxMessage{Topic: store.TopicBufferBatch, Key: ds.UUID, Payload: bufferBatchMessage(rec),
			AvailableAt: c.Now(), CreatedAt: c.Now()})
		c.Signal(&dp.sinks)
		return nil
	})
	return duplicate, err
}

// batchDataset checks that key is under the attempt's own prefix for a buffered dataset of tenant,
// and returns that dataset. The prefix is BatchPrefix: buffers/{dataset}/{task_id}/{attempt}/,
// {dataset} being the dataset's uuid or name. The shorter buffers/{task_id}/{attempt}/ is accepted
// too when the body names the dataset (dataset_uuid, or its name as dedupe_scope), as the
// task-scoped dialect's own example does.
func (dp *Plane) batchDataset(ctx context.Context, tx store.Tx, tenant string, t *store.Task, key string,
	p BufferPublishParams) (*store.Dataset, error) {
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
				dp.cfg.Blob.URI(blob.BatchPrefix("{dataset}", t.ID, t.Attempt)) + "...)"}
		}
	}
	if ref == "" || strings.HasSuffix(key, "/") {
		return nil, &dispatch.InvalidError{Message: fmt.Sprintf("batch_uri must be an object under the task's own prefix %s",
			dp.cfg.Blob.URI(blob.BatchPrefix("{dataset}", t.ID, t.Attempt)))}
	}
	ds, err := dp.findDataset(ctx, tx, tenant, ref)
	switch {
	case errors.Is(err, ErrDatasetNotFound):
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

// pinnedVersion is the version of dataset datasetUUID that t's route pins among its outputs: the
// version its batches are of.
func pinnedVersion(t *store.Task, datasetUUID string) string {
	if r := dispatch.DecodeRoute(t); r != nil {
		for _, o := range r.Outputs {
			if o.DatasetUUID == datasetUUID {
				return o.DatasetVersion
			}
		}
	}
	return ""
}

// datasetLabel names a dataset in a message: by its name, or its uuid when it has none.
func datasetLabel(ds *store.Dataset) string {
	if ds.Name != "" {
		return ds.Name
	}
	return ds.UUID
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

// SinkMessage is a Buffer Queue message claimed by a sink: the message itself, and what the sink
// needs to load it, all from trusted records.
type SinkMessage struct {
	ID           int64           // the publish record's id
	ReceiveCount int             // this claim included; also the receipt FailBatch checks
	VisibleUntil time.Time       // the message is the claimer's until then
	Message      json.RawMessage // the buffer_batch message
	Tenant       string
	BatchURI     string
	Dataset      SinkDataset
}

// WireSinkMessages renders claimed messages as a sink receives them, over the internal listener
// (/internal/sink/claim) or in the same process; never nil.
func WireSinkMessages(msgs []*SinkMessage) []wire.SinkMessage {
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

// SinkDataset is the dataset a sink message loads into.
type SinkDataset struct {
	UUID         string
	Name         string
	Schema       *pipeline.Schema
	FilterFields []string
}

// ClaimBatchesParams asks for Buffer Queue messages.
type ClaimBatchesParams struct {
	Max        int           // at most this many; default 1, at most 100
	Visibility time.Duration // how long they stay the claimer's; default BufferConfig.Visibility, at most 1 h
	ID         int64         // only this message (after a wake-up naming it), when > 0
	Wait       time.Duration // wait up to this long for one when none is ready
}

// ClaimBatches claims Buffer Queue messages for a sink: each receive counts, and the message is
// invisible to other sinks until VisibleUntil. A message that was already received MaxReceives
// times without being committed (its sinks died, or failed it) is dead-lettered instead, and so is
// one whose batch is of a dataset version that is no longer current (queued before a cutover, or
// published while a reset_outputs deploy committed): it is never handed out.
func (dp *Plane) ClaimBatches(ctx context.Context, p ClaimBatchesParams) ([]*SinkMessage, error) {
	cfg := dp.cfg.Buffer.withDefaults()
	p.Max = min(cmp.Or(p.Max, 1), 100)
	p.Visibility = min(cmp.Or(p.Visibility, cfg.Visibility), time.Hour)
	if p.Max < 0 || p.Visibility < 0 || p.Wait < 0 {
		return nil, &dispatch.InvalidError{Message: "max, visibility and wait must not be negative"}
	}
	deadline := dp.clock.Now().Add(p.Wait)
	for {
		woken := dp.sinks.Wait()
		msgs, err := dp.claimBatches(ctx, p, cfg)
		if err != nil || len(msgs) > 0 || p.ID > 0 {
			return msgs, err
		}
		left := deadline.Sub(dp.clock.Now())
		if left <= 0 {
			return nil, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-woken:
		case <-dp.clock.After(min(left, time.Second)): // publishes committed by other replicas
		}
	}
}

func (dp *Plane) claimBatches(ctx context.Context, p ClaimBatchesParams, cfg BufferConfig) ([]*SinkMessage, error) {
	var out []*SinkMessage
	err := dp.d.UpdateAlone(ctx, store.LockSet{}, func(tx store.Tx, c *dispatch.Work) error {
		out = nil
		recs, err := tx.BufferPublishListClaimable(ctx, store.BufferPublishListClaimableParams{Now: c.Now(), ID: p.ID, Limit: p.Max})
		if err != nil {
			return err
		}
		uuids := make([]string, 0, len(recs))
		for _, r := range recs {
			uuids = append(uuids, r.DatasetUUID)
		}
		datasets, err := tx.DatasetGetMany(ctx, uniq(uuids))
		if err != nil {
			return err
		}
		byUUID := make(map[string]*store.Dataset, len(datasets))
		for _, x := range datasets {
			byUUID[x.UUID] = x
		}
		for _, r := range recs {
			ds := byUUID[r.DatasetUUID]
			var sd SinkDataset
			if ds != nil {
				sd = SinkDataset{UUID: ds.UUID, Name: ds.Name}
				_ = json.Unmarshal(ds.FilterFields, &sd.FilterFields)
				if len(ds.Schema) > 0 {
					sd.Schema = &pipeline.Schema{}
					_ = json.Unmarshal(ds.Schema, sd.Schema)
				}
			}
			switch {
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
				out = append(out, &SinkMessage{ID: r.ID, ReceiveCount: r.ReceiveCount, VisibleUntil: r.VisibleAt,
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

// staleBatch is the last_error of a batch dead-lettered because its version is no longer the
// dataset's current one.
func staleBatch(r *store.BufferPublish, ds *store.Dataset) string {
	return fmt.Sprintf("discarded, not loaded: the batch is of dataset version %s, which is no longer the dataset's current version (%s)",
		r.DatasetVersion, ds.CurrentVersion)
}

// BatchLoaded is what a sink's load of a batch did.
type BatchLoaded struct {
	Cursor   int64            // the dataset's cursor of the rows it added; 0 when it added none
	Inserted int              // rows that were new
	Facets   map[string][]any // per filter field, the values among the new rows (a field left out may have any)
}

// ErrBatchNotClaimed: the message is not the caller's to fail (a later receive took it over, or
// it is settled).
var ErrBatchNotClaimed = errors.New("the buffer batch is not claimed by this receive")

// CommitBatch records that a sink loaded message id and, when the load added rows, emits the
// dataset event of its new cursor in the same transaction, of the batch's dataset version, which
// routing turns into consumer tasks while that version is current. Any receive may commit, even
// a late one whose visibility ran out, or one of a message dead-lettered meanwhile: a load
// happens once (the data database keeps a ledger of loaded batches), so a commit only ever
// reports what is true. A message already committed is not an error.
func (dp *Plane) CommitBatch(ctx context.Context, id int64, res BatchLoaded) error {
	if res.Cursor < 0 || res.Inserted < 0 || (res.Cursor == 0) != (res.Inserted == 0) {
		return &dispatch.InvalidError{Message: "cursor and inserted must both be positive, or both 0 for a batch that added no rows"}
	}
	return dp.d.UpdateAlone(ctx, store.LockSet{}, func(tx store.Tx, c *dispatch.Work) error {
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
		return dp.emitBatchEvent(ctx, tx, c, r, res)
	})
}

// emitBatchEvent stores the dataset event of a committed batch, of the batch's version, and queues
// it for routing, which drops it unless that version is current.
func (dp *Plane) emitBatchEvent(ctx context.Context, tx store.Tx, c *dispatch.Work, r *store.BufferPublish, res BatchLoaded) error {
	ds, err := tx.DatasetGetMany(ctx, []string{r.DatasetUUID})
	if err != nil || len(ds) == 0 {
		return err
	}
	cursor := res.Cursor
	e := &store.DatasetEvent{DedupeKey: "buffer:" + strconv.FormatInt(r.ID, 10), JobID: r.JobID, TaskID: r.TaskID,
		Attempt: r.Attempt, DatasetUUID: r.DatasetUUID, DatasetVersion: r.DatasetVersion, Cursor: &cursor, CreatedAt: c.Now()}
	if _, err := tx.DatasetEventInsertMany(ctx, []*store.DatasetEvent{e}); err != nil || e.ID == 0 {
		return err
	}
	intake.Queue(c, &intake.Routed{Tenant: r.Tenant, EventID: e.ID, TaskID: r.TaskID, Facets: res.Facets,
		Event: report.Event{DatasetUUID: e.DatasetUUID, DatasetVersion: e.DatasetVersion, Cursor: e.Cursor}})
	c.Signal(&dp.routing)
	return nil
}

// FailBatch records that a sink could not load message id, received as receipt, for reason: it
// becomes visible again after a doubling delay, or is dead-lettered once it was received
// MaxReceives times, or at once when its batch is of a dataset version that is no longer current
// (a retry could only dead-letter it at its claim). dead reports the latter two.
func (dp *Plane) FailBatch(ctx context.Context, id int64, receipt int, reason string) (dead bool, err error) {
	cfg := dp.cfg.Buffer.withDefaults()
	if reason == "" {
		return false, &dispatch.InvalidError{Message: "error is required"}
	}
	err = dp.d.UpdateAlone(ctx, store.LockSet{}, func(tx store.Tx, c *dispatch.Work) error {
		dead = false
		r, err := tx.BufferPublishGet(ctx, id)
		if err != nil {
			return batchNotFound(err)
		}
		if r.State != store.BufferQueued || r.ReceiveCount != receipt {
			return ErrBatchNotClaimed
		}
		r.LastError = truncate(reason, 4000)
		ds, err := tx.DatasetGetMany(ctx, []string{r.DatasetUUID})
		if err != nil {
			return err
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

// ErrBatchNotFound: no Buffer Queue message has that id (for the tenant, where one is named).
var ErrBatchNotFound = errors.New("buffer batch not found")

func batchNotFound(err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return ErrBatchNotFound
	}
	return err
}

// BatchDeadLetters lists the dead-lettered batches of a tenant's dataset (named or by uuid), oldest
// first, with id > after.
func (dp *Plane) BatchDeadLetters(ctx context.Context, tenant, dataset string, after int64, limit int) ([]*store.BufferPublish, error) {
	ds, err := dp.findDataset(ctx, dp.store, tenant, dataset)
	if err != nil {
		return nil, err
	}
	return dp.store.BufferPublishListDeadLetters(ctx, store.BufferPublishListDeadLettersParams{
		DatasetUUID: ds.UUID, AfterID: after, Limit: min(cmpOr(limit, 100), 1000),
	})
}

// RetryBatch puts a dead-lettered batch of a tenant's dataset back on the Buffer Queue with a fresh
// receive budget. A batch of a version that is no longer the dataset's current one (such as those
// a reset_outputs deploy discarded) is refused with a *dispatch.ConflictError: it can no longer
// be loaded.
func (dp *Plane) RetryBatch(ctx context.Context, tenant, dataset string, id int64) (*store.BufferPublish, error) {
	ds, err := dp.findDataset(ctx, dp.store, tenant, dataset)
	if err != nil {
		return nil, err
	}
	var r *store.BufferPublish
	err = dp.d.UpdateAlone(ctx, store.LockSet{}, func(tx store.Tx, c *dispatch.Work) error {
		if r, err = tx.BufferPublishGet(ctx, id); err != nil {
			return batchNotFound(err)
		}
		if r.DatasetUUID != ds.UUID || r.Tenant != tenant {
			return ErrBatchNotFound
		}
		if r.State != store.BufferDead {
			return &dispatch.InvalidError{Message: fmt.Sprintf("batch %d is %s, not dead-lettered", id, r.State)}
		}
		cur, err := tx.DatasetGetMany(ctx, []string{r.DatasetUUID})
		if err != nil {
			return err
		}
		if len(cur) == 1 && cur[0].CurrentVersion != r.DatasetVersion {
			return &dispatch.ConflictError{Code: "dataset_version_not_current", Message: fmt.Sprintf(
				"batch %d is of dataset version %s, which is no longer the dataset's current version (%s): it can no longer be loaded; "+
					"publish its rows again from a task of the current version", id, r.DatasetVersion, cur[0].CurrentVersion)}
		}
		r.State, r.ReceiveCount, r.VisibleAt, r.FinishedAt = store.BufferQueued, 0, c.Now(), time.Time{}
		c.Signal(&dp.sinks)
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
