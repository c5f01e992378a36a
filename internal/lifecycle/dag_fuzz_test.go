package lifecycle_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/baton-dev/baton/internal/lifecycle"
)

// fuzzTask is a task of a submission in the producer API's JSON shape.
type fuzzTask struct {
	TaskID                  string          `json:"taskId"`
	Name                    string          `json:"name"`
	DependsOn               []string        `json:"dependsOn"`
	Input                   json.RawMessage `json:"input"`
	Queue                   string          `json:"queue"`
	Priority                int             `json:"priority"`
	Runtime                 string          `json:"runtime"`
	MaxAttempts             *int            `json:"maxAttempts"`
	BackoffBaseMs           *int64          `json:"backoffBaseMs"`
	BackoffMaxMs            *int64          `json:"backoffMaxMs"`
	TimeoutSeconds          *int            `json:"timeoutSeconds"`
	HeartbeatTimeoutSeconds *int            `json:"heartbeatTimeoutSeconds"`
	CancelGraceSeconds      *int            `json:"cancelGraceSeconds"`
}

// fuzzSpecs reads a submission {"tasks": [...]} or a bare array of tasks.
func fuzzSpecs(data []byte) ([]lifecycle.TaskSpec, bool) {
	var sub struct {
		Tasks []fuzzTask `json:"tasks"`
	}
	if json.Unmarshal(data, &sub) != nil {
		if json.Unmarshal(data, &sub.Tasks) != nil {
			return nil, false
		}
	}
	specs := make([]lifecycle.TaskSpec, len(sub.Tasks))
	for i, t := range sub.Tasks {
		specs[i] = lifecycle.TaskSpec{Key: t.TaskID, Name: t.Name, DependsOn: t.DependsOn, Input: t.Input, Queue: t.Queue,
			Priority: t.Priority, Runtime: t.Runtime, MaxAttempts: t.MaxAttempts, BackoffBaseMs: t.BackoffBaseMs,
			BackoffMaxMs: t.BackoffMaxMs, TimeoutSeconds: t.TimeoutSeconds, HeartbeatTimeoutSeconds: t.HeartbeatTimeoutSeconds,
			CancelGraceSeconds: t.CancelGraceSeconds}
	}
	return specs, true
}

// FuzzValidateDAG validates fuzzed submissions (JSON, as the producer API takes them) against
// fuzzed existing keys (comma-separated) and a fuzzed task cap, and checks the result against an
// independent statement of the rules: ValidateDAG accepts exactly the DAGs the rules allow, its
// Order is then a topological order of the new tasks, it reports at least one error otherwise,
// and it neither panics, changes its input nor answers differently twice.
func FuzzValidateDAG(f *testing.F) {
	paths, _ := filepath.Glob(filepath.Join("..", "..", "examples", "*.json"))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, "", uint8(50))
	}
	f.Add([]byte(`[{"taskId":"extra-analysis","name":"market-analysis","dependsOn":["scrape-store"]},{"taskId":"final-report","name":"compile-report","dependsOn":["extra-analysis","compile-result"]}]`),
		"scrape-store,analyze-competitors,color-tags,font-pairing,compile-result", uint8(50))
	f.Add([]byte(`[{"taskId":"a","name":"x","dependsOn":["b"]},{"taskId":"b","name":"x","dependsOn":["a"]},{"taskId":"c","name":"x","dependsOn":["b"]}]`), "", uint8(0))
	f.Add([]byte(`[{"taskId":"a","name":"x","dependsOn":["a"]}]`), "", uint8(0))
	f.Add([]byte(`[{"taskId":"a","name":"x","dependsOn":["e","e"]}]`), "e", uint8(2))
	f.Add([]byte(`[{"taskId":"a","name":"x"},{"taskId":"a","name":"y"}]`), "", uint8(1))
	f.Add([]byte(`[{"taskId":"a b","name":""},{"taskId":"ok","name":"n\u0007"}]`), "", uint8(3))
	f.Add([]byte(`[{"taskId":"a","name":"x","queue":"jobs:stream:high","priority":1000,"runtime":"push","maxAttempts":1000,"backoffBaseMs":0,"backoffMaxMs":86400000,"timeoutSeconds":604800,"heartbeatTimeoutSeconds":2,"cancelGraceSeconds":0}]`), "", uint8(1))
	f.Add([]byte(`[{"taskId":"a","name":"x","priority":-1001,"runtime":"lambda","maxAttempts":0,"backoffBaseMs":5,"backoffMaxMs":4,"timeoutSeconds":0,"heartbeatTimeoutSeconds":1,"cancelGraceSeconds":-1}]`), "", uint8(1))
	f.Add([]byte(`[]`), "", uint8(0))
	f.Fuzz(func(t *testing.T, data []byte, existingList string, maxTasks uint8) {
		specs, ok := fuzzSpecs(data)
		if !ok {
			return
		}
		var existing []string
		if existingList != "" {
			existing = strings.Split(existingList, ",")
		}
		before := deepCopy(specs)
		res := lifecycle.ValidateDAG(specs, existing, int(maxTasks))
		if !reflect.DeepEqual(specs, before) {
			t.Fatal("ValidateDAG changed its input")
		}
		if again := lifecycle.ValidateDAG(specs, existing, int(maxTasks)); !reflect.DeepEqual(again, res) {
			t.Fatalf("two validations differ:\n%+v\n%+v", res, again)
		}
		valid := len(res.Errors) == 0
		for _, e := range res.Errors {
			if e == "" {
				t.Fatal("an empty error message")
			}
		}
		if want, why := dagOracle(specs, existing, int(maxTasks)); valid != want {
			t.Fatalf("valid = %v, the rules say %v (%s); errors: %q", valid, want, why, res.Errors)
		}
		if !valid {
			if res.Order != nil {
				t.Fatalf("an invalid DAG has an order: %q", res.Order)
			}
			return
		}
		// Order lists every new task once, each after its new parents.
		if len(res.Order) != len(specs) {
			t.Fatalf("order %q of %d tasks", res.Order, len(specs))
		}
		pos := make(map[string]int, len(res.Order))
		for i, k := range res.Order {
			if _, dup := pos[k]; dup {
				t.Fatalf("order lists %q twice", k)
			}
			pos[k] = i
		}
		for _, s := range specs {
			p, ok := pos[s.Key]
			if !ok {
				t.Fatalf("order %q misses %q", res.Order, s.Key)
			}
			for _, d := range s.DependsOn {
				if dp, isNew := pos[d]; isNew && dp >= p {
					t.Fatalf("order %q puts %q before its parent %q", res.Order, s.Key, d)
				}
			}
		}
	})
}

