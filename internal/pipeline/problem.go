package pipeline

import (
	"fmt"
	"strconv"
	"strings"
)

// Problem is one thing wrong with a document: the path of the field it concerns ("" for the
// document as a whole), what is wrong, and the line of the document where the field is, when known.
type Problem struct {
	Path    string `json:"path"`
	Message string `json:"message"`
	Line    int    `json:"line,omitempty"`
}

// String is "path: message", followed by " (line N)" when the line is known.
func (p Problem) String() string {
	s := p.Message
	if p.Path != "" {
		s = p.Path + ": " + s
	}
	if p.Line > 0 {
		s += " (line " + strconv.Itoa(p.Line) + ")"
	}
	return s
}

// Problems is every problem found in one document, in the order the walk met them.
type Problems []Problem

// Error joins the problems with "; ", so that a non-empty Problems can be returned as an error.
func (ps Problems) Error() string {
	return strings.Join(ps.Strings(), "; ")
}

// Strings renders each problem with String.
func (ps Problems) Strings() []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}

// problems collects what a walk finds.
type problems struct {
	list Problems
}

// at reports a problem about the field at path, which sits on the given line (0 if unknown).
func (ps *problems) at(path string, line int, format string, args ...any) {
	ps.list = append(ps.list, Problem{Path: path, Message: fmt.Sprintf(format, args...), Line: line})
}

// node reports a problem about the value n, found at path, unless n is invalid: the reader has
// said what is wrong with it already.
func (ps *problems) node(n *node, path string, format string, args ...any) {
	if n.kind == kindInvalid {
		return
	}
	ps.at(path, n.line, format, args...)
}

// child is the path of a map key under p: p.key, or p["key"] for a key that would read
// ambiguously; several keys go down several levels.
func child(p string, keys ...string) string {
	for _, key := range keys {
		switch {
		case !plainKey(key):
			p += "[" + strconv.Quote(key) + "]"
		case p == "":
			p = key
		default:
			p += "." + key
		}
	}
	return p
}

// index is the path of a list element under p.
func index(p string, i int) string {
	return p + "[" + strconv.Itoa(i) + "]"
}

func plainKey(k string) bool {
	if k == "" {
		return false
	}
	for i, r := range k {
		switch {
		case r == '_', r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
