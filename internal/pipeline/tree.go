package pipeline

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
)

// The generic tree a document is decoded into before it is validated. YAML and JSON both become
// this tree, so the validator, the typed Document and the content hash see one shape whichever
// syntax the user wrote.

type kind uint8

const (
	kindNull kind = iota
	kindBool
	kindNumber
	kindString
	kindList
	kindMap
	// kindInvalid is a value the reader could not take (an unsupported tag, a number out of
	// range). It was reported when read; problems about it are not reported again.
	kindInvalid
)

// node is one value of the document. A number keeps its normalized literal in s (see
// normalizeInt and normalizeFloat): the same number always has the same spelling.
type node struct {
	kind    kind
	line    int // 1-based line in the document; 0 if unknown
	b       bool
	s       string
	list    []*node
	entries []entry // a map's entries in document order, keys unique
}

type entry struct {
	key  string
	line int
	val  *node
}

// lookup returns the value of key, or nil when the key is absent or null: an explicit null is
// the same as leaving the field out. An invalid value is returned as it is, so that the field
// does not also count as missing.
func (n *node) lookup(key string) *node {
	for _, e := range n.entries {
		if e.key == key {
			if e.val == nil || e.val.kind == kindNull {
				return nil
			}
			return e.val
		}
	}
	return nil
}

// isInt reports whether a number node is integral (its normalized literal has no fraction or
// exponent).
func (n *node) isInt() bool {
	return n.kind == kindNumber && !strings.ContainsAny(n.s, ".eE")
}

// toAny turns a tree into the values encoding/json produces with UseNumber.
func (n *node) toAny() any {
	switch n.kind {
	case kindBool:
		return n.b
	case kindNumber:
		return json.Number(n.s)
	case kindString:
		return n.s
	case kindList:
		out := make([]any, len(n.list))
		for i, c := range n.list {
			out[i] = c.toAny()
		}
		return out
	case kindMap:
		out := make(map[string]any, len(n.entries))
		for _, e := range n.entries {
			out[e.key] = e.val.toAny()
		}
		return out
	}
	return nil
}

// normalizeInt spells a decimal integer literal (optionally signed) without a plus sign or
// leading zeros, and "-0" as "0". It keeps every digit, however many.
func normalizeInt(lit string) string {
	neg := false
	switch {
	case strings.HasPrefix(lit, "-"):
		neg, lit = true, lit[1:]
	case strings.HasPrefix(lit, "+"):
		lit = lit[1:]
	}
	lit = strings.TrimLeft(lit, "0")
	if lit == "" {
		return "0"
	}
	if neg {
		return "-" + lit
	}
	return lit
}

// normalizeFloat spells a finite float: integral values below 1e15 as integers (so 2.0 is 2),
// others in Go's shortest round-tripping form.
func normalizeFloat(f float64) string {
	if f == math.Trunc(f) && math.Abs(f) < 1e15 {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

func isDecimalInt(s string) bool {
	if strings.HasPrefix(s, "-") || strings.HasPrefix(s, "+") {
		s = s[1:]
	}
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// normalizeNumber normalizes a JSON number literal; ok is false for a number no float64 can hold.
func normalizeNumber(lit string) (string, bool) {
	if isDecimalInt(lit) {
		return normalizeInt(lit), true
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return "", false
	}
	return normalizeFloat(f), true
}

// Limits on what a document may make the reader do.
const (
	// MaxDocumentSize is the largest document Parse reads.
	MaxDocumentSize = 1 << 20
	// maxDepth bounds the nesting of maps and lists.
	maxDepth = 64
	// maxNodes bounds the values of a document once YAML aliases are expanded, so that a small
	// document of nested aliases cannot grow into a huge tree.
	maxNodes = 200_000
)
