package bench

import (
	"encoding/json"
	"fmt"

	"github.com/baton-dev/baton/client"
)

// The DAG shapes a bench submits.
const (
	Flat    = "flat"    // independent tasks
	Chain   = "chain"   // t0 → t1 → … → tN-1
	Fanout  = "fanout"  // t0 → every other task
	Diamond = "diamond" // t0 → t1 … tN-2 → tN-1
)

// DAGs lists the shapes in the order the usage text gives them.
var DAGs = []string{Flat, Chain, Fanout, Diamond}

// jobBodies are the POST /jobs bodies of one phase, encoded before the clock starts so that the
// submission time is the server's, not the encoder's.
type jobBodies [][]byte

// buildJobs splits n tasks into jobs of at most size tasks, each of the given shape, and encodes
// them. Runtime "push" hands them to the server's push runtime.
func buildJobs(shape string, n, size int, taskName, runtime, jobPrefix string) (jobBodies, error) {
	sizes := jobSizes(n, size)
	jobs := make(jobBodies, len(sizes))
	for i, k := range sizes {
		body, err := json.Marshal(client.SubmitJobRequest{Name: fmt.Sprintf("%s-%d", jobPrefix, i), Tasks: shapeTasks(shape, k, taskName, runtime)})
		if err != nil {
			return nil, fmt.Errorf("encode job %d: %w", i, err)
		}
		jobs[i] = body
	}
	return jobs, nil
}

// jobSizes is how many tasks each job of buildJobs holds: size each, the last one the rest.
func jobSizes(n, size int) []int {
	var sizes []int
	for ; n > 0; n -= min(n, size) {
		sizes = append(sizes, min(n, size))
	}
	return sizes
}

// shapeTasks returns the n tasks of one job of the shape. A job too small for its shape keeps
// what fits: a diamond of two tasks is root → sink, of one a lone root.
func shapeTasks(shape string, n int, taskName, runtime string) []client.Task {
	tasks := make([]client.Task, n)
	key := func(i int) string { return fmt.Sprintf("t%d", i) }
	for i := range tasks {
		tasks[i] = client.Task{TaskID: key(i), Name: taskName, Runtime: runtime}
	}
	for i := 1; i < n; i++ {
		switch shape {
		case Chain:
			tasks[i].DependsOn = []string{key(i - 1)}
		case Fanout:
			tasks[i].DependsOn = []string{key(0)}
		case Diamond:
			if i < n-1 || n == 2 {
				tasks[i].DependsOn = []string{key(0)}
			}
		}
	}
	if shape == Diamond && n > 2 {
		middles := make([]string, 0, n-2)
		for i := 1; i < n-1; i++ {
			middles = append(middles, key(i))
		}
		tasks[n-1].DependsOn = middles
	}
	return tasks
}

// parentKeys lists the producer's taskIds of a claimed task's parents, from the dependency
// outputs its claim carried: the server's own view of the edges.
func parentKeys(deps map[string]json.RawMessage) []string {
	if len(deps) == 0 {
		return nil
	}
	keys := make([]string, 0, len(deps))
	for k := range deps {
		keys = append(keys, k)
	}
	return keys
}
