package secrets

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Redacted is what a Redactor writes in place of a secret.
const Redacted = "[REDACTED]"

// MinRedactLen is the length of the shortest value a Redactor redacts. Shorter values are not
// redacted by value: they would mangle every log line that happens to hold them.
const MinRedactLen = 4

// Redactor knows the values of the secrets delivered so far and replaces each, wherever it
// appears, with Redacted. It covers the value itself and its encoded forms:
//
//   - base64, standard and URL-safe, padded and raw, as a whole encoded text and inside a longer
//     one (where the value may start at any of three bit alignments; the one or two characters
//     at each end that the value shares with its neighbours stay visible);
//   - url.QueryEscape and url.PathEscape;
//   - the escaped text inside a JSON string (as encoding/json and log/slog write it) and inside
//     a Go-quoted string (%q, slog's text handler);
//   - hexadecimal, lower and upper case.
//
// It does not cover other encodings (base32, base64 wrapped across lines, compression,
// encryption), a value cut in two by something else, nor values shorter than MinRedactLen.
// Occurrences that overlap (of two secrets that share a part, say) are redacted as one, so that
// no part of either stays.
//
// A Redactor is safe for concurrent use, and its zero value is ready to use. Add is meant to be
// rare and Redact frequent: Redact takes no lock.
type Redactor struct {
	mu     sync.Mutex          // serialises Add
	values map[string]struct{} // the values added
	forms  map[string]struct{} // every form of every value added

	m atomic.Pointer[matcher] // nil until a value is added
}

// NewRedactor returns a Redactor that knows no secret yet.
func NewRedactor() *Redactor { return &Redactor{} }

// Add makes r redact value from now on. A value shorter than MinRedactLen is ignored, and one
// added before costs nothing more.
func (r *Redactor) Add(value string) {
	if len(value) < MinRedactLen {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.values[value]; ok {
		return
	}
	if r.values == nil {
		r.values, r.forms = map[string]struct{}{}, map[string]struct{}{}
	}
	r.values[value] = struct{}{}
	for _, f := range forms(value) {
		r.forms[f] = struct{}{}
	}
	r.m.Store(newMatcher(slices.Sorted(maps.Keys(r.forms))))
}

// Redact returns s with every secret r knows replaced. It returns s itself, and allocates
// nothing, when s holds none.
func (r *Redactor) Redact(s string) string {
	m := r.m.Load()
	if m == nil {
		return s
	}
	var buf [8]span
	spans := find(m, s, buf[:0])
	if len(spans) == 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + len(spans)*len(Redacted))
	at := 0
	for _, sp := range spans {
		b.WriteString(s[at:sp.start])
		b.WriteString(Redacted)
		at = sp.end
	}
	b.WriteString(s[at:])
	return b.String()
}

// RedactBytes returns b with every secret r knows replaced. It returns b itself when b holds
// none, and otherwise a new slice: b is never written to.
func (r *Redactor) RedactBytes(b []byte) []byte {
	m := r.m.Load()
	if m == nil {
		return b
	}
	var buf [8]span
	spans := find(m, b, buf[:0])
	if len(spans) == 0 {
		return b
	}
	return replace(make([]byte, 0, len(b)+len(spans)*len(Redacted)), b, spans)
}
