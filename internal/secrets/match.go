package secrets

import "slices"

// matcher finds every occurrence of a set of patterns, each at least MinRedactLen bytes long, in
// one pass over a text. Each position's first four bytes are looked up in a bit filter, and only
// on a hit in the map of the patterns that begin with them, so a text without secrets costs a
// load and a bit test per byte and allocates nothing. Unlike strings.Replacer, it finds
// overlapping occurrences too (of two secrets that share a part, or of two forms of one), so that
// no part of either is left visible.
type matcher struct {
	filter  [1 << filterBits / 64]uint64
	byKey   map[uint32][]string // patterns by their first four bytes, longest first
	longest int
}

const filterBits = 16

func newMatcher(patterns []string) *matcher {
	m := &matcher{byKey: map[uint32][]string{}}
	for _, p := range patterns {
		k := key(p, 0)
		m.byKey[k] = append(m.byKey[k], p)
		h := slot(k)
		m.filter[h/64] |= 1 << (h % 64)
		m.longest = max(m.longest, len(p))
	}
	for _, ps := range m.byKey {
		slices.SortFunc(ps, func(a, b string) int { return len(b) - len(a) })
	}
	return m
}

// key is the four bytes of s from i on, as a number.
func key[T string | []byte](s T, i int) uint32 {
	return uint32(s[i]) | uint32(s[i+1])<<8 | uint32(s[i+2])<<16 | uint32(s[i+3])<<24
}

// slot is a key's bit in the filter.
func slot(k uint32) uint32 { return k * 0x9e3779b1 >> (32 - filterBits) }

// span is a part of a text to redact: [start, end).
type span struct{ start, end int }

// find appends to spans the parts of s that patterns cover, in order, overlapping occurrences
// merged into one span.
func find[T string | []byte](m *matcher, s T, spans []span) []span {
	for i := 0; i+MinRedactLen <= len(s); i++ {
		k := key(s, i)
		if h := slot(k); m.filter[h/64]&(1<<(h%64)) == 0 {
			continue
		}
		for _, p := range m.byKey[k] {
			if len(p) > len(s)-i || string(s[i:i+len(p)]) != p {
				continue
			}
			end := i + len(p)
			if n := len(spans); n > 0 && i < spans[n-1].end {
				spans[n-1].end = max(spans[n-1].end, end)
			} else {
				spans = append(spans, span{i, end})
			}
			break // the longest pattern that starts here covers the others
		}
	}
	return spans
}

// replace appends to dst the text s with each span replaced by Redacted.
func replace[T string | []byte](dst []byte, s T, spans []span) []byte {
	at := 0
	for _, sp := range spans {
		dst = append(dst, s[at:sp.start]...)
		dst = append(dst, Redacted...)
		at = sp.end
	}
	return append(dst, s[at:]...)
}
