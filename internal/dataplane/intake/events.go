package intake

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/report"
	"github.com/baton-dev/baton/internal/store"
)

var partitionKey = regexp.MustCompile(`^(\d+)-(\d+)$`)

// validateEvents checks events and turns them into rows of task t's attempt.
func validateEvents(t *store.Task, attempt int, events []report.Event, now time.Time) ([]*store.DatasetEvent, error) {
	rows := make([]*store.DatasetEvent, len(events))
	for i, e := range events {
		bad := func(format string, args ...any) error {
			return &dispatch.InvalidError{Message: fmt.Sprintf("events[%d]: ", i) + fmt.Sprintf(format, args...)}
		}
		switch {
		case e.DatasetUUID == "":
			return nil, bad("dataset_uuid is required")
		case e.DatasetVersion == "":
			return nil, bad("dataset_version is required")
		case e.Cursor == nil && e.PartitionKey == "":
			return nil, bad("an event needs a cursor or a partition_key")
		}
		if e.PartitionKey != "" {
			m := partitionKey.FindStringSubmatch(e.PartitionKey)
			if m == nil {
				return nil, bad("partition_key must be \"start-end\", got %q", e.PartitionKey)
			}
			start, _ := strconv.ParseInt(m[1], 10, 64)
			end, _ := strconv.ParseInt(m[2], 10, 64)
			if start > end || (e.Start != nil && *e.Start != start) || (e.End != nil && *e.End != end) {
				return nil, bad("partition_key %q does not match start %v and end %v", e.PartitionKey, deref(e.Start), deref(e.End))
			}
			// The bounds are the key's, given or not: one partition is one event either way.
			e.Start, e.End = &start, &end
		} else if e.Start != nil || e.End != nil {
			return nil, bad("start and end belong to a partitioned event (with partition_key)")
		}
		parts := []any{t.ID, e.DatasetUUID, e.DatasetVersion, e.Cursor, e.PartitionKey, e.Start, e.End}
		if e.Staged != nil {
			// A replace commit: a later attempt's commit of the partition is a new event, its
			// own attempt's report again the same one.
			parts = append(parts, attempt)
		}
		key, _ := json.Marshal(parts)
		sum := sha256.Sum256(key)
		rows[i] = &store.DatasetEvent{DedupeKey: hex.EncodeToString(sum[:]), JobID: t.JobID, TaskID: t.ID, Attempt: attempt,
			DatasetUUID: e.DatasetUUID, DatasetVersion: e.DatasetVersion, Cursor: e.Cursor, PartitionKey: e.PartitionKey,
			Start: e.Start, End: e.End, CreatedAt: now}
	}
	return rows, nil
}

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

// Record stores upstream events reported mid-task by the current attempt f names (the internal
// and task-scoped dialects' events): they are checked (CheckEvents, before the transaction), then
// stored under the attempt's lock, each new one queued for routing (RecordEvents). Events are
// idempotent: a repeat is accepted and stored once. It returns how many were new.
func (in *Intake) Record(ctx context.Context, f dispatch.Fence, events []report.Event) (int, error) {
	events, err := in.CheckEvents(ctx, f, events)
	if err != nil {
		return 0, fmt.Errorf("task %s: check events: %w", f.TaskID, err)
	}
	var n int
	err = in.d.Update(ctx, store.LockSet{Tasks: []string{f.TaskID}}, func(tx store.Tx, w *dispatch.Work) error {
		t, err := in.d.LockAttempt(ctx, tx, f)
		if err != nil {
			return fmt.Errorf("task %s: lock attempt %d: %w", f.TaskID, f.Attempt, err)
		}
		if n, err = in.RecordEvents(ctx, tx, w, t, events); err != nil {
			return fmt.Errorf("task %s attempt %d: record events: %w", t.ID, t.Attempt, err)
		}
		return nil
	})
	return n, err
}

