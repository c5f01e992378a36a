package ui

import (
	"cmp"
	"fmt"
	"slices"
)

// The drawing of a job's DAG is computed once, on the server, when the job page is rendered: the
// browser only pans, zooms and recolours it as tasks move. Tasks are placed left to right in
// layers (a task one layer right of its deepest parent) and ordered within a layer by the mean
// position of their neighbours (the barycenter heuristic), which keeps most edges short and
// uncrossed. It is O(tasks + edges) per sweep, a few milliseconds for 1,000 tasks.

// Node and layout sizes, in SVG user units.
const (
	nodeW, nodeH = 168, 34
	layerGap     = 72 // between layers
	rowGap       = 14 // between nodes of a layer
	margin       = 16
	sweeps       = 6
	maxLabel     = 22 // characters of a task key shown in its node
)

// dagNode is a task to draw.
type dagNode struct {
	ID, Key, Label, Status string
	X, Y                   int // top left
}

// dagEdge is a dependency, drawn from the parent's right side to the child's left side.
type dagEdge struct {
	From, To string // task ids
	Path     string // SVG path data
}

// dagLayout is a drawn DAG.
type dagLayout struct {
	Nodes         []*dagNode
	Edges         []dagEdge
	Width, Height int
}

// dagTask is what the layout needs of a task: its id, key, status and its parents' keys.
type dagTask struct {
	ID, Key, Status string
	DependsOn       []string
}

// layoutDAG places tasks, given in submission order, and draws one edge per dependency. A
// dependency on a key that is not among the tasks is left out; a cycle (which a job never has)
// would leave its tasks in layer 0.
func layoutDAG(tasks []dagTask) *dagLayout {
	n := len(tasks)
	index := make(map[string]int, n)
	for i, t := range tasks {
		index[t.Key] = i
	}
	parents := make([][]int, n)
	children := make([][]int, n)
	indegree := make([]int, n)
	for i, t := range tasks {
		for j, k := range t.DependsOn {
			if p, ok := index[k]; ok && p != i && !slices.Contains(t.DependsOn[:j], k) {
				parents[i] = append(parents[i], p)
				children[p] = append(children[p], i)
				indegree[i]++
			}
		}
	}
	// Layers by longest path from a root, in topological order (Kahn).
	layer := make([]int, n)
	queue := make([]int, 0, n)
	for i := range n {
		if indegree[i] == 0 {
			queue = append(queue, i)
		}
	}
	for head := 0; head < len(queue); head++ {
		p := queue[head]
		for _, c := range children[p] {
			layer[c] = max(layer[c], layer[p]+1)
			if indegree[c]--; indegree[c] == 0 {
				queue = append(queue, c)
			}
		}
	}
	depth := 0
	for _, l := range layer {
		depth = max(depth, l+1)
	}
	layers := make([][]int, depth)
	for i := range n { // submission order is the starting order within a layer
		layers[layer[i]] = append(layers[layer[i]], i)
	}
	pos := make([]float64, n)
	place := func() {
		for _, l := range layers {
			for r, i := range l {
				pos[i] = float64(r)
			}
		}
	}
	place()
	// Barycenter sweeps: left to right by parents, then right to left by children.
	for s := range sweeps {
		order, neighbours := layers, parents
		if s%2 == 1 {
			order, neighbours = slices.Clone(layers), children
			slices.Reverse(order)
		}
		for _, l := range order {
			key := make(map[int]float64, len(l))
			for _, i := range l {
				key[i] = pos[i]
				if ns := neighbours[i]; len(ns) > 0 {
					sum := 0.0
					for _, j := range ns {
						sum += pos[j]
					}
					key[i] = sum / float64(len(ns))
				}
			}
			slices.SortStableFunc(l, func(a, b int) int { return cmp.Compare(key[a], key[b]) })
			for r, i := range l {
				pos[i] = float64(r)
			}
		}
	}
	// Coordinates: each layer is centred vertically on the tallest.
	rows := 0
	for _, l := range layers {
		rows = max(rows, len(l))
	}
	out := &dagLayout{
		Width:  2*margin + max(depth, 1)*nodeW + max(depth-1, 0)*layerGap,
		Height: 2*margin + max(rows, 1)*nodeH + max(rows-1, 0)*rowGap,
	}
	nodes := make([]*dagNode, n)
	for li, l := range layers {
		offset := (rows - len(l)) * (nodeH + rowGap) / 2
		for r, i := range l {
			t := tasks[i]
			nodes[i] = &dagNode{ID: t.ID, Key: t.Key, Label: truncate(t.Key, maxLabel), Status: t.Status,
				X: margin + li*(nodeW+layerGap), Y: margin + offset + r*(nodeH+rowGap)}
		}
	}
	out.Nodes = nodes
	for i := range n {
		for _, p := range parents[i] {
			a, b := nodes[p], nodes[i]
			x1, y1 := a.X+nodeW, a.Y+nodeH/2
			x2, y2 := b.X, b.Y+nodeH/2
			mid := (x1 + x2) / 2
			out.Edges = append(out.Edges, dagEdge{From: a.ID, To: b.ID,
				Path: fmt.Sprintf("M%d %d C%d %d %d %d %d %d", x1, y1, mid, y1, mid, y2, x2, y2)})
		}
	}
	return out
}

// truncate shortens s to at most n runes, marking a cut with an ellipsis.
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
