package sqltext

import (
	"slices"
	"testing"
)

func TestValues(t *testing.T) {
	rows := [][]any{{"a", 1}, {"b", nil}}
	stmt, args := Values("INSERT INTO t (s, n) VALUES ", rows, 2, " ON CONFLICT DO NOTHING", false)
	if want := "INSERT INTO t (s, n) VALUES ($1, $2), ($3, $4) ON CONFLICT DO NOTHING"; stmt != want {
		t.Errorf("numbered: %q, want %q", stmt, want)
	}
	if want := []any{"a", 1, "b", nil}; !slices.Equal(args, want) {
		t.Errorf("arguments %v, want %v", args, want)
	}
	if stmt, _ := Values("INSERT INTO t (s, n) VALUES ", rows, 2, "", true); stmt != "INSERT INTO t (s, n) VALUES (?, ?), (?, ?)" {
		t.Errorf("positional: %q", stmt)
	}
}

func TestChunkLen(t *testing.T) {
	for _, tc := range []struct {
		left, perStmt int
		sizeClasses   bool
		want          int
	}{
		{2500, 1000, false, 1000},
		{500, 1000, false, 500},
		{2500, 1000, true, 1000},
		{500, 1000, true, 256},
		{1, 1000, true, 1},
		{1000, 1000, true, 1000},
	} {
		if got := ChunkLen(tc.left, tc.perStmt, tc.sizeClasses); got != tc.want {
			t.Errorf("ChunkLen(%d, %d, %v) = %d, want %d", tc.left, tc.perStmt, tc.sizeClasses, got, tc.want)
		}
	}
}

func TestListsPaddedToSizeClasses(t *testing.T) {
	args := StringArgs([]string{"a", "b", "c"})
	if want := []any{"a", "b", "c", ""}; !slices.Equal(args, want) {
		t.Errorf("StringArgs = %v, want %v", args, want)
	}
	if got := Placeholders(2, len(args)); got != "$2, $3, $4, $5" {
		t.Errorf("Placeholders = %q", got)
	}
	if got := Args([]string{"a", "b"}); !slices.Equal(got, []any{"a", "b"}) {
		t.Errorf("Args = %v", got)
	}
	if got := Prefixed("t.", "a, b,\n\tc"); got != "t.a, t.b,\n\tt.c" {
		t.Errorf("Prefixed = %q", got)
	}
}

func TestPlaceholdersAcrossWidthsInOneAllocation(t *testing.T) {
	for _, tc := range []struct {
		from, n int
		want    string
	}{
		{1, 0, ""},
		{1, 1, "$1"},
		{8, 4, "$8, $9, $10, $11"},
		{98, 3, "$98, $99, $100"},
	} {
		if got := Placeholders(tc.from, tc.n); got != tc.want {
			t.Errorf("Placeholders(%d, %d) = %q, want %q", tc.from, tc.n, got, tc.want)
		}
	}
	if n := testing.AllocsPerRun(10, func() { _ = Placeholders(2, 1000) }); n != 1 {
		t.Errorf("Placeholders of 1,000 allocates %v times, want once", n)
	}
}
