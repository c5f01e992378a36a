// Package dispatch is Baton's core: one method per lifecycle transition, each a single store
// transaction that applies the rules of package lifecycle and appends its audit events and outbox
// messages, plus the reaper that times out abandoned leases.
package dispatch

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/jonboulle/clockwork"
	"go.opentelemetry.io/otel/trace"

	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/metrics"
	"github.com/baton-dev/baton/internal/store"
)

// Defaults are the server-wide timing and retry settings; a task's own fields override them.
type Defaults struct {
	HeartbeatInterval time.Duration // how often workers are told to heartbeat
	HeartbeatTimeout  time.Duration // the lease TTL; at least twice the interval
	MaxAttempts       int
	BackoffBase       time.Duration
	BackoffMax        time.Duration
	CancelGrace       time.Duration
}

// DefaultDefaults are the documented defaults (docs/lifecycle.md#defaults).
var DefaultDefaults = Defaults{
	HeartbeatInterval: 30 * time.Second,
	HeartbeatTimeout:  90 * time.Second,
	MaxAttempts:       3,
	BackoffBase:       10 * time.Second,
	BackoffMax:        10 * time.Minute,
	CancelGrace:       30 * time.Second,
}

// Config configures a Dispatcher. Zero fields take their defaults.
type Config struct {
	Clock  clockwork.Clock
	Logger *slog.Logger
	// Jitter returns a uniform sample in [0, 1) for the retry backoff.
	Jitter func() float64
	// MaxTasksPerJob caps a job's size; 0 means no cap. The producer contract's cap is 50.
	MaxTasksPerJob int
	Defaults       Defaults
	GroupCommit    GroupCommit
	// RetryFor is how long a transition is retried after transient database failures before
	// the caller gets ErrUnavailable; default DefaultRetryFor.
	RetryFor time.Duration
	// StoreWakeups says that workers find work in the store itself (the "store" transport):
	// then no task wake-up is written to the outbox, as nothing would read it; waiters in this
	// process and, on PostgreSQL, on other replicas (NOTIFY) are still woken.
	StoreWakeups bool
	// Metrics, when not nil, counts transitions, claims, group commits, retries, dead letters and
	// expiries.
	Metrics *metrics.Metrics
	// TracerProvider, when not nil, traces each transaction (a span per group commit and per
	// transaction of its own); nil traces nothing.
	TracerProvider trace.TracerProvider
	// Redact, when set, rewrites what a worker reports (an output, an error's message) before it
	// is stored: the server's redaction of the secrets it delivered.
	Redact func([]byte) []byte
}

// Validate reports a setting that cannot work.
func (c Config) Validate() error {
	d := c.Defaults
	switch {
	case d.HeartbeatInterval < 0, d.HeartbeatTimeout < 0, d.BackoffBase < 0, d.BackoffMax < 0, d.CancelGrace < 0, d.MaxAttempts < 0:
		return errors.New("dispatch: negative default")
	case d.HeartbeatTimeout > 0 && d.HeartbeatInterval > 0 && d.HeartbeatTimeout < 2*d.HeartbeatInterval:
		return errors.New("dispatch: heartbeat timeout must be at least twice the heartbeat interval")
	case d.BackoffMax > 0 && d.BackoffMax < d.BackoffBase:
		return errors.New("dispatch: backoff max below backoff base")
	case c.MaxTasksPerJob < 0:
		return errors.New("dispatch: negative task cap")
	}
	return nil
}

// Dispatcher applies the task lifecycle to a store.
type Dispatcher struct {
	store  store.Store
	clock  clockwork.Clock
	log    *slog.Logger
	jitter func() float64
	cfg    Config
	ready  notifier
	// hook is the data plane's part in reports of dataset events and versions (SetHook).
	hook   Hook
	commit *committer // nil: group commit is off
	// retryFor: see Config.RetryFor.
	retryFor time.Duration
	jobs     jobRefs // the jobs' immutable parts read so far

	// tracer traces transactions (trace.go); nil: tracing is off.
	tracer trace.Tracer
}

