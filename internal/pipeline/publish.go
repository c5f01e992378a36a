package pipeline

import (
	"slices"
	"strings"
)

// publish reads the publish map: dataset name → entry, in document order.
func (w *walker) publish(n *node, path string, dc *docContext) map[string]*Publish {
	if n.kind != kindMap {
		w.node(n, path, "must be a map of dataset name to entry")
		return nil
	}
	out := make(map[string]*Publish, len(n.entries))
	direct := make(map[JobOutput]string) // output → the dataset it is published directly as
	for _, e := range n.entries {
		p := child(path, e.key)
		if !nameRE.MatchString(e.key) {
			w.at(p, e.line, "dataset name %q does not match %s", e.key, nameRE)
		}
		pub, fromOK := w.publishEntry(e.val, p, dc)
		if pub == nil {
			continue
		}
		pub.Dataset = e.key
		out[e.key] = pub
		if !fromOK {
			continue
		}
		dc.publish[e.key] = pub
		if pub.WriteMode == WriteDirect {
			if prev, dup := direct[pub.From]; dup {
				w.node(e.val.lookup("from"), child(p, "from"), "output %d of job %q is already published as %q",
					pub.From.Output, pub.From.Job, prev)
				continue
			}
			direct[pub.From] = e.key
		}
		// An input reading this output is checked against the direct entry; failing one, against
		// the first buffered entry.
		if prev := dc.byOutput[pub.From]; prev == nil || (prev.WriteMode != WriteDirect && pub.WriteMode == WriteDirect) {
			dc.byOutput[pub.From] = pub
		}
	}
	return out
}

// publishEntry reads one entry; fromOK reports whether its from names an existing output.
func (w *walker) publishEntry(n *node, path string, dc *docContext) (pub *Publish, fromOK bool) {
	if !w.object(n, path, "from", "storage", "write_mode", "schema", "filter_fields") {
		return nil, false
	}
	pub = &Publish{Storage: StoragePostgres, WriteMode: WriteDirect}
	if f := w.required(n, path, "from"); f != nil {
		pub.From, fromOK = w.jobOutput(f, child(path, "from"), dc)
	}
	if v := n.lookup("storage"); v != nil {
		pub.Storage, _ = w.oneOf(v, child(path, "storage"), StoragePostgres, StorageS3)
	}
	if v := n.lookup("write_mode"); v != nil {
		pub.WriteMode, _ = w.oneOf(v, child(path, "write_mode"), WriteBuffered, WriteDirect)
	}
	buffered := pub.WriteMode == WriteBuffered
	switch v := n.lookup("schema"); {
	case v != nil:
		pub.Schema = w.schema(v, child(path, "schema"), buffered)
	case buffered:
		w.node(n, child(path, "schema"), "required when write_mode is buffered")
	}
	if v := n.lookup("filter_fields"); v != nil {
		p := child(path, "filter_fields")
		fields, ok := w.names(v, p, columnRE, "filter field")
		pub.FilterFields = fields
		if ok && pub.Schema != nil && pub.Schema.Columns != nil {
			for i, f := range pub.FilterFields {
				if !pub.Schema.hasColumn(f) {
					w.node(v.list[i], index(p, i), "%q is not a column of the schema", f)
				}
			}
		}
	}
	return pub, fromOK
}

// jobOutput reads a publish entry's from: {job, output}, which must name an existing output.
func (w *walker) jobOutput(n *node, path string, dc *docContext) (JobOutput, bool) {
	var jo JobOutput
	if !w.object(n, path, "job", "output") {
		return jo, false
	}
	ok := false
	if v := w.required(n, path, "job"); v != nil {
		if jo.Job, ok = w.name(v, child(path, "job"), nameRE); ok {
			if _, exists := dc.jobs[jo.Job]; !exists {
				w.node(v, child(path, "job"), "unknown job %q", jo.Job)
				ok = false
			}
		}
	}
	v := w.required(n, path, "output")
	if v == nil {
		return jo, false
	}
	o, outOK := w.integer(v, child(path, "output"))
	jo.Output = o
	if !ok || !outOK {
		return jo, false
	}
	return jo, w.outputRange(v, child(path, "output"), jo.Job, o, dc)
}

