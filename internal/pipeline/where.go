package pipeline

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Allowlist is what a where clause may filter on in one dataset: its schema's columns and its
// filter fields.
type Allowlist struct {
	// Dataset names the dataset in messages; "" stands for a job output that is not published,
	// whose allowlist is empty.
	Dataset string
	// Fields maps each allowed field to its column type (TypeString, ...), or to "" when the field
	// is a filter field without a schema column, whose values may be any scalar.
	Fields map[string]string
}

// Allowlist is the where allowlist of the dataset p publishes.
func (p *Publish) Allowlist() Allowlist {
	a := Allowlist{Dataset: p.Dataset, Fields: make(map[string]string)}
	for _, f := range p.FilterFields {
		a.Fields[f] = ""
	}
	if p.Schema != nil {
		for _, c := range p.Schema.Columns {
			a.Fields[c.Name] = c.Type
		}
	}
	return a
}

// CheckWhere checks a where clause, found at path, against the allowlist of the dataset its input
// reads, with the rules and messages Parse uses for the datasets of the document itself: every
// key must be allowed, and every value a scalar (or a non-empty list of scalars) of its column's
// type. Keys are checked in sorted order.
func CheckWhere(path string, where map[string]any, allow Allowlist) Problems {
	keys := make([]string, 0, len(where))
	for k := range where {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var ps problems
	items := make([]whereItem, 0, len(keys))
	for _, k := range keys {
		v := where[k]
		p := child(path, k)
		switch list, isList := v.([]any); {
		case isList && len(list) == 0:
			ps.at(p, 0, "must not be an empty list")
			continue
		case isList:
			ok := true
			for i, e := range list {
				if !isScalar(e) {
					ps.at(index(p, i), 0, "must be a string, number or boolean")
					ok = false
				}
			}
			if !ok {
				continue
			}
		case !isScalar(v):
			ps.at(p, 0, "must be a string, number or boolean, or a non-empty list of them")
			continue
		}
		items = append(items, whereItem{key: k, value: v})
	}
	checkWhere(&ps, path, items, allow)
	return ps.list
}

// whereItem is one well-formed key of a where clause: a scalar or a non-empty []any of scalars.
type whereItem struct {
	key   string
	line  int
	value any
}

func checkWhere(ps *problems, path string, items []whereItem, allow Allowlist) {
	for _, it := range items {
		p := child(path, it.key)
		typ, ok := allow.Fields[it.key]
		if !ok {
			ps.at(p, it.line, "%s", notAllowed(it.key, allow))
			continue
		}
		if list, isList := it.value.([]any); isList {
			for i, v := range list {
				if msg := typeMismatch(typ, v); msg != "" {
					ps.at(index(p, i), it.line, "%s: column %q is %s", msg, it.key, typ)
				}
			}
		} else if msg := typeMismatch(typ, it.value); msg != "" {
			ps.at(p, it.line, "%s: column %q is %s", msg, it.key, typ)
		}
	}
}

func notAllowed(key string, allow Allowlist) string {
	if allow.Dataset == "" {
		return fmt.Sprintf("%q is not a filter field: the input's output is not published, so it has none", key)
	}
	if len(allow.Fields) == 0 {
		return fmt.Sprintf("%q is not a filter field of dataset %q (it has none)", key, allow.Dataset)
	}
	names := make([]string, 0, len(allow.Fields))
	for f := range allow.Fields {
		names = append(names, f)
	}
	slices.Sort(names)
	return fmt.Sprintf("%q is not a filter field of dataset %q (allowed: %s)", key, allow.Dataset, strings.Join(names, ", "))
}

func isScalar(v any) bool {
	switch v.(type) {
	case string, bool, json.Number, float64, float32, int, int64, int32, uint, uint64, uint32:
		return true
	}
	return false
}

// typeMismatch says what a value of a column of type typ must be, or "" if v is one.
func typeMismatch(typ string, v any) string {
	switch typ {
	case TypeString:
		if _, ok := v.(string); !ok {
			return "must be a string"
		}
	case TypeInteger:
		if !isInteger(v) {
			return "must be an integer"
		}
	case TypeNumber:
		if !isNumber(v) {
			return "must be a number"
		}
	case TypeBoolean:
		if _, ok := v.(bool); !ok {
			return "must be a boolean"
		}
	case TypeTimestamp:
		s, ok := v.(string)
		if !ok {
			return "must be an RFC 3339 timestamp"
		}
		if _, err := time.Parse(time.RFC3339Nano, s); err != nil {
			return "must be an RFC 3339 timestamp"
		}
	}
	return "" // json, or a filter field of unknown type: any scalar
}

func isNumber(v any) bool {
	switch v.(type) {
	case json.Number, float64, float32, int, int64, int32, uint, uint64, uint32:
		return true
	}
	return false
}

func isInteger(v any) bool {
	switch v := v.(type) {
	case json.Number:
		if !strings.ContainsAny(string(v), ".eE") {
			return true
		}
		f, err := v.Float64()
		return err == nil && f == math.Trunc(f)
	case float64:
		return v == math.Trunc(v) && !math.IsInf(v, 0)
	case float32:
		return float64(v) == math.Trunc(float64(v)) && !math.IsInf(float64(v), 0)
	case int, int64, int32, uint, uint64, uint32:
		return true
	}
	return false
}

// MayMatch reports whether a row with the given values could satisfy where: values holds, per
// field, the values present (among a batch's rows, say), and a field it leaves out may have any
// value. Each key of where must be satisfiable on its own: its value, or one of its list, among
// the field's values. Numbers compare by value and timestamps by instant.
func MayMatch(where map[string]any, values map[string][]any) bool {
	for k, want := range where {
		have, known := values[k]
		if !known {
			continue
		}
		wants, isList := want.([]any)
		if !isList {
			wants = []any{want}
		}
		if !slices.ContainsFunc(wants, func(w any) bool {
			return slices.ContainsFunc(have, func(h any) bool { return sameValue(w, h) })
		}) {
			return false
		}
	}
	return true
}

// sameValue compares two scalars as a where clause does.
func sameValue(a, b any) bool {
	if fa, ok := toFloat(a); ok {
		fb, ok := toFloat(b)
		return ok && fa == fb
	}
	sa, okA := a.(string)
	sb, okB := b.(string)
	if okA && okB {
		if sa == sb {
			return true
		}
		ta, errA := time.Parse(time.RFC3339Nano, sa)
		tb, errB := time.Parse(time.RFC3339Nano, sb)
		return errA == nil && errB == nil && ta.Equal(tb)
	}
	return a == b
}

func toFloat(v any) (float64, bool) {
	switch v := v.(type) {
	case json.Number:
		f, err := v.Float64()
		return f, err == nil
	case float64:
		return v, true
	case float32:
		return float64(v), true
	case int:
		return float64(v), true
	case int64:
		return float64(v), true
	case int32:
		return float64(v), true
	case uint:
		return float64(v), true
	case uint64:
		return float64(v), true
	case uint32:
		return float64(v), true
	}
	return 0, false
}
