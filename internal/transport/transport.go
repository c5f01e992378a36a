// Package transport defines how task wake-ups travel from the server to workers over an external
// message system (Redis Streams, NATS JetStream), whose drivers live in its subpackages.
//
// A wake-up carries only a task id and its queue (docs/contracts/wakeup.md). It never decides
// anything: a worker that receives one claims the task by id, and the store's lease decides
// whether it runs. So a transport may lose, duplicate or reorder wake-ups and nothing breaks but
// latency; the server's reconciler re-publishes wake-ups for ready tasks that have none
// outstanding.
package transport

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"time"
)

// BufferQueue is the queue of Buffer Queue wake-ups: each names a buffered batch waiting for a
// sink by its message id (in place of a task id), which a sink then claims by id.
const BufferQueue = "baton.buffer"

// Wakeup is a wake-up to publish: task TaskID of queue Queue may be claimable.
type Wakeup struct {
	ID     int64 // the publisher's own id for the message (the outbox row); echoed in failures
	Queue  string
	TaskID string
}

// Delivery is a wake-up received by a consumer. Until it is acknowledged the transport counts it
// as outstanding and may deliver it again (to this or another consumer) once it has been idle
// long enough.
type Delivery interface {
	TaskID() string
	Queue() string
	// Ack settles the wake-up for good: call it once the task's outcome is committed, or once the
	// claim answered NotClaimed. Acknowledging twice, or a message the transport already dropped
	// (a flushed server), is not an error.
	Ack(ctx context.Context) error
	// InProgress tells the transport the task is still being worked on, postponing redelivery.
	InProgress(ctx context.Context) error
}

// Consumer receives wake-ups for a worker. A consumer is used by one goroutine at a time.
type Consumer interface {
	// Receive waits up to wait for wake-ups of the queues and returns at most max of them,
	// those of earlier queues first. It returns no deliveries and no error when wait passes with
	// none. It recreates whatever the transport lost (a flushed Redis, a deleted stream).
	Receive(ctx context.Context, queues []string, max int, wait time.Duration) ([]Delivery, error)
	Close() error
}

// Transport is the server's side of a wake-up transport.
type Transport interface {
	// Name is the --transport value: "redis" or "nats".
	Name() string
	// Publish publishes msgs and returns the ones it could not publish, by ID; every other
	// message counts as published. Each call returns within the context's deadline.
	Publish(ctx context.Context, msgs []Wakeup) (failed map[int64]error)
	// Outstanding counts the wake-ups of queue that were published and not yet acknowledged
	// (queued or delivered).
	Outstanding(ctx context.Context, queue string) (int, error)
	// Reclaim takes over, from any consumer, up to max wake-ups delivered at least minIdle ago
	// and never acknowledged (their consumer is presumably dead), so the caller can settle them.
	// A transport that redelivers by itself (NATS's ack wait) returns none.
	Reclaim(ctx context.Context, minIdle time.Duration, max int) ([]Delivery, error)
	// NewConsumer returns a consumer named name (unique per worker process) on the same server.
	NewConsumer(name string) Consumer
	Close() error
}

// MessageIDs is implemented by a transport whose wake-ups have ids that mean something to
// workers outside Baton's own SDK: a Redis stream entry id, which clients of the stream-worker
// dialect are handed with their claim and may acknowledge themselves.
type MessageIDs interface {
	// MessageIDs returns the ids of the latest outstanding wake-ups of the tasks of queue, by
	// task id; tasks with none are left out.
	MessageIDs(ctx context.Context, queue string, taskIDs []string) (map[string]string, error)
	// Settle settles the wake-ups refs name (as Delivery.Ack would): their tasks' outcomes are
	// committed. An id the transport does not know, or no longer has, is not an error.
	Settle(ctx context.Context, refs []WakeupRef) error
}

// WakeupRef names a wake-up message a worker was handed: its queue, its task and its id.
type WakeupRef struct{ Queue, TaskID, ID string }

// ConsumerName names a consumer of this process for role (such as "sink"): unique per process.
func ConsumerName(role string) string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%s-%d", role, cmp.Or(host, "host"), os.Getpid())
}
