package pipeline

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
)

var jobKeys = append([]string{
	"name", "activation", "runtime", "operator", "queue", "outputs", "inputs",
	"execution_strategy", "update_strategy", "unique_key", "source", "bootstrap", "secrets",
	"scaling", "timeout_seconds", "idle_timeout", "config", "udf",
}, limitKeys...)

// OperatorUDF is the operator of a job that is nothing but its bundle's code.
const OperatorUDF = "udf"

// job reads jobs[i], the node n at path.
func (w *walker) job(n *node, path string, i int, dc *docContext, def Defaults) Job {
	var j Job
	if !w.object(n, path, jobKeys...) {
		return j
	}
	if v := w.required(n, path, "name"); v != nil {
		if name, ok := w.name(v, child(path, "name"), nameRE); ok {
			if dc.names[name] {
				w.node(v, child(path, "name"), "duplicate job name %q", name)
			}
			dc.names[name] = true
			j.Name = name
		}
	}
	if v := w.required(n, path, "activation"); v != nil {
		j.Activation, _ = w.oneOf(v, child(path, "activation"), ActivationSource, ActivationReactive)
	}
	if v := w.required(n, path, "runtime"); v != nil {
		j.Runtime, _ = w.oneOf(v, child(path, "runtime"), RuntimeLambda, RuntimeECSPlatform, RuntimeDispatcher, RuntimeECSUDF)
	}
	if v := w.required(n, path, "operator"); v != nil {
		j.Operator, _ = w.name(v, child(path, "operator"), operatorRE)
	}
	j.Queue = j.Operator
	if v := n.lookup("queue"); v != nil {
		j.Queue, _ = w.name(v, child(path, "queue"), operatorRE)
	}
	if v := w.required(n, path, "outputs"); v != nil {
		j.Outputs, _ = w.intRange(v, child(path, "outputs"), 0, MaxOutputs)
	}

	w.jobInputs(n, path, &j, dc)
	w.strategies(n, path, &j, dc)

	src := n.lookup("source")
	switch {
	case j.Activation == ActivationSource && src == nil:
		w.node(n, child(path, "source"), "required for a source job")
	case j.Activation == ActivationReactive && src != nil:
		w.node(src, child(path, "source"), "not allowed for a reactive job")
	case src != nil:
		j.Source = w.source(src, child(path, "source"), dc)
	}

	if v := n.lookup("bootstrap"); v != nil && j.Activation == ActivationReactive {
		w.node(v, child(path, "bootstrap"), "only allowed for source jobs: a reactive job's outputs are reset by resetting the source it reads")
	} else if v != nil && w.object(v, child(path, "bootstrap"), "reset_outputs") {
		j.Bootstrap = &Bootstrap{}
		if r := v.lookup("reset_outputs"); r != nil {
			j.Bootstrap.ResetOutputs, _ = w.boolean(r, child(path, "bootstrap", "reset_outputs"))
		}
	}
	if v := n.lookup("secrets"); v != nil {
		switch {
		case n.lookup("udf") != nil:
			w.node(v, child(path, "secrets"), "not allowed on a UDF job: user code never receives secrets")
		case j.Runtime == RuntimeECSUDF:
			w.node(v, child(path, "secrets"), "not allowed with runtime ecs_udf: it runs untrusted code, which never receives secrets")
		default:
			j.Secrets, _ = w.names(v, child(path, "secrets"), secretRE, "secret")
		}
	}
	if v := n.lookup("scaling"); v != nil && w.object(v, child(path, "scaling"), "max_concurrency") {
		j.Scaling = &Scaling{}
		if mc := w.required(v, child(path, "scaling"), "max_concurrency"); mc != nil {
			j.Scaling.MaxConcurrency, _ = w.positive(mc, child(path, "scaling", "max_concurrency"))
		}
	}
	applyDefaults(&j, w.limits(n, path), def)
	if j.Activation == ActivationSource {
		for _, k := range []string{"max_queue_depth", "max_queue_age", "backpressure_mode"} {
			if v := n.lookup(k); v != nil {
				w.node(v, child(path, k), "only allowed for reactive jobs: backpressure holds the events routed to a job, and a source job is started by its source")
			}
		}
		// From defaults, they apply to the reactive jobs only.
		j.MaxQueueDepth, j.MaxQueueAge, j.BackpressureMode = 0, 0, ""
	}
	if v := n.lookup("idle_timeout"); v != nil {
		if j.Runtime == RuntimeDispatcher {
			w.node(v, child(path, "idle_timeout"), "not allowed on a dispatcher job: the server runs it, there are no workers to idle")
		} else {
			j.IdleTimeout = w.idleTimeout(v, child(path, "idle_timeout"))
		}
	}

	j.Config = json.RawMessage("{}")
	if v := n.lookup("config"); v != nil {
		if v.kind != kindMap {
			w.node(v, child(path, "config"), "must be a map")
		} else {
			j.Config = marshalConfig(v)
		}
	}
	w.udf(n, path, &j)
	return j
}

// udf reads a job's udf block: the bundle it runs, and optionally the entrypoint (the bundle's
// own unless set). A job of operator udf must have one; the dispatcher runtime, which runs in the
// server, cannot run one.
func (w *walker) udf(n *node, path string, j *Job) {
	v := n.lookup("udf")
	switch {
	case v == nil && j.Operator == OperatorUDF:
		w.node(n, child(path, "udf"), "required for operator udf: {bundle_id, entrypoint}")
		return
	case v == nil:
		return
	case j.Runtime == RuntimeDispatcher:
		w.node(v, child(path, "udf"), "not allowed on a dispatcher job: the server runs it and runs no user code; use ecs_udf or lambda")
		return
	case !w.object(v, child(path, "udf"), "bundle_id", "entrypoint"):
		return
	}
	j.UDF = &UDF{BundleID: w.nonEmpty(v, child(path, "udf"), "bundle_id")}
	if e := v.lookup("entrypoint"); e != nil {
		j.UDF.Entrypoint = w.nonEmpty(v, child(path, "udf"), "entrypoint")
	}
}

