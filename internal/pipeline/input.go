package pipeline

// input reads one input of the job named self (its name is "" when invalid).
func (w *walker) input(n *node, path, self string, dc *docContext) Input {
	var in Input
	if !w.object(n, path, "from", "where") {
		return in
	}
	// allow is the where allowlist of what the input reads; known is false when the input's
	// source is invalid or another DAG's dataset.
	var allow Allowlist
	known := false
	if f := w.required(n, path, "from"); f != nil {
		in.From, allow, known = w.from(f, child(path, "from"), self, dc)
	}
	if v := n.lookup("where"); v != nil {
		var items []whereItem
		in.Where, items = w.where(v, child(path, "where"))
		if known {
			checkWhere(&w.problems, child(path, "where"), items, allow)
		}
	}
	return in
}

func (w *walker) from(n *node, path, self string, dc *docContext) (From, Allowlist, bool) {
	var f From
	if !w.object(n, path, "job", "output", "dataset") {
		return f, Allowlist{}, false
	}
	job, out, ds := n.lookup("job"), n.lookup("output"), n.lookup("dataset")
	switch {
	case job != nil && ds != nil:
		w.node(n, path, "must name a job (with its output) or a dataset, not both")
		return f, Allowlist{}, false
	case job == nil && ds == nil:
		w.node(n, path, "must name a job (with its output) or a dataset")
		return f, Allowlist{}, false
	case ds != nil:
		if out != nil {
			w.node(out, child(path, "output"), "only allowed with job")
		}
		name, ok := w.name(ds, child(path, "dataset"), nameRE)
		f.Dataset = name
		if !ok {
			return f, Allowlist{}, false
		}
		if p := dc.publish[name]; p != nil {
			return f, p.Allowlist(), true
		}
		return f, Allowlist{}, false // another DAG's: the caller checks it (Document.CheckExternal)
	}

	name, nameOK := w.name(job, child(path, "job"), nameRE)
	f.Job = name
	if nameOK {
		switch _, exists := dc.jobs[name]; {
		case !exists:
			w.node(job, child(path, "job"), "unknown job %q", name)
			nameOK = false
		case name == self:
			w.node(job, child(path, "job"), "a job cannot read its own output")
			nameOK = false
		}
	}
	if out = w.required(n, path, "output"); out == nil {
		return f, Allowlist{}, false
	}
	o, ok := w.integer(out, child(path, "output"))
	if !ok {
		return f, Allowlist{}, false
	}
	f.Output = &o
	if !nameOK || !w.outputRange(out, child(path, "output"), name, o, dc) {
		return f, Allowlist{}, false
	}
	if p := dc.byOutput[JobOutput{Job: name, Output: o}]; p != nil {
		return f, p.Allowlist(), true
	}
	return f, Allowlist{}, true // not published: nothing may be filtered on
}

// where reads the shape of a where clause: a flat map of field to a scalar or a non-empty list
// of scalars. It returns the typed clause and the well-formed items, in document order, for the
// allowlist check.
func (w *walker) where(n *node, path string) (map[string]any, []whereItem) {
	switch n.kind {
	case kindMap:
	case kindString:
		w.node(n, path, "where must be a map of field: value; SQL strings are not accepted")
		return nil, nil
	default:
		w.node(n, path, "where must be a map of field: value")
		return nil, nil
	}
	if len(n.entries) == 0 {
		return nil, nil // where: {} filters nothing, as no where does
	}
	out := make(map[string]any, len(n.entries))
	var items []whereItem
	for _, e := range n.entries {
		p := child(path, e.key)
		v := e.val
		switch v.kind {
		case kindString, kindNumber, kindBool:
		case kindList:
			if len(v.list) == 0 {
				w.node(v, p, "must not be an empty list")
				continue
			}
			ok := true
			for k, c := range v.list {
				if !c.scalar() {
					w.node(c, index(p, k), "must be a string, number or boolean")
					ok = false
				}
			}
			if !ok {
				continue
			}
		default:
			w.node(v, p, "must be a string, number or boolean, or a non-empty list of them")
			continue
		}
		val := v.toAny()
		out[e.key] = val
		items = append(items, whereItem{key: e.key, line: v.line, value: val})
	}
	return out, items
}

func (n *node) scalar() bool {
	return n.kind == kindString || n.kind == kindNumber || n.kind == kindBool
}
