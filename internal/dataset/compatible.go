package dataset

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/baton-dev/baton/internal/pipeline"
)

// ErrIncompatible: a schema that the dataset's table, made for an earlier one, cannot serve.
var ErrIncompatible = errors.New("incompatible dataset schema")

// incompatibleError lists every reason a table cannot serve a schema.
type incompatibleError struct{ reasons []string }

func (e *incompatibleError) Error() string {
	return strings.Join(e.reasons, "; ") + "; a buffered dataset's table only gains optional columns"
}

func (e *incompatibleError) Unwrap() error { return ErrIncompatible }

// Compatible is nil when a table made for old can serve next: next may add columns that are not
// required, add or drop indexes, reorder its columns and its unique key. Anything else is an
// error wrapping ErrIncompatible that lists every incompatibility, the old columns' in their
// order first, then the new columns', then the unique key's.
//
// Dropping an index is allowed because the table may keep it; making a column optional is not,
// since SQLite cannot relax a NOT NULL in place.
func Compatible(old, next *pipeline.Schema) error {
	if old == nil || next == nil {
		return &incompatibleError{[]string{"a schema is missing"}}
	}
	var reasons []string
	for _, o := range old.Columns {
		n, ok := column(next, o.Name)
		if !ok {
			reasons = append(reasons, fmt.Sprintf("column %q was removed", o.Name))
			continue
		}
		if n.Type != o.Type {
			reasons = append(reasons, fmt.Sprintf("column %q changes type from %s to %s", o.Name, o.Type, n.Type))
		}
		switch {
		case n.Required && !o.Required:
			reasons = append(reasons, fmt.Sprintf("column %q becomes required", o.Name))
		case !n.Required && o.Required:
			reasons = append(reasons, fmt.Sprintf("column %q becomes optional", o.Name))
		}
	}
	for _, n := range next.Columns {
		if _, ok := column(old, n.Name); !ok && n.Required {
			reasons = append(reasons, fmt.Sprintf("new column %q is required", n.Name))
		}
	}
	if !sameSet(old.Unique, next.Unique) {
		reasons = append(reasons, fmt.Sprintf("unique key changes from %s to %s", bracket(old.Unique), bracket(next.Unique)))
	}
	if len(reasons) > 0 {
		return &incompatibleError{reasons}
	}
	return nil
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func bracket(names []string) string { return "[" + strings.Join(names, ", ") + "]" }
