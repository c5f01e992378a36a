package lifecycle

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

const dagInvalidKeySuffix = "\" — must match /^[a-zA-Z0-9-_]{1,128}$/"

func dagT(key, name string, deps ...string) TaskSpec {
	return TaskSpec{Key: key, Name: name, DependsOn: deps}
}

// dagOpt is a valid one-task job whose task "a" is changed by mod, for the optional-field rows.
func dagOpt(mod func(*TaskSpec)) []TaskSpec {
	t := dagT("a", "work")
	mod(&t)
	return []TaskSpec{t}
}

// dagChain is t0 ← t1 ← … ← t(n-1).
func dagChain(prefix string, n int) []TaskSpec {
	tasks := make([]TaskSpec, n)
	for i := range tasks {
		tasks[i] = dagT(fmt.Sprintf("%s%d", prefix, i), "work")
		if i > 0 {
			tasks[i].DependsOn = []string{tasks[i-1].Key}
		}
	}
	return tasks
}

func dagKeys(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return keys
}

// dagAssertTopo checks that order holds every new key once, each after its new parents.
func dagAssertTopo(t *testing.T, tasks []TaskSpec, order []string) {
	t.Helper()
	if len(order) != len(tasks) {
		t.Fatalf("order has %d keys, want %d", len(order), len(tasks))
	}
	pos := make(map[string]int, len(order))
	for i, k := range order {
		if _, dup := pos[k]; dup {
			t.Fatalf("order lists %q twice", k)
		}
		pos[k] = i
	}
	for _, task := range tasks {
		p, ok := pos[task.Key]
		if !ok {
			t.Fatalf("order lacks %q", task.Key)
		}
		for _, dep := range task.DependsOn {
			if q, isNew := pos[dep]; isNew && q >= p {
				t.Fatalf("%q (at %d) comes before its parent %q (at %d)", task.Key, p, dep, q)
			}
		}
	}
}