// New returns a dispatcher over st.
func New(st store.Store, cfg Config) (*Dispatcher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	def := DefaultDefaults
	cfg.Defaults = Defaults{
		HeartbeatInterval: cmp.Or(cfg.Defaults.HeartbeatInterval, def.HeartbeatInterval),
		HeartbeatTimeout:  cmp.Or(cfg.Defaults.HeartbeatTimeout, def.HeartbeatTimeout),
		MaxAttempts:       cmp.Or(cfg.Defaults.MaxAttempts, def.MaxAttempts),
		BackoffBase:       cmp.Or(cfg.Defaults.BackoffBase, def.BackoffBase),
		BackoffMax:        cmp.Or(cfg.Defaults.BackoffMax, def.BackoffMax),
		CancelGrace:       cmp.Or(cfg.Defaults.CancelGrace, def.CancelGrace),
	}
	if cfg.Defaults.HeartbeatTimeout < 2*cfg.Defaults.HeartbeatInterval {
		return nil, errors.New("dispatch: heartbeat timeout must be at least twice the heartbeat interval")
	}
	d := &Dispatcher{
		store:    st,
		clock:    cmp.Or[clockwork.Clock](cfg.Clock, clockwork.NewRealClock()),
		log:      cmp.Or(cfg.Logger, slog.Default()),
		jitter:   cfg.Jitter,
		cfg:      cfg,
		retryFor: cmp.Or(cfg.RetryFor, DefaultRetryFor),
	}
	if d.jitter == nil {
		d.jitter = rand.Float64
	}
	if cfg.TracerProvider != nil {
		d.tracer = cfg.TracerProvider.Tracer(tracerName)
	}
	if !cfg.GroupCommit.Off {
		d.commit = newCommitter(d, cfg.GroupCommit)
	}
	return d, nil
}

// Queued is the number of transitions waiting for a group commit (0 with group commit off).
func (d *Dispatcher) Queued() int {
	if d.commit == nil {
		return 0
	}
	return d.commit.queued()
}

// Store returns the dispatcher's store, for read-only views.
func (d *Dispatcher) Store() store.Store { return d.store }

// Metrics returns the server's metrics (Config.Metrics), possibly nil: every method of
// *metrics.Metrics accepts a nil receiver.
func (d *Dispatcher) Metrics() *metrics.Metrics { return d.cfg.Metrics }

// Defaults returns the effective server-wide defaults.
func (d *Dispatcher) Defaults() Defaults { return d.cfg.Defaults }

// now is the clock's time at the store's millisecond precision, so that what a transition
// returns equals what a later read returns.
func (d *Dispatcher) now() time.Time {
	return time.UnixMilli(d.clock.Now().UnixMilli()).UTC()
}

// heartbeatInterval is what a worker of t is told: the default, but never more than half the
// task's lease so that one lost heartbeat does not cost the lease.
func (d *Dispatcher) heartbeatInterval(t *store.Task) time.Duration {
	return min(d.cfg.Defaults.HeartbeatInterval, t.HeartbeatTimeout/2)
}

// Event types of the audit log (docs/contracts/producer.md).
const (
	EventJobCreated        = "Job Created"
	EventJobTasksAdded     = "Job Tasks Added"
	EventJobFailure        = "Job Failure Detected"
	EventJobCompleted      = "Job Completed"
	EventJobCanceled       = "Job Canceled"
	EventJobResumed        = "Job Resumed"
	EventTaskPending       = "Task Pending"
	EventTaskStarted       = "Task Processing Started"
	EventTaskHeartbeat     = "Task Heartbeat"
	EventTaskRetrying      = "Task Processing Failed"
	EventTaskCompleted     = "Task Completed"
	EventTaskFailed        = "Task Failed"
	EventTaskTimeout       = "Task Timeout"
	EventTaskCanceled      = "Task Canceled"
	EventTaskSkipped       = "Task Skipped"
	heartbeatEventInterval = 5 * time.Minute // Task Heartbeat events are sampled, not every beat
)

// changes collects what a transition appends besides its state writes.
type changes struct {
	now    time.Time
	events []*store.Event
	outbox []*store.OutboxMessage
	ready  bool // a task became or will become claimable: wake waiting claimers once committed
	// signals: what to wake besides claimers once committed (Work.Signal).
	signals []*Signal
	// traceparent, when set, is the W3C trace context of the worker's request: every audit event
	// of the transition carries it.
	traceparent string
	// What settle does at the end of the transaction (see there): the children of released
	// to release, the descendants of ended to skip, and per job the count of tasks that
	// reached a terminal state to take off its counter.
	// Each keeps the traceparent of the transition that left it, for the events settle adds.
	released []releasedTask
	ended    []endedTask
	finished map[string]*jobProgress
	// storeWakeups: see Config.StoreWakeups.
	storeWakeups bool
	// tally: retries, dead letters and expiries, for Config.Metrics once committed.
	tally metrics.Tally
}

// newChanges starts the changes of a transaction.
func (d *Dispatcher) newChanges() *changes {
	return &changes{now: d.now(), storeWakeups: d.cfg.StoreWakeups}
}

// releasedTask is a task that completed: its children are to be released.
type releasedTask struct{ id, traceparent string }

// endedTask is a task that failed or was canceled: its descendants are to be skipped.
type endedTask struct {
	id, key, jobID, traceparent string
	status                      lifecycle.TaskStatus
}

// release records that tasks completed: settle releases their children.
func (c *changes) release(taskIDs ...string) {
	for _, id := range taskIDs {
		c.released = append(c.released, releasedTask{id: id, traceparent: c.traceparent})
	}
}

