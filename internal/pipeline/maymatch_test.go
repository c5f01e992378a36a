package pipeline

import (
	"encoding/json"
	"testing"
)

func TestMayMatch(t *testing.T) {
	values := map[string][]any{
		"severity": {"high", "low"},
		"code":     {float64(3), json.Number("7")},
		"at":       {"2026-01-02T03:04:05Z"},
		"ok":       {true},
	}
	tests := []struct {
		name  string
		where map[string]any
		want  bool
	}{
		{"no where", nil, true},
		{"equal", map[string]any{"severity": "high"}, true},
		{"absent value", map[string]any{"severity": "medium"}, false},
		{"list with one present", map[string]any{"severity": []any{"medium", "low"}}, true},
		{"list with none present", map[string]any{"severity": []any{"medium", "none"}}, false},
		{"unknown field matches anything", map[string]any{"region": "eu"}, true},
		{"number by value", map[string]any{"code": int64(7)}, true},
		{"float against json number", map[string]any{"code": 3.0}, true},
		{"number absent", map[string]any{"code": 4}, false},
		{"string never equals number", map[string]any{"code": "3"}, false},
		{"timestamp by instant", map[string]any{"at": "2026-01-02T04:04:05+01:00"}, true},
		{"other instant", map[string]any{"at": "2026-01-02T03:04:06Z"}, false},
		{"boolean", map[string]any{"ok": true}, true},
		{"boolean absent", map[string]any{"ok": false}, false},
		{"every key must hold", map[string]any{"severity": "high", "code": 4}, false},
		{"both keys hold", map[string]any{"severity": "low", "code": 3}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := MayMatch(tt.where, values); got != tt.want {
				t.Errorf("MayMatch(%v) = %v, want %v", tt.where, got, tt.want)
			}
		})
	}
	if !MayMatch(map[string]any{"severity": "x"}, nil) {
		t.Error("no values known: anything may match")
	}
}
