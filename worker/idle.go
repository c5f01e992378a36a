package worker

import (
	"sync"
	"time"
)

// WithIdleTimeout makes Run return nil once the worker has had nothing to do for d: no task
// running, none started or finished for d, and a claim found the queues empty. 0 stops as soon as
// a claim finds them empty with nothing running: a batch worker that drains its queues and
// exits, for a Kubernetes Job or an autoscaler to reclaim. It overrides the jobs' idle_timeout
// (WithJobIdleTimeout). Claims long-poll, so Run returns within one poll wait (WithPollWait) of
// the timeout; claims already waiting then finish, and what they claim still runs.
func WithIdleTimeout(d time.Duration) Option {
	return func(c *config) { c.idleTimeout = &d }
}

// WithJobIdleTimeout makes Run follow the idle_timeout of the pipeline jobs whose tasks the
// worker claims, as WithIdleTimeout(idle_timeout) would: the newest claim's job decides. Until
// the first claim, and after a claim whose job sets none (never, or a task of a plain job), the
// worker stays. `baton worker` does this unless --idle-timeout says otherwise.
func WithJobIdleTimeout() Option { return func(c *config) { c.jobIdle = true } }

// idleness decides when a worker has been idle long enough to stop (WithIdleTimeout,
// WithJobIdleTimeout).
type idleness struct {
	fixed      *time.Duration
	followJobs bool
	now        func() time.Time
	stop       chan struct{} // closed once idle

	mu      sync.Mutex
	job     *time.Duration // the newest claim's job's idle_timeout
	running int
	busyAt  time.Time // when Run started, or an attempt last started or ended
	stopped bool
}

func newIdleness(cfg config, now func() time.Time) *idleness {
	return &idleness{fixed: cfg.idleTimeout, followJobs: cfg.jobIdle, now: now, busyAt: now(), stop: make(chan struct{})}
}

// timeout is the idle timeout in force; false when the worker stays.
func (i *idleness) timeout() (time.Duration, bool) {
	switch {
	case i.fixed != nil:
		return *i.fixed, true
	case i.followJobs && i.job != nil:
		return *i.job, true
	}
	return 0, false
}

// started records an attempt of t starting.
func (i *idleness) started(t *Task) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.running++
	i.busyAt = i.now()
	i.job = nil
	if p := t.Pipeline; p != nil && p.Job.IdleTimeoutSeconds != nil {
		d := seconds(*p.Job.IdleTimeoutSeconds)
		i.job = &d
	}
}

// finished records an attempt ending.
func (i *idleness) finished() {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.running--
	i.busyAt = i.now()
}

// empty records a claim that found nothing, and stops the worker when it has been idle for the
// timeout in force. It reports whether the worker is stopping.
func (i *idleness) empty() bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.stopped {
		return true
	}
	d, ok := i.timeout()
	if !ok || i.running > 0 || i.now().Sub(i.busyAt) < d {
		return false
	}
	i.stopped = true
	close(i.stop)
	return true
}

// idleTimeout reports the timeout that stopped the worker, for its log line.
func (i *idleness) idleTimeout() time.Duration {
	i.mu.Lock()
	defer i.mu.Unlock()
	d, _ := i.timeout()
	return d
}
