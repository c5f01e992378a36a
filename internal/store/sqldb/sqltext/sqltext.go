// Package sqltext builds SQL text and arguments for the store's statements: placeholders,
// positional rewrites, unnest arrays and JSON rows, multi-row VALUES lists, and the conversions
// of times, JSON and optional values to arguments and back from columns. It knows nothing of the
// store's records.
package sqltext

import (
	"math/bits"
	"strconv"
	"strings"
)

// Placeholders returns "$from, $from+1, ..." for n parameters. It allocates the text once: the
// lists of the batch statements are hundreds of placeholders long.
func Placeholders(from, n int) string {
	var (
		b   strings.Builder
		num [20]byte
	)
	digits := len(strconv.AppendInt(num[:0], int64(from+n), 10)) // at most, in any of the numbers
	b.Grow(n * (len(", $") + digits))
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('$')
		b.Write(strconv.AppendInt(num[:0], int64(from+i), 10))
	}
	return b.String()
}

// Padded is the size class of a list of n items: the next power of two. Lists are padded to it
// with items that match nothing, so that each statement has a few texts, prepared once and
// cached (by the SQLite store's statement cache and by pgx), instead of one per length.
func Padded(n int) int {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len(uint(n-1))
}

// StringArgs returns ss as arguments, padded to their size class with "": for lists of ids, none
// of which is empty.
func StringArgs(ss []string) []any {
	args := make([]any, Padded(len(ss)))
	for i := range args {
		args[i] = ""
		if i < len(ss) {
			args[i] = ss[i]
		}
	}
	return args
}

// Args returns vs as arguments, one each, in order.
func Args[T any](vs []T) []any {
	args := make([]any, len(vs))
	for i, v := range vs {
		args[i] = v
	}
	return args
}

// Prefixed returns the column list cols ("a, b") with each column prefixed ("t.a, t.b").
func Prefixed(prefix, cols string) string {
	out := []byte{}
	start := true
	for i := 0; i < len(cols); i++ {
		c := cols[i]
		if start && c != ' ' && c != '\n' && c != '\t' {
			out = append(out, prefix...)
			start = false
		}
		if c == ',' {
			start = true
		}
		out = append(out, c)
	}
	return string(out)
}

// ChunkLen is how many of the left rows of a multi-row insert its next statement takes: at most
// perStmt. With sizeClasses (where statements are kept prepared), fewer than perStmt are taken
// as a power of two, so that a batch of n rows is at most log2(n) statements, each of a few texts
// that the database does not parse again.
func ChunkLen(left, perStmt int, sizeClasses bool) int {
	n := min(perStmt, left)
	if sizeClasses && n < perStmt {
		n = 1 << (bits.Len(uint(n)) - 1)
	}
	return n
}

// Values returns head ("INSERT INTO t (a, b) VALUES ") followed by a VALUES list of rows, each of
// ncols values, and suffix, with the values as its arguments: "$1, $2..." placeholders, or "?"
// where positional.
func Values(head string, rows [][]any, ncols int, suffix string, positional bool) (string, []any) {
	var b strings.Builder
	b.WriteString(head)
	args := make([]any, 0, len(rows)*ncols)
	for i, row := range rows {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('(')
		for j := range row {
			if j > 0 {
				b.WriteString(", ")
			}
			if positional {
				b.WriteByte('?')
			} else {
				b.WriteByte('$')
				b.WriteString(strconv.Itoa(len(args) + 1))
			}
			args = append(args, row[j])
		}
		b.WriteByte(')')
	}
	b.WriteString(suffix)
	return b.String(), args
}