func TestValidateDAG(t *testing.T) {
	t.Parallel()
	long128 := strings.Repeat("k", 128)
	long129 := strings.Repeat("k", 129)

	tests := []struct {
		name     string
		tasks    []TaskSpec
		existing []string
		max      int
		want     []string // nil: valid
	}{
		// Stage 1: empty.
		{name: "nil tasks", tasks: nil, want: []string{"tasks must be a non-empty array"}},
		{name: "empty tasks", tasks: []TaskSpec{}, want: []string{"tasks must be a non-empty array"}},
		{
			name: "empty new tasks on an existing job", tasks: []TaskSpec{}, existing: []string{"x"},
			want: []string{"tasks must be a non-empty array"},
		},
		{
			name: "empty is checked before the cap", tasks: nil, existing: dagKeys("e", 60), max: 50,
			want: []string{"tasks must be a non-empty array"},
		},

		// Stage 2: size cap.
		{name: "51 new tasks over a cap of 50", tasks: dagChain("t", 51), max: 50, want: []string{"Too many tasks: 51 (max 50)"}},
		{
			name: "existing plus new over the cap prints the total", tasks: dagChain("t", 3), existing: dagKeys("e", 48), max: 50,
			want: []string{"Too many tasks: 51 (max 50)"},
		},
		{name: "exactly at the cap", tasks: dagChain("t", 2), existing: dagKeys("e", 48), max: 50},
		{name: "zero cap means no cap", tasks: dagChain("t", 60), max: 0},
		{
			name: "cap is checked before field errors", tasks: []TaskSpec{dagT("bad key", ""), dagT("b", ""), dagT("c", "")}, max: 2,
			want: []string{"Too many tasks: 3 (max 2)"},
		},

		// Stage 3: keys.
		{
			name: "invalid taskId", tasks: []TaskSpec{dagT("my task!", "scrape")},
			want: []string{`Invalid taskId: "my task!` + dagInvalidKeySuffix},
		},
		{name: "empty taskId", tasks: []TaskSpec{dagT("", "scrape")}, want: []string{`Invalid taskId: "` + dagInvalidKeySuffix}},
		{name: "taskId of 129 characters", tasks: []TaskSpec{dagT(long129, "scrape")}, want: []string{`Invalid taskId: "` + long129 + dagInvalidKeySuffix}},
		{name: "taskId of 128 characters", tasks: []TaskSpec{dagT(long128, "scrape")}},
		{name: "taskId with every allowed class", tasks: []TaskSpec{dagT("aZ09-_", "scrape")}},
		{name: "non-ASCII taskId", tasks: []TaskSpec{dagT("tâche", "scrape")}, want: []string{`Invalid taskId: "tâche` + dagInvalidKeySuffix}},
		{
			name: "taskId quote is printed raw", tasks: []TaskSpec{dagT(`a"b`, "scrape")},
			want: []string{`Invalid taskId: "a"b` + dagInvalidKeySuffix},
		},
		{
			// The validator skips the rest of a task with an invalid taskId, so the missing name
			// is not reported.
			name:  "invalid taskId skips the task's other checks",
			tasks: []TaskSpec{{Key: "my task!", Priority: 5000, Runtime: "lambda", DependsOn: []string{"x", "x"}}},
			want:  []string{`Invalid taskId: "my task!` + dagInvalidKeySuffix},
		},
		{
			name: "duplicate new taskId", tasks: []TaskSpec{dagT("scrape-store", "scrape"), dagT("scrape-store", "scrape")},
			want: []string{"Duplicate taskId: scrape-store"},
		},
		{
			name: "new taskId equal to an existing one", tasks: []TaskSpec{dagT("scrape-store", "scrape")}, existing: []string{"scrape-store"},
			want: []string{"Duplicate taskId: scrape-store"},
		},
		{
			name: "duplicate taskId still gets its name checked", tasks: []TaskSpec{dagT("a", "work"), dagT("a", "")},
			want: []string{"Duplicate taskId: a", "Task a: name is required"},
		},
		{
			name: "a key repeated three times is reported twice", tasks: []TaskSpec{dagT("a", "w"), dagT("a", "w"), dagT("a", "w")},
			want: []string{"Duplicate taskId: a", "Duplicate taskId: a"},
		},

		// Stage 3: name and dependsOn.
		{name: "missing name", tasks: []TaskSpec{dagT("a", "")}, want: []string{"Task a: name is required"}},
		{
			name: "duplicate dependency", tasks: []TaskSpec{dagT("r", "w"), dagT("a", "w", "r", "r", "r")},
			want: []string{`Task a: duplicate dependency "r"`},
		},
		{
			name: "two duplicate dependencies in order of repetition", tasks: []TaskSpec{dagT("r", "w"), dagT("s", "w"), dagT("a", "w", "r", "s", "s", "r")},
			want: []string{`Task a: duplicate dependency "s"`, `Task a: duplicate dependency "r"`},
		},
		{
			name: "same parent in two tasks is no duplicate", tasks: []TaskSpec{dagT("r", "w"), dagT("a", "w", "r"), dagT("b", "w", "r", "a")},
		},
		{
			name: "duplicate dependency on an existing task", tasks: []TaskSpec{dagT("a", "w", "x", "x")}, existing: []string{"x"},
			want: []string{`Task a: duplicate dependency "x"`},
		},
		{
			name:  "name, then duplicate dependency, then optional fields",
			tasks: []TaskSpec{dagT("r", "w"), {Key: "a", DependsOn: []string{"r", "r"}, Priority: 1001}},
			want:  []string{"Task a: name is required", `Task a: duplicate dependency "r"`, "Task a: priority must be between -1000 and 1000"},
		},
		{
			name: "errors collected across tasks in input order",
			tasks: []TaskSpec{
				dagT("ok", ""),
				dagT("bad key", "w"),
				dagT("ok", "w"),
				{Key: "x", Name: "w", Priority: 5000, Runtime: "lambda"},
			},
			want: []string{
				"Task ok: name is required",
				`Invalid taskId: "bad key` + dagInvalidKeySuffix,
				"Duplicate taskId: ok",
				"Task x: priority must be between -1000 and 1000",
				`Task x: runtime must be "pull" or "push"`,
			},
		},
		{
			name: "field errors hide unknown dependencies", tasks: []TaskSpec{dagT("a", "", "nope")},
			want: []string{"Task a: name is required"},
		},

		// Stage 3: optional fields.
		{name: "queue invalid", tasks: dagOpt(func(t *TaskSpec) { t.Queue = "my\x00queue" }), want: []string{"Task a: queue must not contain control characters"}},
		{name: "queue a Redis-style key", tasks: dagOpt(func(t *TaskSpec) { t.Queue = "jobs:stream:high.v2" })},
		{name: "queue too long", tasks: dagOpt(func(t *TaskSpec) { t.Queue = strings.Repeat("q", 257) }), want: []string{"Task a: queue must be at most 256 characters"}},
		{name: "queue valid", tasks: dagOpt(func(t *TaskSpec) { t.Queue = "gpu-queue_1" })},
		{name: "priority above 1000", tasks: dagOpt(func(t *TaskSpec) { t.Priority = 1001 }), want: []string{"Task a: priority must be between -1000 and 1000"}},
		{name: "priority below -1000", tasks: dagOpt(func(t *TaskSpec) { t.Priority = -1001 }), want: []string{"Task a: priority must be between -1000 and 1000"}},
		{name: "runtime unknown", tasks: dagOpt(func(t *TaskSpec) { t.Runtime = "lambda" }), want: []string{`Task a: runtime must be "pull" or "push"`}},
		{name: "runtime is case sensitive", tasks: dagOpt(func(t *TaskSpec) { t.Runtime = "Pull" }), want: []string{`Task a: runtime must be "pull" or "push"`}},
		{name: "runtime pull", tasks: dagOpt(func(t *TaskSpec) { t.Runtime = "pull" })},
		{name: "runtime push", tasks: dagOpt(func(t *TaskSpec) { t.Runtime = "push" })},
		{name: "maxAttempts 0", tasks: dagOpt(func(t *TaskSpec) { t.MaxAttempts = new(0) }), want: []string{"Task a: maxAttempts must be between 1 and 1000"}},
		{name: "maxAttempts 1001", tasks: dagOpt(func(t *TaskSpec) { t.MaxAttempts = new(1001) }), want: []string{"Task a: maxAttempts must be between 1 and 1000"}},
		{name: "backoffBaseMs -1", tasks: dagOpt(func(t *TaskSpec) { t.BackoffBaseMs = new(int64(-1)) }), want: []string{"Task a: backoffBaseMs must be between 0 and 86400000"}},
		{name: "backoffBaseMs 86400001", tasks: dagOpt(func(t *TaskSpec) { t.BackoffBaseMs = new(int64(86400001)) }), want: []string{"Task a: backoffBaseMs must be between 0 and 86400000"}},
		{name: "backoffMaxMs -1", tasks: dagOpt(func(t *TaskSpec) { t.BackoffMaxMs = new(int64(-1)) }), want: []string{"Task a: backoffMaxMs must be between 0 and 86400000"}},
		{name: "backoffMaxMs 86400001", tasks: dagOpt(func(t *TaskSpec) { t.BackoffMaxMs = new(int64(86400001)) }), want: []string{"Task a: backoffMaxMs must be between 0 and 86400000"}},
		{
			name:  "backoffMaxMs below backoffBaseMs",
			tasks: dagOpt(func(t *TaskSpec) { t.BackoffBaseMs, t.BackoffMaxMs = new(int64(5000)), new(int64(4999)) }),
			want:  []string{"Task a: backoffMaxMs must not be less than backoffBaseMs"},
		},
		{name: "backoffMaxMs equal to backoffBaseMs", tasks: dagOpt(func(t *TaskSpec) { t.BackoffBaseMs, t.BackoffMaxMs = new(int64(5000)), new(int64(5000)) })},
		{name: "backoffMaxMs alone is not compared", tasks: dagOpt(func(t *TaskSpec) { t.BackoffMaxMs = new(int64(0)) })},
		{name: "timeoutSeconds 0", tasks: dagOpt(func(t *TaskSpec) { t.TimeoutSeconds = new(0) }), want: []string{"Task a: timeoutSeconds must be between 1 and 604800"}},
		{name: "timeoutSeconds 604801", tasks: dagOpt(func(t *TaskSpec) { t.TimeoutSeconds = new(604801) }), want: []string{"Task a: timeoutSeconds must be between 1 and 604800"}},
		{name: "heartbeatTimeoutSeconds 1", tasks: dagOpt(func(t *TaskSpec) { t.HeartbeatTimeoutSeconds = new(1) }), want: []string{"Task a: heartbeatTimeoutSeconds must be between 2 and 86400"}},
		{name: "heartbeatTimeoutSeconds 86401", tasks: dagOpt(func(t *TaskSpec) { t.HeartbeatTimeoutSeconds = new(86401) }), want: []string{"Task a: heartbeatTimeoutSeconds must be between 2 and 86400"}},
		{name: "cancelGraceSeconds -1", tasks: dagOpt(func(t *TaskSpec) { t.CancelGraceSeconds = new(-1) }), want: []string{"Task a: cancelGraceSeconds must be between 0 and 86400"}},
		{name: "cancelGraceSeconds 86401", tasks: dagOpt(func(t *TaskSpec) { t.CancelGraceSeconds = new(86401) }), want: []string{"Task a: cancelGraceSeconds must be between 0 and 86400"}},
		{
			name: "optional fields at their lower bounds",
			tasks: dagOpt(func(t *TaskSpec) {
				t.Priority, t.MaxAttempts, t.BackoffBaseMs, t.BackoffMaxMs = -1000, new(1), new(int64(0)), new(int64(0))
				t.TimeoutSeconds, t.HeartbeatTimeoutSeconds, t.CancelGraceSeconds = new(1), new(2), new(0)
				t.Queue = "q"
			}),
		},
		{
			name: "optional fields at their upper bounds",
			tasks: dagOpt(func(t *TaskSpec) {
				t.Priority, t.MaxAttempts, t.BackoffBaseMs, t.BackoffMaxMs = 1000, new(1000), new(int64(86400000)), new(int64(86400000))
				t.TimeoutSeconds, t.HeartbeatTimeoutSeconds, t.CancelGraceSeconds = new(604800), new(86400), new(86400)
				t.Queue = long128
			}),
		},
		{
			name: "every optional-field error in order",
			tasks: dagOpt(func(t *TaskSpec) {
				t.Queue, t.Priority, t.Runtime = "bad\nqueue", -5000, "lambda"
				t.MaxAttempts, t.BackoffBaseMs, t.BackoffMaxMs = new(0), new(int64(86400001)), new(int64(-1))
				t.TimeoutSeconds, t.HeartbeatTimeoutSeconds, t.CancelGraceSeconds = new(0), new(0), new(-1)
			}),
			want: []string{
				"Task a: queue must not contain control characters",
				"Task a: priority must be between -1000 and 1000",
				`Task a: runtime must be "pull" or "push"`,
				"Task a: maxAttempts must be between 1 and 1000",
				"Task a: backoffBaseMs must be between 0 and 86400000",
				"Task a: backoffMaxMs must be between 0 and 86400000",
				"Task a: backoffMaxMs must not be less than backoffBaseMs",
				"Task a: timeoutSeconds must be between 1 and 604800",
				"Task a: heartbeatTimeoutSeconds must be between 2 and 86400",
				"Task a: cancelGraceSeconds must be between 0 and 86400",
			},
		},

		// Stage 4: dependency references.
		{
			name: "unknown dependency", tasks: []TaskSpec{dagT("scrape-store", "s"), dagT("color-tags", "c", "scrape-store", "unknown-task")},
			want: []string{`Task color-tags depends on "unknown-task" which does not exist`},
		},
		{
			name:  "unknown dependencies collected in order",
			tasks: []TaskSpec{dagT("r", "w"), dagT("a", "w", "x", "r", "y"), dagT("b", "w", "z")},
			want: []string{
				`Task a depends on "x" which does not exist`,
				`Task a depends on "y" which does not exist`,
				`Task b depends on "z" which does not exist`,
			},
		},
		{
			name: "dependency on an empty key", tasks: []TaskSpec{dagT("r", "w"), dagT("a", "w", "")},
			want: []string{`Task a depends on "" which does not exist`},
		},
		{
			name: "dependency on an existing task is known", tasks: []TaskSpec{dagT("extra-analysis", "m", "scrape-store")},
			existing: []string{"scrape-store", "compile-result"},
		},
		{
			name: "add tasks depending on existing and new tasks",
			tasks: []TaskSpec{
				dagT("extra-analysis", "market-analysis", "scrape-store"),
				dagT("final-report", "compile-report", "extra-analysis", "compile-result"),
			},
			existing: []string{"scrape-store", "color-tags", "compile-result"},
		},
		{
			name: "unknown dependencies hide a cycle", tasks: []TaskSpec{dagT("a", "w", "b"), dagT("b", "w", "a", "nope")},
			want: []string{`Task b depends on "nope" which does not exist`},
		},

		// Stage 5: cycles.
		{
			name: "three-task cycle", tasks: []TaskSpec{dagT("a", "w", "c"), dagT("b", "w", "a"), dagT("c", "w", "b")},
			want: []string{"Cycle detected involving: a, b, c"},
		},
		{
			name: "cycle listed in input order", tasks: []TaskSpec{dagT("r", "w"), dagT("c", "w", "b"), dagT("a", "w", "r", "c"), dagT("b", "w", "a")},
			want: []string{"Cycle detected involving: c, a, b"},
		},
		{
			name: "self-dependency", tasks: []TaskSpec{dagT("r", "w"), dagT("a", "w", "a")},
			want: []string{"Cycle detected involving: a"},
		},
		{
			name: "cycle and a task downstream of it",
			tasks: []TaskSpec{
				dagT("r", "w"), dagT("a", "w", "r", "b"), dagT("b", "w", "a"), dagT("d", "w", "b"), dagT("e", "w", "r"),
			},
			want: []string{"Cycle detected involving: a, b, d"},
		},
		{
			name: "cycle among new tasks of an existing job", tasks: []TaskSpec{dagT("a", "w", "x", "b"), dagT("b", "w", "a")},
			existing: []string{"x"},
			want:     []string{"Cycle detected involving: a, b"},
		},
		{
			name: "self-dependency in an existing job", tasks: []TaskSpec{dagT("a", "w", "a")}, existing: []string{"x"},
			want: []string{"Cycle detected involving: a"},
		},

		// Stage 6: roots. On creation a root always exists once stage 5 passes (see TestDAGRootError).
		{
			name: "added tasks need no root of their own", tasks: []TaskSpec{dagT("a", "w", "x"), dagT("b", "w", "a", "y")},
			existing: []string{"x", "y"},
		},
		{
			name:  "the example job",
			tasks: []TaskSpec{dagT("scrape-store", "scrape-store"), dagT("analyze-competitors", "analyze-competitors"), dagT("color-tags", "color-tags", "scrape-store"), dagT("font-pairing", "font-pairing", "scrape-store"), dagT("compile-result", "compile-result", "color-tags", "font-pairing")},
			max:   50,
		},
	}

	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := ValidateDAG(tc.tasks, tc.existing, tc.max)
			if !slices.Equal(got.Errors, tc.want) {
				t.Fatalf("Errors:\n got %q\nwant %q", got.Errors, tc.want)
			}
			if tc.want != nil {
				if got.Order != nil {
					t.Fatalf("Order = %q, want nil for an invalid DAG", got.Order)
				}
				return
			}
			dagAssertTopo(t, tc.tasks, got.Order)
		})
	}
}

