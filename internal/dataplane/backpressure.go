package dataplane

import (
	"time"

	"github.com/baton-dev/baton/internal/pipeline"
	"github.com/baton-dev/baton/internal/store"
)

// limits are a reactive job's backpressure fields: max_queue_depth (Depth) and max_queue_age
// (Age); zero is unset. A job with neither is never held.
type limits struct {
	Depth int
	Age   time.Duration
	// Coalesce is backpressure_mode coalesce: an event of the scope of a held routing joins it.
	Coalesce bool
}

func (j *jobSpec) limits() limits {
	if j == nil {
		return limits{}
	}
	return limits{Depth: j.MaxQueueDepth, Age: time.Duration(j.MaxQueueAgeSeconds * float64(time.Second)),
		Coalesce: j.BackpressureMode == pipeline.BackpressureCoalesce}
}

// set reports whether the job has a limit at all.
func (l limits) set() bool { return l.Depth > 0 || l.Age > 0 }

// lowWater is the backlog below which held routings are released: half the depth, rounded up
// (so 1 for a depth of 1 or 2: released when the backlog is empty).
func (l limits) lowWater() int { return (l.Depth + 1) / 2 }

// aged reports whether the oldest ready task of b has waited max_queue_age or longer.
func (l limits) aged(b store.Backlog, now time.Time) bool {
	return l.Age > 0 && !b.OldestReadyAt.IsZero() && now.Sub(b.OldestReadyAt) >= l.Age
}

// full reports whether a job that holds nothing must hold a new routing: its backlog has reached
// max_queue_depth, or its oldest ready task max_queue_age.
func (l limits) full(b store.Backlog, now time.Time) bool {
	return (l.Depth > 0 && b.Depth >= l.Depth) || l.aged(b, now)
}

// room is how many held routings a job that holds some may release now: none while its backlog
// is at or above the low-water mark or its oldest ready task is too old; else enough to fill the
// backlog back up to the depth (unbounded, -1, without a depth).
func (l limits) room(b store.Backlog, now time.Time) int {
	switch {
	case l.aged(b, now):
		return 0
	case l.Depth == 0:
		return -1
	case b.Depth >= l.lowWater():
		return 0
	}
	return l.Depth - b.Depth
}