func deepCopy(specs []lifecycle.TaskSpec) []lifecycle.TaskSpec {
	out := make([]lifecycle.TaskSpec, len(specs))
	for i, s := range specs {
		s.DependsOn = slices.Clone(s.DependsOn)
		s.Input = slices.Clone(s.Input)
		out[i] = s
	}
	return out
}

// dagOracle says whether the rules allow tasks on top of existing, and if not, one reason.
func dagOracle(tasks []lifecycle.TaskSpec, existing []string, maxTasks int) (bool, string) {
	if len(tasks) == 0 {
		return false, "no tasks"
	}
	if maxTasks > 0 && len(tasks)+len(existing) > maxTasks {
		return false, "too many tasks"
	}
	old := map[string]bool{}
	for _, k := range existing {
		old[k] = true
	}
	keys := map[string]bool{}
	for _, t := range tasks {
		if !keyOK(t.Key) {
			return false, "bad key " + t.Key
		}
		if keys[t.Key] || old[t.Key] {
			return false, "duplicate key " + t.Key
		}
		keys[t.Key] = true
		if t.Name == "" || !nameOK(t.Name) || t.Queue != "" && !nameOK(t.Queue) {
			return false, "bad name or queue"
		}
		deps := slices.Clone(t.DependsOn)
		slices.Sort(deps)
		if len(slices.Compact(deps)) != len(t.DependsOn) {
			return false, "duplicate dependency"
		}
		if !optionsOK(t) {
			return false, "an option out of range"
		}
	}
	for _, t := range tasks {
		for _, d := range t.DependsOn {
			if !keys[d] && !old[d] {
				return false, "unknown parent " + d
			}
		}
	}
	// Depth-first search for a cycle among the new tasks.
	parents := map[string][]string{}
	for _, t := range tasks {
		for _, d := range t.DependsOn {
			if keys[d] {
				parents[t.Key] = append(parents[t.Key], d)
			}
		}
	}
	state := map[string]int{} // 1: on the path, 2: done
	var cyclic func(k string) bool
	cyclic = func(k string) bool {
		switch state[k] {
		case 1:
			return true
		case 2:
			return false
		}
		state[k] = 1
		for _, p := range parents[k] {
			if cyclic(p) {
				return true
			}
		}
		state[k] = 2
		return false
	}
	for _, t := range tasks {
		if cyclic(t.Key) {
			return false, "a cycle"
		}
	}
	if len(existing) == 0 && !slices.ContainsFunc(tasks, func(t lifecycle.TaskSpec) bool { return len(t.DependsOn) == 0 }) {
		return false, "no root"
	}
	return true, ""
}

func keyOK(k string) bool {
	if len(k) < 1 || len(k) > 128 {
		return false
	}
	for _, r := range k {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

func nameOK(n string) bool {
	return utf8.ValidString(n) && utf8.RuneCountInString(n) <= lifecycle.MaxNameLength && !strings.ContainsFunc(n, unicode.IsControl)
}

func optionsOK(t lifecycle.TaskSpec) bool {
	in := func(p *int, lo, hi int) bool { return p == nil || *p >= lo && *p <= hi }
	in64 := func(p *int64, lo, hi int64) bool { return p == nil || *p >= lo && *p <= hi }
	return t.Priority >= -1000 && t.Priority <= 1000 &&
		(t.Runtime == "" || t.Runtime == "pull" || t.Runtime == "push") &&
		in(t.MaxAttempts, 1, 1000) && in64(t.BackoffBaseMs, 0, 86400000) && in64(t.BackoffMaxMs, 0, 86400000) &&
		(t.BackoffBaseMs == nil || t.BackoffMaxMs == nil || *t.BackoffMaxMs >= *t.BackoffBaseMs) &&
		in(t.TimeoutSeconds, 1, 604800) && in(t.HeartbeatTimeoutSeconds, 2, 86400) && in(t.CancelGraceSeconds, 0, 86400)
}