// skip records that t ended unsuccessfully with status: settle skips its descendants.
func (c *changes) skip(t *store.Task, status lifecycle.TaskStatus) {
	c.ended = append(c.ended, endedTask{id: t.ID, key: t.Key, jobID: t.JobID, traceparent: c.traceparent, status: status})
}

// jobProgress is what a transaction did to one job's tasks.
type jobProgress struct {
	finished    int    // tasks that reached a terminal state
	failedKey   string // a task that failed for good, for Job Failure Detected
	traceparent string // of the first transition that finished a task, for the job's events
}

// finish records that n more tasks of a job reached a terminal state; failedKey names one that
// failed for good, if any did.
func (c *changes) finish(jobID string, n int, failedKey string) {
	if c.finished == nil {
		c.finished = map[string]*jobProgress{}
	}
	p := c.finished[jobID]
	if p == nil {
		p = &jobProgress{}
		c.finished[jobID] = p
	}
	p.finished += n
	if p.failedKey == "" {
		p.failedKey = failedKey
	}
	if p.traceparent == "" {
		p.traceparent = c.traceparent
	}
}

// absorb takes over what o left for settle, for o's part of a group commit that stood.
func (c *changes) absorb(o *changes) {
	c.released = append(c.released, o.released...)
	c.ended = append(c.ended, o.ended...)
	for id, p := range o.finished {
		c.withTraceparent(p.traceparent, func() { c.finish(id, p.finished, p.failedKey) })
	}
	c.tally.Add(&o.tally)
	o.released, o.ended, o.finished, o.tally = nil, nil, nil, metrics.Tally{}
}

// update runs fn as one store transaction (or a part of one, with group commit) that first locks
// the rows of locks, also appends the events and outbox messages fn collected, and wakes waiting
// claimers after it committed if fn made a task claimable. locks must name every row fn may
// change, as far as fn can know in advance (see store.LockSet): that is what keeps transactions
// from deadlocking. fn may run more than once, so it must set its results afresh each time.
func (d *Dispatcher) update(ctx context.Context, locks store.LockSet, fn func(tx store.Tx, c *changes) error) error {
	if d.commit != nil {
		return d.commit.do(ctx, locks, fn)
	}
	return d.updateAlone(ctx, locks, fn)
}

// updateAlone is update in a transaction of its own, retried after transient failures.
func (d *Dispatcher) updateAlone(ctx context.Context, locks store.LockSet, fn func(tx store.Tx, c *changes) error) error {
	return d.retry(ctx, func() error { return d.runOnce(ctx, locks, fn) })
}

// withTraceparent runs fn with the events it adds carrying traceparent (none if empty).
func (c *changes) withTraceparent(traceparent string, fn func()) {
	saved := c.traceparent
	c.traceparent = traceparent
	defer func() { c.traceparent = saved }()
	fn()
}

func (c *changes) event(jobID, taskID, taskKey, typ string, data map[string]any) {
	if c.traceparent != "" {
		data["traceparent"] = c.traceparent
	}
	b, err := json.Marshal(data)
	if err != nil {
		// Every value passed here is a plain map of JSON-able values.
		panic("dispatch: marshal event data: " + err.Error())
	}
	c.events = append(c.events, &store.Event{JobID: jobID, TaskID: taskID, TaskKey: taskKey, Type: typ, At: c.now, Data: b})
}

// wake queues a wake-up for a task that is claimable from availableAt.
func (c *changes) wake(taskID, queue, runtime string, availableAt time.Time) {
	// Waiters are told even of a task that becomes claimable later (a retry after its backoff):
	// they then recompute how long to sleep, instead of missing it until their poll ends.
	c.ready = true
	if runtime == "push" {
		// The push dispatcher claims it, woken by the notification; no worker is to be woken.
		return
	}
	if c.storeWakeups {
		return
	}
	payload, _ := json.Marshal(map[string]string{"task_id": taskID})
	c.outbox = append(c.outbox, &store.OutboxMessage{Topic: store.TopicTaskReady, Key: queue, Payload: payload, AvailableAt: availableAt, CreatedAt: c.now})
}

// freed notes that t stopped running or will never run: if its concurrency key was at its
// limit, a task of the key waiting for room becomes claimable, so waiting claimers are woken.
func (c *changes) freed(t *store.Task) {
	if t.ConcurrencyKey != "" {
		c.ready = true
	}
}

func (c *changes) write(ctx context.Context, tx store.Tx) error {
	if len(c.events) > 0 {
		if err := tx.EventInsertMany(ctx, c.events); err != nil {
			return fmt.Errorf("write %d audit events: %w", len(c.events), err)
		}
	}
	if len(c.outbox) > 0 {
		if err := tx.OutboxInsertMany(ctx, c.outbox); err != nil {
			return fmt.Errorf("write %d outbox messages: %w", len(c.outbox), err)
		}
	}
	return nil
}
