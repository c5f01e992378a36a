package specs

import (
	"time"

	"github.com/baton-dev/baton/internal/pipeline"
	"github.com/baton-dev/baton/internal/store"
)

// Limits are a reactive job's backpressure fields: max_queue_depth (Depth) and max_queue_age
// (Age); zero is unset. A job with neither is never held.
type Limits struct {
	Depth int
	Age   time.Duration
	// Coalesce is backpressure_mode coalesce: an event of the scope of a held routing joins it.
	Coalesce bool
}

func (j *Job) Limits() Limits {
	if j == nil {
		return Limits{}
	}
	return Limits{Depth: j.MaxQueueDepth, Age: time.Duration(j.MaxQueueAgeSeconds * float64(time.Second)),
		Coalesce: j.BackpressureMode == pipeline.BackpressureCoalesce}
}

// Set reports whether the job has a limit at all.
func (l Limits) Set() bool { return l.Depth > 0 || l.Age > 0 }

// LowWater is the backlog below which held routings are released: half the depth, rounded up
// (so 1 for a depth of 1 or 2: released when the backlog is empty).
func (l Limits) LowWater() int { return (l.Depth + 1) / 2 }

// Aged reports whether the oldest ready task of b has waited max_queue_age or longer.
func (l Limits) Aged(b store.Backlog, now time.Time) bool {
	return l.Age > 0 && !b.OldestReadyAt.IsZero() && now.Sub(b.OldestReadyAt) >= l.Age
}

// Full reports whether a job that holds nothing must hold a new routing: its backlog has reached
// max_queue_depth, or its oldest ready task max_queue_age.
func (l Limits) Full(b store.Backlog, now time.Time) bool {
	return (l.Depth > 0 && b.Depth >= l.Depth) || l.Aged(b, now)
}

// Room is how many held routings a job that holds some may release now: none while its backlog
// is at or above the low-water mark or its oldest ready task is too old; else enough to fill the
// backlog back up to the depth (unbounded, -1, without a depth).
func (l Limits) Room(b store.Backlog, now time.Time) int {
	switch {
	case l.Aged(b, now):
		return 0
	case l.Depth == 0:
		return -1
	case b.Depth >= l.LowWater():
		return 0
	}
	return l.Depth - b.Depth
}
