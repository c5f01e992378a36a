// Package intake takes in what a worker reports of the data its attempt wrote: it checks dataset
// events and stores them, commits the partitions of replace outputs they name, registers published
// dataset versions, and queues each new event for routing — all inside the report's transaction,
// as the lifecycle core's hook.
package intake

import (
	"encoding/json"
	"strconv"

	"github.com/baton-dev/baton/internal/blob"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/report"
	"github.com/baton-dev/baton/internal/store"
)

// Intake is the data plane's part in workers' reports (dispatch.Hook).
type Intake struct {
	d    *dispatch.Dispatcher
	st   store.Store
	blob *blob.Store
	// routing is signalled by a transaction that queued dataset events for the router.
	routing *dispatch.Signal
}

var (
	_ dispatch.Hook         = (*Intake)(nil)
	_ dispatch.EventChecker = (*Intake)(nil)
)

// New returns the intake of d's reports. b is the object storage of replace outputs' staging
// folders and of published versions' files (nil: none); routing is signalled by each transaction
// that queues events for the router.
func New(d *dispatch.Dispatcher, b *blob.Store, routing *dispatch.Signal) *Intake {
	return &Intake{d: d, st: d.Store(), blob: b, routing: routing}
}

// Routed is a dataset event as the router reads it from the outbox.
type Routed struct {
	Tenant  string `json:"tenant"`
	EventID int64  `json:"event_id"`
	TaskID  string `json:"task_id"`
	// Facets, for a buffered batch, holds per filter field the values among its new rows: a
	// consumer whose where no row can match gets no task. A field left out may have any value.
	Facets map[string][]any `json:"facets,omitempty"`
	// CursorEnd is set on a held routing that coalesced the events of later cursors of the same
	// dataset version: the routing covers the cursors from Cursor to CursorEnd.
	CursorEnd *int64 `json:"cursor_end,omitempty"`
	// Commit names the attempt ("task_id/attempt") whose report committed the event's partition
	// of a replace output: each commit is a new update of the partition.
	Commit string `json:"commit,omitempty"`
	// Pipeline, Job and Update are set on an event a rollback queued again (see Rollback) or a
	// build routes again (see Builds): it is routed to that pipeline job only, of pipeline
	// version Version when set, as the update Update.
	Pipeline string `json:"pipeline,omitempty"`
	Job      string `json:"job,omitempty"`
	Version  string `json:"version,omitempty"`
	Update   string `json:"update,omitempty"`
	report.Event
}

// dedupeKey names the update an event reports: the same key routed twice makes one task per
// consuming job and pipeline version, however many times and by however many replicas it is
// delivered (see routingKey).
func (e *Routed) DedupeKey() string {
	if e.Update != "" {
		return e.Update
	}
	if e.PartitionKey != "" {
		key := "partition:" + e.DatasetUUID + ":" + e.DatasetVersion + ":" + e.PartitionKey
		if e.Commit != "" { // a replace commit rewrote the partition: its consumers run again
			key += ":commit:" + e.Commit
		}
		return key
	}
	return "cursor:" + e.DatasetUUID + ":" + e.DatasetVersion + ":" + strconv.FormatInt(*e.Cursor, 10)
}

// Queue queues e for the router in c's transaction. Call c.Signal with the routing signal once the
// transaction's events are queued.
func Queue(c *dispatch.Work, e *Routed) {
	payload, _ := json.Marshal(e)
	c.Outbox(&store.OutboxMessage{Topic: store.TopicDatasetEvent, Key: e.DatasetUUID, Payload: payload,
		AvailableAt: c.Now(), CreatedAt: c.Now()})
}
