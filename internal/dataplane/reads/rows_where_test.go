package reads

import (
	"encoding/json"
	"reflect"
	"testing"
)

// A task's where is the AND of its input edge's and its own: the caller narrows, never widens.
func TestAndWhere(t *testing.T) {
	n := func(s string) json.Number { return json.Number(s) }
	for _, c := range []struct {
		name         string
		edge, caller map[string]any
		want         map[string]any
		empty        bool
	}{
		{"no caller filter", map[string]any{"severity": "high"}, nil, map[string]any{"severity": "high"}, false},
		{"another column", map[string]any{"severity": "high"}, map[string]any{"block": n("7")},
			map[string]any{"severity": "high", "block": n("7")}, false},
		{"the same value", map[string]any{"severity": "high"}, map[string]any{"severity": "high"}, map[string]any{"severity": "high"}, false},
		{"a list narrowed to one", map[string]any{"severity": []any{"low", "medium"}}, map[string]any{"severity": "low"},
			map[string]any{"severity": "low"}, false},
		{"a list narrowed to a list", map[string]any{"severity": []any{"low", "medium", "high"}},
			map[string]any{"severity": []any{"high", "low", "critical"}}, map[string]any{"severity": []any{"high", "low"}}, false},
		{"no value in common", map[string]any{"severity": []any{"low", "medium"}}, map[string]any{"severity": "high"}, nil, true},
		{"a widening list", map[string]any{"severity": "high"}, map[string]any{"severity": []any{"high", "low"}},
			map[string]any{"severity": "high"}, false},
		{"numbers by value", map[string]any{"block": []any{n("1"), n("2")}}, map[string]any{"block": n("2")}, map[string]any{"block": n("2")}, false},
	} {
		got, empty := andWhere(c.edge, c.caller)
		if empty != c.empty || (!c.empty && !reflect.DeepEqual(got, c.want)) {
			t.Errorf("%s: %v (empty %v), want %v (empty %v)", c.name, got, empty, c.want, c.empty)
		}
	}
}