// marshalConfig writes a config map as compact JSON, keys sorted, and "<", ">" and "&" as they are.
func marshalConfig(n *node) json.RawMessage {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(n.toAny()) // a tree always encodes
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// nonEmpty reads the required, non-empty string key of the map m.
func (w *walker) nonEmpty(m *node, path, key string) string {
	v := w.required(m, path, key)
	if v == nil {
		return ""
	}
	s, ok := w.str(v, child(path, key))
	if ok && s == "" {
		w.node(v, child(path, key), "must not be empty")
	}
	return s
}

// strategies reads execution_strategy, update_strategy and unique_key. A unique_key must name
// columns of the schema of each dataset the job's outputs are published as, and be the unique
// key of each buffered one: its sink skips the rows whose key the dataset has (ON CONFLICT DO
// NOTHING on exactly those columns), which is what append promises.
func (w *walker) strategies(n *node, path string, j *Job, dc *docContext) {
	if v := n.lookup("execution_strategy"); v != nil {
		if j.Activation == ActivationSource {
			w.node(v, child(path, "execution_strategy"), "only allowed for reactive jobs")
		} else {
			j.ExecutionStrategy, _ = w.oneOf(v, child(path, "execution_strategy"), PerUpdate, PerPartition)
		}
	} else if j.Activation == ActivationReactive {
		j.ExecutionStrategy = PerUpdate
	}
	if v := n.lookup("update_strategy"); v != nil {
		j.UpdateStrategy, _ = w.oneOf(v, child(path, "update_strategy"), UpdateAppend, UpdateReplace)
		if j.UpdateStrategy == UpdateReplace {
			w.replaceOutputs(v, child(path, "update_strategy"), j, dc)
		}
	}
	switch v := n.lookup("unique_key"); {
	case v != nil:
		keys, ok := w.names(v, child(path, "unique_key"), columnRE, "column")
		if ok && len(keys) == 0 {
			w.node(v, child(path, "unique_key"), "must list at least one column")
		}
		j.UniqueKey = keys
		if ok && len(keys) > 0 {
			w.uniqueKeyMatches(v, child(path, "unique_key"), j, dc)
		}
	case j.UpdateStrategy == UpdateAppend:
		w.node(n, child(path, "unique_key"), "required when update_strategy is append")
	}
}

// uniqueKeyMatches checks j's unique_key against the schemas of the datasets its outputs are
// published as.
func (w *walker) uniqueKeyMatches(n *node, path string, j *Job, dc *docContext) {
	for _, name := range slices.Sorted(maps.Keys(dc.publish)) {
		p := dc.publish[name]
		if p.From.Job != j.Name || p.Schema == nil {
			continue
		}
		missing := false
		for i, k := range j.UniqueKey {
			if !p.Schema.hasColumn(k) {
				w.node(n.list[i], index(path, i), "column %q is not in the schema of dataset %q (publish.%s.schema)", k, name, name)
				missing = true
			}
		}
		if !missing && p.WriteMode == WriteBuffered && !sameColumns(j.UniqueKey, p.Schema.Unique) {
			w.node(n, path, "%v is not the unique key %v of buffered dataset %q (publish.%s.schema.unique): its sink skips the rows whose unique key the dataset has",
				j.UniqueKey, p.Schema.Unique, name, name)
		}
	}
}

// replaceOutputs checks that no output of the replace job j is published as a buffered dataset:
// replace swaps whole partitions of files the job writes itself, while a buffered dataset's rows
// are appended by its sink, which has no partition to swap.
func (w *walker) replaceOutputs(n *node, path string, j *Job, dc *docContext) {
	for _, name := range slices.Sorted(maps.Keys(dc.publish)) {
		p := dc.publish[name]
		if p.From.Job == j.Name && p.WriteMode == WriteBuffered {
			w.node(n, path, "replace rewrites whole partitions of the job's outputs, but output %d is buffered dataset %q (publish.%s.write_mode), whose rows its sink appends: use update_strategy append, or publish the output with write_mode direct",
				p.From.Output, name, name)
		}
	}
}

// sameColumns reports whether a and b list the same columns, in any order.
func sameColumns(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	a, b = slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b))
	return slices.Equal(a, b)
}

// jobInputs reads inputs: required (and non-empty) for a reactive job, refused for a source job.
func (w *walker) jobInputs(n *node, path string, j *Job, dc *docContext) {
	v := n.lookup("inputs")
	p := child(path, "inputs")
	switch {
	case v == nil:
		if j.Activation == ActivationReactive {
			w.node(n, p, "required for a reactive job")
		}
		return
	case j.Activation == ActivationSource:
		w.node(v, p, "not allowed for a source job")
		return
	case v.kind != kindList:
		w.node(v, p, "must be a list")
		return
	case len(v.list) == 0 && j.Activation == ActivationReactive:
		w.node(v, p, "a reactive job needs at least one input")
		return
	}
	j.Inputs = make([]Input, 0, len(v.list))
	for k, in := range v.list {
		if dc.inputs++; dc.inputs == MaxInputs+1 {
			w.node(in, index(p, k), "a document may have at most %d inputs in all", MaxInputs)
		}
		j.Inputs = append(j.Inputs, w.input(in, index(p, k), j.Name, dc))
	}
}
