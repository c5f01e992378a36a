package sqltext

import (
	"strconv"
	"sync"
)

// Statements are written with numbered placeholders ("$1"), which a statement may repeat and use
// in any order. SQLite treats "$1" as a named parameter and resolves each name, on every run,
// by a linear scan of the statement's names: for the batch statements this was 16% of the
// server's CPU. Where the store asks for it (sqldb.Dialect.Positional), Positional rewrites each
// statement once into plain "?" placeholders, which SQLite binds by position, and lays out each
// run's arguments to match.

// positional is a statement rewritten to "?" placeholders: its i-th "?" takes the argument
// that "$(order[i]+1)" named. order is nil when the statement needs no rewriting.
type positional struct {
	text  string
	order []int
}

// positionals caches the rewriting of each statement text (their number is bounded: the
// statements are constants, or built over lists padded to size classes).
var positionals sync.Map // string → *positional

// Positional returns query with "?" placeholders and args laid out for them.
func Positional(query string, args []any) (string, []any) {
	v, ok := positionals.Load(query)
	if !ok {
		v, _ = positionals.LoadOrStore(query, rewritePositional(query))
	}
	p := v.(*positional)
	if p.order == nil {
		return query, args
	}
	out := make([]any, len(p.order))
	for i, k := range p.order {
		if k >= len(args) {
			return query, args // too few arguments: let the driver say so about the original
		}
		out[i] = args[k]
	}
	return p.text, out
}

// rewritePositional replaces each "$N" outside string literals, quoted identifiers and comments
// with "?". A statement that already has "?" placeholders, or has none at all, is left as it is.
func rewritePositional(query string) *positional {
	var (
		b     []byte
		order []int
		last  int // query[last:] is not yet copied to b
	)
	for i := 0; i < len(query); i++ {
		switch c := query[i]; {
		case c == '\'' || c == '"':
			// A quoted string or identifier; a doubled quote inside it is an escaped quote.
			for i++; i < len(query); i++ {
				if query[i] == c {
					if i+1 < len(query) && query[i+1] == c {
						i++
						continue
					}
					break
				}
			}
		case c == '-' && i+1 < len(query) && query[i+1] == '-':
			for i < len(query) && query[i] != '\n' {
				i++
			}
		case c == '?':
			return &positional{text: query}
		case c == '$':
			j := i + 1
			for j < len(query) && query[j] >= '0' && query[j] <= '9' {
				j++
			}
			n, err := strconv.Atoi(query[i+1 : j])
			if err != nil || n < 1 {
				continue
			}
			b = append(append(b, query[last:i]...), '?')
			order = append(order, n-1)
			last = j
			i = j - 1
		}
	}
	if order == nil {
		return &positional{text: query}
	}
	return &positional{text: string(append(b, query[last:]...)), order: order}
}
