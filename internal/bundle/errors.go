package bundle

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// Error is every refusal of a bundle: Path is the entry or manifest member at fault ("" for the
// archive as a whole), Reason says what is wrong in a sentence a user can act on. A manifest
// member is named as in the document, e.g. files[2].sha256 or env_allowlist[0].
type Error struct {
	Path, Reason string
}

// Error is "bundle: PATH: REASON", the path quoted when it holds anything but printable
// characters, or "bundle: REASON" for the archive as a whole.
func (e *Error) Error() string {
	if e.Path == "" {
		return "bundle: " + e.Reason
	}
	return "bundle: " + quotePath(e.Path) + ": " + e.Reason
}

// Errors is every refusal found in one pass over a bundle, in the order they were met. A pass
// that finds one problem returns that *Error alone; errors.As finds an *Error in either.
type Errors []*Error

// Error joins the refusals with "; ".
func (es Errors) Error() string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.Error()
	}
	return strings.Join(s, "; ")
}

// Unwrap lets errors.As and errors.Is see each refusal.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// maxProblems bounds the refusals one answer lists, so that a hostile archive of a million bad
// entries gets a short answer.
const maxProblems = 20

// problems collects what a pass over a manifest or an archive finds.
type problems struct {
	list Errors
	more int // found beyond maxProblems
}

func (ps *problems) add(path, format string, args ...any) {
	if len(ps.list) == maxProblems {
		ps.more++
		return
	}
	ps.list = append(ps.list, &Error{Path: path, Reason: fmt.Sprintf(format, args...)})
}

// err is nil, the one *Error found, or Errors.
func (ps *problems) err() error {
	switch {
	case len(ps.list) == 0:
		return nil
	case len(ps.list) == 1:
		return ps.list[0]
	}
	list := ps.list
	if ps.more > 0 {
		list = append(list[:len(list):len(list)], &Error{Reason: fmt.Sprintf("and %d more problems", ps.more)})
	}
	return list
}

// quotePath is p as it is when every character of it is printable and not a space or a quote,
// else p quoted in Go syntax, so that a hostile name cannot forge a message.
func quotePath(p string) string {
	for _, r := range p {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) || r == '"' || r == '\\' || r == unicode.ReplacementChar {
			return strconv.Quote(p)
		}
	}
	return p
}