// TestDAGRootError covers stage 6 directly: through ValidateDAG it cannot fire, because on creation
// every parent is a new task and an acyclic set of them always has one without parents.
func TestDAGRootError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		tasks    []TaskSpec
		existing int
		want     string
	}{
		{name: "no root on creation", tasks: []TaskSpec{dagT("a", "w", "x")}, want: "At least one root task (empty dependsOn) is required"},
		{name: "a root on creation", tasks: []TaskSpec{dagT("a", "w", "x"), dagT("b", "w")}},
		{name: "no root when adding tasks", tasks: []TaskSpec{dagT("a", "w", "x")}, existing: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := dagRootError(tc.tasks, tc.existing); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestValidateDAGDiamondOrder(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		tasks []TaskSpec
		want  []string // the documented Kahn order: FIFO, children in input order
	}{
		{
			name:  "parents listed first",
			tasks: []TaskSpec{dagT("a", "w"), dagT("b", "w", "a"), dagT("c", "w", "a"), dagT("d", "w", "b", "c")},
			want:  []string{"a", "b", "c", "d"},
		},
		{
			name:  "children listed first",
			tasks: []TaskSpec{dagT("d", "w", "b", "c"), dagT("c", "w", "a"), dagT("b", "w", "a"), dagT("a", "w")},
			want:  []string{"a", "c", "b", "d"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := ValidateDAG(tc.tasks, nil, 50)
			if len(got.Errors) != 0 {
				t.Fatalf("Errors = %q, want none", got.Errors)
			}
			dagAssertTopo(t, tc.tasks, got.Order)
			if !slices.Equal(got.Order, tc.want) {
				t.Fatalf("Order = %q, want %q", got.Order, tc.want)
			}
		})
	}
}

// dag10k builds 10,000 tasks: a root, a fan-out of 3,000 children of it, 20 chains of 300 hanging
// off the fan-out, 998 tasks joining three fan-out tasks each, and a sink joining all chain tails
// and joins (a fan-in of 1,018). They are listed children first so input order is no valid order.
func dag10k() []TaskSpec {
	const fan, chains, chainLen, joins = 3000, 20, 300, 998
	tasks := make([]TaskSpec, 0, 10000)
	tasks = append(tasks, dagT("root", "w"))
	for i := range fan {
		tasks = append(tasks, dagT(fmt.Sprintf("f%d", i), "w", "root"))
	}
	sinkDeps := make([]string, 0, chains+joins)
	for c := range chains {
		for j := range chainLen {
			key := fmt.Sprintf("c%d-%d", c, j)
			if j == 0 {
				tasks = append(tasks, dagT(key, "w", fmt.Sprintf("f%d", c)))
				continue
			}
			tasks = append(tasks, dagT(key, "w", fmt.Sprintf("c%d-%d", c, j-1), fmt.Sprintf("f%d", (c*chainLen+j)%fan)))
		}
		sinkDeps = append(sinkDeps, fmt.Sprintf("c%d-%d", c, chainLen-1))
	}
	for i := range joins {
		key := fmt.Sprintf("j%d", i)
		tasks = append(tasks, dagT(key, "w", fmt.Sprintf("f%d", 3*i), fmt.Sprintf("f%d", 3*i+1), fmt.Sprintf("f%d", 3*i+2)))
		sinkDeps = append(sinkDeps, key)
	}
	tasks = append(tasks, dagT("sink", "w", sinkDeps...))
	slices.Reverse(tasks)
	return tasks
}

func TestValidateDAG10kOrder(t *testing.T) {
	t.Parallel()
	backwardChain := dagChain("t", 10000)
	slices.Reverse(backwardChain)
	tests := []struct {
		name  string
		tasks []TaskSpec
	}{
		{name: "mixed DAG", tasks: dag10k()},
		{name: "chain listed backwards", tasks: backwardChain},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := ValidateDAG(tc.tasks, nil, 10000)
			if len(got.Errors) != 0 {
				t.Fatalf("Errors = %q, want none", got.Errors)
			}
			dagAssertTopo(t, tc.tasks, got.Order)
		})
	}
}

func BenchmarkValidateDAG10k(b *testing.B) {
	tasks := dag10k()
	if res := ValidateDAG(tasks, nil, 0); len(res.Errors) != 0 {
		b.Fatalf("Errors = %q", res.Errors)
	}
	b.ReportAllocs()
	for b.Loop() {
		ValidateDAG(tasks, nil, 0)
	}
}
