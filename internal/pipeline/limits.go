package pipeline

import "cmp"

// limitKeys are the fields a job shares with the document's defaults.
var limitKeys = []string{
	"heartbeat_timeout_seconds", "max_attempts", "priority",
	"max_queue_depth", "max_queue_age", "backpressure_mode",
}

// BackpressurePause is the only backpressure mode: a job whose queue is full or too old stops
// receiving new tasks until it drains.
const BackpressurePause = "pause"

// limits reads the fields of m that a job shares with defaults. Unset fields stay zero (Priority
// nil).
func (w *walker) limits(m *node, path string) Defaults {
	var d Defaults
	if n := m.lookup("heartbeat_timeout_seconds"); n != nil {
		d.HeartbeatTimeoutSeconds, _ = w.positive(n, child(path, "heartbeat_timeout_seconds"))
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
		d.BackpressureMode, _ = w.oneOf(n, child(path, "backpressure_mode"), BackpressurePause)
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