// RecordEvents stores the events of t's current attempt and queues each new one for routing, in
// the caller's transaction: an event is routed exactly when it is stored. Every event must name a
// dataset of the task's tenant; otherwise none is stored. It returns how many events were new.
func (in *Intake) RecordEvents(ctx context.Context, tx store.Tx, c *dispatch.Work, t *store.Task, events []report.Event) (int, error) {
	rows, err := validateEvents(t, t.Attempt, events, c.Now())
	if err != nil {
		return 0, err
	}
	// Read for its tenant, which never changes: outside the transaction, so as not to lock it.
	job, err := in.d.JobRef(ctx, t.JobID)
	if err != nil {
		return 0, fmt.Errorf("job %s: %w", t.JobID, err)
	}
	if err := ownDatasets(ctx, tx, job.Tenant, events); err != nil {
		return 0, err
	}
	// A task of a rolled-back pipeline version reports into the void: its events are stored, for
	// the audit, and neither commit a partition nor are routed (see Rollback).
	if gone, err := RolledBack(ctx, tx, job.Tenant, t); err != nil {
		return 0, err
	} else if gone != nil {
		return tx.DatasetEventInsertMany(ctx, rows)
	}
	// A replace output's partition is committed first: its event is stored and queued below,
	// in the same transaction, so that the event exists exactly when the commit does.
	if err := in.commitPartitions(ctx, tx, c, t, job.Tenant, events); err != nil {
		return 0, err
	}
	n, err := tx.DatasetEventInsertMany(ctx, rows)
	if err != nil {
		return n, fmt.Errorf("store %d dataset events: %w", len(rows), err)
	}
	if n == 0 {
		return 0, nil
	}
	for i, e := range rows {
		if e.ID == 0 {
			continue // a repeat: routed when it was first stored
		}
		re := Routed{Tenant: job.Tenant, EventID: e.ID, TaskID: t.ID, Event: report.Event{
			DatasetUUID: e.DatasetUUID, DatasetVersion: e.DatasetVersion, Cursor: e.Cursor, PartitionKey: e.PartitionKey,
			Start: e.Start, End: e.End}}
		if events[i].Staged != nil {
			re.Commit = t.ID + "/" + strconv.Itoa(t.Attempt)
		}
		Queue(c, &re)
	}
	c.Signal(in.routing) // wakes the router once committed
	return n, nil
}

// ownDatasets checks that every event names a dataset of tenant. Another tenant's dataset and a
// dataset that does not exist get the same answer, so that the refusal says nothing about other
// tenants.
func ownDatasets(ctx context.Context, st store.Reader, tenant string, events []report.Event) error {
	uuids := make([]string, 0, len(events))
	for _, e := range events {
		uuids = append(uuids, e.DatasetUUID)
	}
	slices.Sort(uuids)
	uuids = slices.Compact(uuids)
	mine := make(map[string]bool, len(uuids))
	for chunk := range slices.Chunk(uuids, 500) {
		ds, err := st.DatasetGetMany(ctx, chunk)
		if err != nil {
			return fmt.Errorf("the events' datasets: %w", err)
		}
		for _, x := range ds {
			mine[x.UUID] = x.Tenant == tenant
		}
	}
	for i, e := range events {
		if !mine[e.DatasetUUID] {
			return &dispatch.InvalidError{Message: fmt.Sprintf("events[%d]: dataset_uuid %q: this tenant has no such dataset", i, e.DatasetUUID)}
		}
	}
	return nil
}

// RolledBack returns the pipeline version of pipeline task t when a rollback replaced it (and it
// has not been made active again), or its build was abandoned: nothing its tasks produce from
// then on gets through. Nil for any other task.
func RolledBack(ctx context.Context, tx store.Tx, tenant string, t *store.Task) (*store.PipelineVersionKey, error) {
	r := dispatch.DecodeRoute(t)
	if r == nil || r.Job.DAGName == "" {
		return nil, nil
	}
	k := store.PipelineVersionKey{Tenant: tenant, Pipeline: r.Job.DAGName, Version: r.Job.Version}
	state, err := tx.PipelineVersionState(ctx, k)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("the state of pipeline %s version %s: %w", k.Pipeline, k.Version, err)
	}
	if state != store.VersionRolledBack && state != store.VersionAbandoned {
		return nil, nil
	}
	return &k, nil
}
