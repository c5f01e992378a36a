package ui

import (
	"fmt"
	"slices"
	"testing"
)

// crossings counts pairs of edges between the same two layers that cross.
func crossings(l *dagLayout) int {
	type seg struct{ x1, y1, x2, y2 int }
	pos := map[string]*dagNode{}
	for _, n := range l.Nodes {
		pos[n.ID] = n
	}
	var segs []seg
	for _, e := range l.Edges {
		a, b := pos[e.From], pos[e.To]
		segs = append(segs, seg{a.X, a.Y, b.X, b.Y})
	}
	n := 0
	for i := range segs {
		for j := i + 1; j < len(segs); j++ {
			a, b := segs[i], segs[j]
			if a.x1 == b.x1 && a.x2 == b.x2 && (a.y1-b.y1)*(a.y2-b.y2) < 0 {
				n++
			}
		}
	}
	return n
}

func TestLayoutDAG(t *testing.T) {
	tasks := func(deps map[string][]string, order ...string) []dagTask {
		var ts []dagTask
		for _, k := range order {
			ts = append(ts, dagTask{ID: "id-" + k, Key: k, Status: "pending", DependsOn: deps[k]})
		}
		return ts
	}
	cases := []struct {
		name      string
		tasks     []dagTask
		layers    map[string]int // key → layer (column)
		edges     int
		crossings int
	}{
		{"the example job: two roots, a fan-out and a join",
			tasks(map[string][]string{"color": {"scrape"}, "font": {"scrape"}, "compile": {"color", "font"}},
				"scrape", "analyze", "color", "font", "compile"),
			map[string]int{"scrape": 0, "analyze": 0, "color": 1, "font": 1, "compile": 2}, 4, 0},
		{"a task goes one layer right of its deepest parent",
			tasks(map[string][]string{"b": {"a"}, "c": {"b"}, "d": {"a", "c"}}, "a", "b", "c", "d"),
			map[string]int{"a": 0, "b": 1, "c": 2, "d": 3}, 4, 0},
		{"children listed before their parents",
			tasks(map[string][]string{"child": {"parent"}}, "child", "parent"),
			map[string]int{"parent": 0, "child": 1}, 1, 0},
		{"ordering removes the crossing of submission order",
			// Submission order puts x's child below y's: a crossing the barycenter sweep undoes.
			tasks(map[string][]string{"cy": {"y"}, "cx": {"x"}}, "x", "y", "cy", "cx"),
			map[string]int{"x": 0, "y": 0, "cx": 1, "cy": 1}, 2, 0},
		{"a dependency outside the job is left out",
			tasks(map[string][]string{"a": {"elsewhere"}}, "a"),
			map[string]int{"a": 0}, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := layoutDAG(tc.tasks)
			for _, n := range l.Nodes {
				if want := tc.layers[n.Key]; n.X != margin+want*(nodeW+layerGap) {
					t.Errorf("%s at x=%d, want layer %d", n.Key, n.X, want)
				}
				if n.X+nodeW > l.Width-margin || n.Y+nodeH > l.Height-margin+1 || n.Y < margin {
					t.Errorf("%s at (%d,%d) outside the %dx%d drawing", n.Key, n.X, n.Y, l.Width, l.Height)
				}
			}
			if len(l.Edges) != tc.edges {
				t.Errorf("%d edges, want %d", len(l.Edges), tc.edges)
			}
			if c := crossings(l); c != tc.crossings {
				t.Errorf("%d crossings, want %d", c, tc.crossings)
			}
		})
	}
}

// lattice is a DAG of n tasks in which task i >= 10 depends on tasks i/10 and i-10.
func lattice(n int) []dagTask {
	var ts []dagTask
	for i := range n {
		var deps []string
		if i >= 10 {
			deps = []string{fmt.Sprint(i / 10), fmt.Sprint(i - 10)}
		}
		ts = append(ts, dagTask{ID: fmt.Sprint("id", i), Key: fmt.Sprint(i), DependsOn: deps})
	}
	return ts
}

// A 1,000-task DAG is laid out with every node in its own place.
func TestLayoutDAGLarge(t *testing.T) {
	ts := lattice(1000)
	l := layoutDAG(ts)
	seen := map[[2]int]string{}
	for _, n := range l.Nodes {
		p := [2]int{n.X, n.Y}
		if other, ok := seen[p]; ok {
			t.Fatalf("%s and %s share the place %v", n.Key, other, p)
		}
		seen[p] = n.Key
	}
	want := 0
	for _, tk := range ts {
		want += len(slices.Compact(slices.Clone(tk.DependsOn)))
	}
	if len(l.Edges) != want {
		t.Errorf("%d edges, want one per distinct dependency: %d", len(l.Edges), want)
	}
}

func BenchmarkLayoutDAG1000(b *testing.B) {
	ts := lattice(1000)
	for b.Loop() {
		layoutDAG(ts)
	}
}
