package store

import (
	"context"
	"encoding/json"
	"time"
)

// HeldRouting is the routing of one dataset event to one pipeline job that backpressure held
// instead of creating the job's task (docs/contracts/pipelines.md, "Backpressure"). It is released
// in ID order, so in the order the events were routed.
type HeldRouting struct {
	ID       int64
	Tenant   string
	Pipeline string
	// Version is the pipeline version whose consumer the event was routed to: the task is built
	// from its spec when the routing is released.
	Version    string
	Job        string // the job's name in the pipeline
	InputIndex int    // the input the event fired
	// Key is the idempotency key of the task the routing becomes.
	Key string
	// Event is the routed event as the router read it from the outbox; for a routing that
	// coalesced several, the event that covers them all.
	Event json.RawMessage
	// Events is how many events the routing covers: 1, or more once backpressure_mode coalesce
	// collapsed later events of its scope into it (0 is stored as 1).
	Events int
	HeldAt time.Time
	// PausedSince is when the job's current pause began: the PausedSince of the job's held
	// routings when there are some, else HeldAt.
	PausedSince time.Time
}

// HeldSummary describes the held routings of one pipeline job.
type HeldSummary struct {
	Tenant       string
	Pipeline     string
	Job          string
	Held         int       // routings
	Events       int       // the events they cover
	OldestHeldAt time.Time // the oldest routing still held
	PausedSince  time.Time // the earliest PausedSince among them
}

// HeldSummaryParams selects the pipeline jobs HeldRoutingSummary describes: one tenant's
// pipeline, or every job that holds routings when Tenant is empty.
type HeldSummaryParams struct {
	Tenant   string
	Pipeline string
}

// Backlog is what backpressure measures of one pipeline job: its tasks that wait to run.
type Backlog struct {
	// Depth counts its pending tasks, ready or backing off.
	Depth int
	// OldestReadyAt is the earliest available_at among its pending tasks that are ready at the
	// time asked (zero when none is).
	OldestReadyAt time.Time
}

// PipelineJobBacklogParams is the input of BackpressureReader.PipelineJobBacklog.
type PipelineJobBacklogParams struct {
	// Job is the pipeline job whose backlog is measured.
	Job PipelineJobKey
	// Queue is the queue the job's tasks are created on: only its pending tasks are read.
	Queue string
	// Now is the time the backlog is measured at: a pending task available at or before it is
	// ready.
	Now time.Time
}

// BackpressureReader reads held routings and pipeline jobs' backlogs.
type BackpressureReader interface {
	// PipelineJobBacklog measures the backlog of pipeline job p.Job at p.Now: its pending tasks
	// on p.Queue, the queue its tasks are created on. It reads the queue's pending tasks only,
	// never the job's history.
	PipelineJobBacklog(ctx context.Context, p PipelineJobBacklogParams) (Backlog, error)
	// HeldRoutingSummary describes the held routings of each pipeline job p selects that holds
	// some, ordered by tenant, pipeline and job.
	HeldRoutingSummary(ctx context.Context, p HeldSummaryParams) ([]*HeldSummary, error)
	// HeldRoutingList lists up to limit held routings of one pipeline job, oldest (lowest ID)
	// first.
	HeldRoutingList(ctx context.Context, k PipelineJobKey, limit int) ([]*HeldRouting, error)
	// HeldRoutingNewest returns the newest (highest ID) held routing of one pipeline job, or
	// ErrNotFound.
	HeldRoutingNewest(ctx context.Context, k PipelineJobKey) (*HeldRouting, error)
	// HeldRoutingByKey returns the newest held routing of one pipeline job with the given Key,
	// or ErrNotFound.
	HeldRoutingByKey(ctx context.Context, k PipelineJobKey, key string) (*HeldRouting, error)
}

// BackpressureWriter writes held routings, inside a Tx.
type BackpressureWriter interface {
	// HeldRoutingInsertMany stores routings and sets their IDs, increasing in the order given.
	HeldRoutingInsertMany(ctx context.Context, hs []*HeldRouting) error
	// HeldRoutingDelete deletes the held routings of ids and returns how many it deleted.
	HeldRoutingDelete(ctx context.Context, ids []int64) (int, error)
	// HeldRoutingCoalesce sets the Event and Events of the held routing h.ID (the routing
	// absorbed later events of its scope) and returns ErrNotFound when it is not held.
	HeldRoutingCoalesce(ctx context.Context, h *HeldRouting) error
}
