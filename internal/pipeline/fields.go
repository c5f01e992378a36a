package pipeline

import (
	"errors"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Patterns of names, as the messages print them.
var (
	nameRE        = regexp.MustCompile(`^[a-z][a-z0-9_]{0,127}$`) // DAG, job and dataset names
	operatorRE    = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.:-]{0,127}$`)
	secretRE      = regexp.MustCompile(`^[a-z][a-z0-9_]{0,127}$`) // a file name and, upper-cased, an environment variable's
	columnRE      = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)
	webhookPathRE = regexp.MustCompile(`^/[A-Za-z0-9_./-]{1,255}$`)
)

// walker validates a tree, collecting problems.
type walker struct {
	problems
}

// object checks that n is a map, and reports each of its keys that is not one of known.
func (w *walker) object(n *node, path string, known ...string) bool {
	if n.kind != kindMap {
		w.node(n, path, "must be a map")
		return false
	}
	for _, e := range n.entries {
		if !slices.Contains(known, e.key) {
			w.at(path, e.line, "unknown key %q", e.key)
		}
	}
	return true
}

// required returns the value of key in the map m, or reports that it is missing.
func (w *walker) required(m *node, path, key string) *node {
	v := m.lookup(key)
	if v == nil {
		w.node(m, child(path, key), "required")
	}
	return v
}

func (w *walker) str(n *node, path string) (string, bool) {
	if n.kind != kindString {
		w.node(n, path, "must be a string")
		return "", false
	}
	return n.s, true
}

// name reads a string that must match re.
func (w *walker) name(n *node, path string, re *regexp.Regexp) (string, bool) {
	s, ok := w.str(n, path)
	if !ok {
		return "", false
	}
	if !re.MatchString(s) {
		w.node(n, path, "%q does not match %s", s, re)
		return "", false
	}
	return s, true
}

// oneOf reads a string that must be one of allowed.
func (w *walker) oneOf(n *node, path string, allowed ...string) (string, bool) {
	s, ok := w.str(n, path)
	if !ok {
		return "", false
	}
	if !slices.Contains(allowed, s) {
		w.node(n, path, "must be %s, not %q", orList(allowed), s)
		return "", false
	}
	return s, true
}

// orList is "a", "a or b", "a, b or c".
func orList(items []string) string {
	if len(items) == 1 {
		return items[0]
	}
	return strings.Join(items[:len(items)-1], ", ") + " or " + items[len(items)-1]
}

func (w *walker) boolean(n *node, path string) (bool, bool) {
	if n.kind != kindBool {
		w.node(n, path, "must be true or false")
		return false, false
	}
	return n.b, true
}

func (w *walker) integer(n *node, path string) (int, bool) {
	if !n.isInt() {
		w.node(n, path, "must be an integer")
		return 0, false
	}
	v, err := strconv.Atoi(n.s)
	if err != nil {
		w.node(n, path, "%s is out of range", n.s)
		return 0, false
	}
	return v, true
}

// intRange reads an integer in [lo, hi].
func (w *walker) intRange(n *node, path string, lo, hi int) (int, bool) {
	v, ok := w.integer(n, path)
	if !ok {
		return 0, false
	}
	if v < lo || v > hi {
		w.node(n, path, "must be between %d and %d", lo, hi)
		return 0, false
	}
	return v, true
}

// positive reads an integer greater than 0.
func (w *walker) positive(n *node, path string) (int, bool) {
	v, ok := w.integer(n, path)
	if !ok {
		return 0, false
	}
	if v <= 0 {
		w.node(n, path, "must be greater than 0")
		return 0, false
	}
	return v, true
}

// duration reads a positive duration in Go's syntax ("30s", "5m", "1h30m").
func (w *walker) duration(n *node, path string) (Duration, bool) {
	if n.kind != kindString {
		w.node(n, path, `must be a duration such as "30s", "5m" or "1h"`)
		return 0, false
	}
	d, err := time.ParseDuration(n.s)
	if err != nil {
		w.node(n, path, `invalid duration %q: write it as "30s", "5m" or "1h"`, n.s)
		return 0, false
	}
	if d <= 0 {
		w.node(n, path, "must be greater than 0")
		return 0, false
	}
	return Duration(d), true
}

// idleTimeout reads idle_timeout: 0 (the job's workers give their capacity up as soon as its
// queue is empty), never (they stay), or a positive duration of no work after which they exit.
// nil is never, the default.
func (w *walker) idleTimeout(n *node, path string) *Duration {
	switch {
	case n.kind == kindString && n.s == "never":
		return nil
	case (n.isInt() || n.kind == kindString) && n.s == "0":
		return new(Duration)
	case n.kind != kindString:
		w.node(n, path, `must be 0, never, or a duration such as "30s", "5m" or "1h"`)
		return nil
	}
	d, err := time.ParseDuration(n.s)
	if err != nil || d < 0 {
		w.node(n, path, `invalid idle_timeout %q: write 0, never, or a duration such as "30s", "5m" or "1h"`, n.s)
		return nil
	}
	return (*Duration)(&d) // 0s is 0
}

// names reads a list of strings, each matching re and none twice; what names the items in the
// duplicate message ("duplicate secret").
func (w *walker) names(n *node, path string, re *regexp.Regexp, what string) ([]string, bool) {
	if n.kind != kindList {
		w.node(n, path, "must be a list")
		return nil, false
	}
	out := make([]string, 0, len(n.list))
	ok := true
	for i, c := range n.list {
		s, good := w.name(c, index(path, i), re)
		switch {
		case !good:
			ok = false
		case slices.Contains(out, s):
			w.node(c, index(path, i), "duplicate %s %q", what, s)
			ok = false
		default:
			out = append(out, s)
		}
	}
	return out, ok
}

// Priorities by name.
const (
	PriorityLow    = -100
	PriorityNormal = 0
	PriorityHigh   = 100
)

var errPriority = errors.New("must be low, normal, high or an integer from -1000 to 1000")

// priority reads low, normal, high or an integer in [-1000, 1000].
func priority(n *node) (int, error) {
	switch {
	case n.kind == kindString:
		switch n.s {
		case "low":
			return PriorityLow, nil
		case "normal":
			return PriorityNormal, nil
		case "high":
			return PriorityHigh, nil
		}
	case n.isInt():
		if v, err := strconv.Atoi(n.s); err == nil && v >= -1000 && v <= 1000 {
			return v, nil
		}
	}
	return 0, errPriority
}
