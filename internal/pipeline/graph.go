package pipeline

import (
	"slices"
	"strings"
)

// cycles reports every group of jobs that feed one another in a circle, once per group: the
// shortest cycle through the group's first job, in the direction data flows ("a -> b" means b
// reads a). An input from a dataset this document publishes is an edge from the job publishing it.
func (w *walker) cycles(jobsNode *node, doc *Document, dc *docContext) {
	down := make([][]int, len(doc.Jobs)) // job → the jobs reading it
	for v, j := range doc.Jobs {
		if ref, ok := dc.jobs[j.Name]; !ok || ref.index != v {
			continue // an invalid or duplicate name: the job is not in the graph
		}
		for _, in := range j.Inputs {
			u := -1
			if ref, ok := dc.jobs[in.From.Job]; ok && ref.index != v {
				u = ref.index
			} else if p := dc.publish[in.From.Dataset]; p != nil {
				u = dc.jobs[p.From.Job].index
			}
			if u >= 0 && !slices.Contains(down[u], v) {
				down[u] = append(down[u], v)
			}
		}
	}

	groups := stronglyConnected(down)
	for _, g := range groups {
		slices.Sort(g)
	}
	slices.SortFunc(groups, func(a, b []int) int { return a[0] - b[0] })
	for _, g := range groups {
		start := g[0]
		if len(g) == 1 && !slices.Contains(down[start], start) {
			continue
		}
		names := make([]string, 0, len(g)+1)
		for _, v := range shortestCycle(down, start, g) {
			names = append(names, doc.Jobs[v].Name)
		}
		w.node(jobsNode.list[start], "jobs", "cycle %s", strings.Join(names, " -> "))
	}
}

// stronglyConnected returns the strongly connected components of the graph adj (Tarjan).
func stronglyConnected(adj [][]int) [][]int {
	n := len(adj)
	order := make([]int, n) // visit order, 1-based; 0 is unvisited
	low := make([]int, n)
	onStack := make([]bool, n)
	var stack []int
	var groups [][]int
	next := 0
	var visit func(v int)
	visit = func(v int) {
		next++
		order[v], low[v] = next, next
		stack = append(stack, v)
		onStack[v] = true
		for _, u := range adj[v] {
			switch {
			case order[u] == 0:
				visit(u)
				low[v] = min(low[v], low[u])
			case onStack[u]:
				low[v] = min(low[v], order[u])
			}
		}
		if low[v] != order[v] {
			return
		}
		var g []int
		for {
			u := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			onStack[u] = false
			g = append(g, u)
			if u == v {
				break
			}
		}
		groups = append(groups, g)
	}
	for v := range adj {
		if order[v] == 0 {
			visit(v)
		}
	}
	return groups
}

// shortestCycle returns start, the jobs of a shortest way back to it within group (sorted), and
// start again.
func shortestCycle(adj [][]int, start int, group []int) []int {
	prev := map[int]int{start: -1}
	queue := []int{start}
	for len(queue) > 0 {
		x := queue[0]
		queue = queue[1:]
		for _, y := range adj[x] {
			if y == start {
				var back []int
				for v := x; v != -1; v = prev[v] {
					back = append(back, v)
				}
				slices.Reverse(back)
				return append(back, start)
			}
			_, inGroup := slices.BinarySearch(group, y)
			if _, seen := prev[y]; !seen && inGroup {
				prev[y] = x
				queue = append(queue, y)
			}
		}
	}
	return []int{start, start} // unreachable for a group with a cycle
}
