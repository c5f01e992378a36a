package bench

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// ref names a task as its producer does: job id and taskId.
type ref struct{ job, key string }

// start is when a worker got a task (claim answered, handler called, push received) and which
// parents released it.
type start struct {
	at      time.Time
	parents []string
}

// recorder collects what the workers of one phase observe, client-side. It is done once every
// task of the phase has had its successful completion acknowledged by the server.
type recorder struct {
	target int
	done   chan struct{}

	mu      sync.Mutex
	acked   map[ref]time.Time // completion acknowledged (2xx answer received)
	starts  map[ref]start
	ids     map[string]ref // global task id → ref, for completions that name only the id
	claims  []time.Duration
	last    time.Time // the last acknowledgement
	errors  int
	lastErr error
}

func newRecorder(target int) *recorder {
	return &recorder{target: target, done: make(chan struct{}), acked: make(map[ref]time.Time, target),
		starts: make(map[ref]start, target), ids: make(map[string]ref, target)}
}

// claimed records the duration of a claim request that returned a task.
func (r *recorder) claimed(d time.Duration) {
	r.mu.Lock()
	r.claims = append(r.claims, d)
	r.mu.Unlock()
}

// started records that a worker got task id (job, key) at at.
func (r *recorder) started(id string, t ref, parents []string, at time.Time) {
	r.mu.Lock()
	r.starts[t] = start{at: at, parents: parents}
	r.ids[id] = t
	r.mu.Unlock()
}

// completed records the acknowledgement of task t's successful completion.
func (r *recorder) completed(t ref, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.acked[t]; dup {
		return // a report repeated after a lost answer
	}
	r.acked[t] = at
	if at.After(r.last) {
		r.last = at
	}
	if len(r.acked) == r.target {
		close(r.done)
	}
}

// completedID is completed for a task known by its global id, which started mapped.
func (r *recorder) completedID(id string, at time.Time) {
	r.mu.Lock()
	t, ok := r.ids[id]
	r.mu.Unlock()
	if ok {
		r.completed(t, at)
	}
}

// failed counts a request that failed; the worker retries or moves on.
func (r *recorder) failed(err error) {
	r.mu.Lock()
	r.errors++
	r.lastErr = err
	r.mu.Unlock()
}

func (r *recorder) ackedCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.acked)
}

// lastAck is when the last completion was acknowledged.
func (r *recorder) lastAck() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// claimLatency is the distribution of claim durations, nil if no claim was timed.
func (r *recorder) claimLatency() *Latency {
	r.mu.Lock()
	defer r.mu.Unlock()
	return percentiles(r.claims)
}

// handoffLatency is, for every task with parents, the time from the acknowledgement of its last
// parent's completion to the moment a worker got it; nil if no task has parents. A worker may get
// the child a hair before the parent's acknowledgement reaches its own worker (the server commits
// before it answers either); such a hand-off counts as zero.
func (r *recorder) handoffLatency() *Latency {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ds []time.Duration
	for t, s := range r.starts {
		if len(s.parents) == 0 {
			continue
		}
		var released time.Time
		for _, p := range s.parents {
			if at := r.acked[ref{t.job, p}]; at.After(released) {
				released = at
			}
		}
		if released.IsZero() {
			continue // a parent of an earlier phase: cannot happen, jobs do not span phases
		}
		ds = append(ds, max(s.at.Sub(released), 0))
	}
	return percentiles(ds)
}

func (r *recorder) errorCount() (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.errors, r.lastErr
}

// phaseRecorder is the recorder of the phase that runs now; workers outlive a phase.
type phaseRecorder struct{ p atomic.Pointer[recorder] }

func (p *phaseRecorder) cur() *recorder  { return p.p.Load() }
func (p *phaseRecorder) set(r *recorder) { p.p.Store(r) }

// Latency is a distribution of durations, in milliseconds.
type Latency struct {
	P50     float64 `json:"p50_ms"`
	P95     float64 `json:"p95_ms"`
	P99     float64 `json:"p99_ms"`
	Samples int     `json:"samples"`
}

// percentiles takes the nearest-rank percentiles of ds (reordering it); nil when it is empty.
func percentiles(ds []time.Duration) *Latency {
	if len(ds) == 0 {
		return nil
	}
	slices.Sort(ds)
	rank := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(ds)))) - 1
		i = min(max(i, 0), len(ds)-1)
		return round(float64(ds[i])/float64(time.Millisecond), 3)
	}
	return &Latency{P50: rank(0.50), P95: rank(0.95), P99: rank(0.99), Samples: len(ds)}
}
