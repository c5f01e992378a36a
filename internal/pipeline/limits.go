package pipeline

import "cmp"

// Limits of a document's size. What a deploy creates in the databases is bounded by them: a
// buffered dataset is a table with an index per declared index, created by the deploy in one
// transaction of the data database, and every job output is a row of the store written in the
// deploy's transaction. They keep one deploy to a short transaction on either database, and
// every statement it makes within the databases' own limits (PostgreSQL allows 1,600 columns in
// a table and 32 in an index, SQLite 2,000 of each and 32,766 parameters in a statement).
const (
	// MaxColumns bounds the columns of a schema.
	MaxColumns = 256
	// MaxKeyColumns bounds the columns of a schema's unique key, and of each of its indexes.
	MaxKeyColumns = 16
	// MaxIndexes bounds the indexes a schema declares.
	MaxIndexes = 32
	// MaxOutputs bounds a job's outputs: each one is a dataset of its own.
	MaxOutputs = 64
	// MaxBufferedDatasets bounds the buffered datasets a document publishes: each is a table of
	// up to MaxColumns columns and MaxIndexes indexes that the deploy creates or migrates.
	MaxBufferedDatasets = 16
	// MaxDatasets bounds the datasets a document creates or names: its jobs' outputs, its
	// buffered datasets, and the other pipelines' datasets its inputs read.
	MaxDatasets = 1000
	// MaxInputs bounds the inputs of a document's jobs, all together: each is a row of the store
	// that routes events to its job, written in the deploy's transaction.
	MaxInputs = 1000
)

// limitKeys are the fields a job shares with the document's defaults.
var limitKeys = []string{
	"heartbeat_timeout_seconds", "timeout_seconds", "max_attempts", "priority",
	"max_queue_depth", "max_queue_age", "backpressure_mode",
}

// The backpressure modes (docs/contracts/pipelines.md, "Backpressure"). BackpressurePause, the
// default: the events routed to a job whose backlog is full or too old are held, durably, and
// routed in order once it drains. BackpressureCoalesce holds them the same way, but an event of
// the scope of the newest held routing (the same partition, or the next cursor of the same
// dataset version) joins it, so that the job catches up with one task per scope.
const (
	BackpressurePause    = "pause"
	BackpressureCoalesce = "coalesce"
)

// limits reads the fields of m that a job shares with defaults. Unset fields stay zero (Priority
// nil).
func (w *walker) limits(m *node, path string) Defaults {
	var d Defaults
	if n := m.lookup("heartbeat_timeout_seconds"); n != nil {
		d.HeartbeatTimeoutSeconds, _ = w.positive(n, child(path, "heartbeat_timeout_seconds"))
	}
	if n := m.lookup("timeout_seconds"); n != nil {
		d.TimeoutSeconds, _ = w.positive(n, child(path, "timeout_seconds"))
	}
	if n := m.lookup("max_attempts"); n != nil {
		d.MaxAttempts, _ = w.intRange(n, child(path, "max_attempts"), 1, 100)
	}
	if n := m.lookup("priority"); n != nil {
		p, err := priority(n)
		if err != nil {
			w.node(n, child(path, "priority"), "%s", err)
		} else {
			d.Priority = &p
		}
	}
	if n := m.lookup("max_queue_depth"); n != nil {
		d.MaxQueueDepth, _ = w.positive(n, child(path, "max_queue_depth"))
	}
	if n := m.lookup("max_queue_age"); n != nil {
		d.MaxQueueAge, _ = w.duration(n, child(path, "max_queue_age"))
	}
	if n := m.lookup("backpressure_mode"); n != nil {
		d.BackpressureMode, _ = w.oneOf(n, child(path, "backpressure_mode"), BackpressurePause, BackpressureCoalesce)
	}
	return d
}

func (w *walker) defaults(n *node, path string) Defaults {
	if !w.object(n, path, limitKeys...) {
		return Defaults{}
	}
	return w.limits(n, path)
}

// applyDefaults fills the shared fields the job left unset from the defaults.
func applyDefaults(j *Job, own, def Defaults) {
	j.HeartbeatTimeoutSeconds = cmp.Or(own.HeartbeatTimeoutSeconds, def.HeartbeatTimeoutSeconds)
	j.TimeoutSeconds = cmp.Or(own.TimeoutSeconds, def.TimeoutSeconds, RuntimeTimeoutSeconds(j.Runtime))
	j.MaxAttempts = cmp.Or(own.MaxAttempts, def.MaxAttempts)
	switch {
	case own.Priority != nil:
		j.Priority = *own.Priority
	case def.Priority != nil:
		j.Priority = *def.Priority
	}
	j.MaxQueueDepth = cmp.Or(own.MaxQueueDepth, def.MaxQueueDepth)
	j.MaxQueueAge = cmp.Or(own.MaxQueueAge, def.MaxQueueAge)
	j.BackpressureMode = cmp.Or(own.BackpressureMode, def.BackpressureMode)
}

// RuntimeTimeoutSeconds is the execution deadline of a task of a job on runtime that sets no
// timeout_seconds, itself or in defaults: 60 s on lambda, 1800 s on ecs_platform and ecs_udf; none (0) for the
// server's own dispatcher jobs, which only announce a tick.
func RuntimeTimeoutSeconds(runtime string) int {
	switch runtime {
	case RuntimeLambda:
		return 60
	case RuntimeECSPlatform, RuntimeECSUDF:
		return 1800
	}
	return 0
}