// columnTypes maps each accepted type name, canonical or alias, to its canonical name.
var columnTypes = map[string]string{
	TypeString: TypeString, "text": TypeString, "varchar": TypeString,
	TypeInteger: TypeInteger, "int": TypeInteger, "bigint": TypeInteger, "int64": TypeInteger,
	TypeNumber: TypeNumber, "float": TypeNumber, "double": TypeNumber, "numeric": TypeNumber, "decimal": TypeNumber,
	TypeBoolean: TypeBoolean, "bool": TypeBoolean,
	TypeTimestamp: TypeTimestamp, "timestamptz": TypeTimestamp,
	TypeJSON: TypeJSON, "jsonb": TypeJSON,
}

func (w *walker) schema(n *node, path string, buffered bool) *Schema {
	if !w.object(n, path, "columns", "unique", "indexes") {
		return nil
	}
	s := &Schema{}
	if v := w.required(n, path, "columns"); v != nil {
		s.Columns = w.columns(v, child(path, "columns"))
	}
	switch v := n.lookup("unique"); {
	case v != nil:
		s.Unique = w.columnList(v, child(path, "unique"), s)
	case buffered:
		w.node(n, child(path, "unique"), "required when write_mode is buffered")
	}
	if v := n.lookup("indexes"); v != nil {
		p := child(path, "indexes")
		if v.kind != kindList {
			w.node(v, p, "must be a list of lists of columns")
		} else {
			if len(v.list) > MaxIndexes {
				w.node(v, p, "must list at most %d indexes, not %d", MaxIndexes, len(v.list))
			}
			for i, c := range v.list {
				s.Indexes = append(s.Indexes, w.columnList(c, index(p, i), s))
			}
		}
	}
	return s
}

func (w *walker) columns(n *node, path string) []Column {
	if n.kind != kindList {
		w.node(n, path, "must be a list")
		return nil
	}
	if len(n.list) == 0 {
		w.node(n, path, "must list at least one column")
		return nil
	}
	if len(n.list) > MaxColumns {
		w.node(n, path, "must list at most %d columns, not %d", MaxColumns, len(n.list))
	}
	var cols []Column
	seen := make(map[string]bool)
	for i, cn := range n.list {
		p := index(path, i)
		if !w.object(cn, p, "name", "type", "required") {
			continue
		}
		var c Column
		if v := w.required(cn, p, "name"); v != nil {
			if name, ok := w.name(v, child(p, "name"), columnRE); ok {
				switch {
				case seen[name]:
					w.node(v, child(p, "name"), "duplicate column %q", name)
				case name == "org_id":
					w.node(v, child(p, "name"), "column name %q is reserved: the sink sets it from the publisher's tenant", name)
				case strings.HasPrefix(name, "_"):
					w.node(v, child(p, "name"), `column names beginning with "_" are reserved`)
				}
				seen[name] = true
				c.Name = name
			}
		}
		if v := w.required(cn, p, "type"); v != nil {
			if t, ok := w.str(v, child(p, "type")); ok {
				c.Type = columnTypes[strings.ToLower(t)]
				if c.Type == "" {
					w.node(v, child(p, "type"), "unknown type %q: must be string, integer, number, boolean, timestamp or json", t)
				}
			}
		}
		if v := cn.lookup("required"); v != nil {
			c.Required, _ = w.boolean(v, child(p, "required"))
		}
		cols = append(cols, c)
	}
	return cols
}

// columnList reads a non-empty list of distinct columns of s.
func (w *walker) columnList(n *node, path string, s *Schema) []string {
	names, ok := w.names(n, path, columnRE, "column")
	if !ok {
		return names
	}
	if len(names) == 0 {
		w.node(n, path, "must list at least one column")
	}
	if len(names) > MaxKeyColumns {
		w.node(n, path, "must list at most %d columns, not %d", MaxKeyColumns, len(names))
	}
	if s.Columns == nil {
		return names // the columns are invalid: they were reported, and nothing can be checked
	}
	for i, name := range names {
		if !s.hasColumn(name) {
			w.node(n.list[i], index(path, i), "unknown column %q", name)
		}
	}
	return names
}

func (s *Schema) hasColumn(name string) bool {
	return slices.ContainsFunc(s.Columns, func(c Column) bool { return c.Name == name })
}
