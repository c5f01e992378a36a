package lifecycle

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// TaskSpec is one task of a submission as the producer wrote it. Optional fields are pointers so that
// an explicit zero can be told apart from "not given".
type TaskSpec struct {
	Key                     string          // the producer's taskId, unique in its job
	Name                    string          // task type; routes it to workers
	DependsOn               []string        // keys of parent tasks
	Input                   json.RawMessage // static input; nil means {}
	Queue                   string          // "" means the task's Name
	Priority                int             // higher first
	Runtime                 string          // "", "pull" or "push"
	MaxAttempts             *int
	BackoffBaseMs           *int64
	BackoffMaxMs            *int64
	TimeoutSeconds          *int // execution deadline
	HeartbeatTimeoutSeconds *int // lease TTL
	CancelGraceSeconds      *int
}

// DAGResult is the outcome of validating a submission.
type DAGResult struct {
	Errors []string // empty when valid; in the order the validator reports them
	Order  []string // the new tasks' keys in a topological order (parents first); nil when invalid
}

// The messages print the key pattern as a JavaScript regex literal, slashes included.
const dagKeyPattern = "/^[a-zA-Z0-9-_]{1,128}$/"

const dagMaxKeyLen = 128

// ValidateDAG checks tasks (new tasks of a job) against existing, the keys already in the job (nil on
// creation). maxTasks caps the job's total size, existing plus new; 0 means no cap.
//
// The stages and their early returns are those of the producer contract's validator
// (docs/contracts/producer.md): an empty submission, the size cap, per-task field checks,
// dependency references, cycles among the new tasks, and, on creation only, the presence of a root
// task. Each stage reports all of its errors and stops the validation if it found any; the first
// two report a single error.
func ValidateDAG(tasks []TaskSpec, existing []string, maxTasks int) DAGResult {
	if len(tasks) == 0 {
		return dagInvalid("tasks must be a non-empty array")
	}
	if total := len(existing) + len(tasks); maxTasks > 0 && total > maxTasks {
		return dagInvalid("Too many tasks: " + strconv.Itoa(total) + " (max " + strconv.Itoa(maxTasks) + ")")
	}

	existingSet := make(map[string]struct{}, len(existing))
	for _, k := range existing {
		existingSet[k] = struct{}{}
	}

	index, errs := dagCheckFields(tasks, existingSet)
	if len(errs) > 0 {
		return DAGResult{Errors: errs}
	}
	if errs := dagCheckReferences(tasks, index, existingSet); len(errs) > 0 {
		return DAGResult{Errors: errs}
	}
	order, cycle := dagTopoSort(tasks, index)
	if cycle != "" {
		return dagInvalid(cycle)
	}
	if msg := dagRootError(tasks, len(existingSet)); msg != "" {
		return dagInvalid(msg)
	}
	return DAGResult{Order: order}
}

func dagInvalid(msg string) DAGResult {
	return DAGResult{Errors: []string{msg}}
}

// dagCheckFields is stage 3. It returns the index of each new task by key (valid keys only).
func dagCheckFields(tasks []TaskSpec, existing map[string]struct{}) (map[string]int, []string) {
	var errs []string
	index := make(map[string]int, len(tasks))
	// seenDep remembers, per parent key, the last task that listed it, so that duplicate
	// dependencies are found in one pass over all tasks without a per-task set.
	type depMark struct {
		task     int
		reported bool
	}
	seenDep := make(map[string]depMark)

	for i := range tasks {
		t := &tasks[i]
		if !dagValidKey(t.Key) {
			// A task with an invalid key gets no further checks.
			errs = append(errs, "Invalid taskId: \""+t.Key+"\" — must match "+dagKeyPattern)
			continue
		}
		_, dupNew := index[t.Key]
		_, dupOld := existing[t.Key]
		if dupNew || dupOld {
			errs = append(errs, "Duplicate taskId: "+t.Key)
		} else {
			index[t.Key] = i
		}
		if t.Name == "" {
			errs = append(errs, "Task "+t.Key+": name is required")
		} else if msg := CheckName(t.Name); msg != "" {
			errs = append(errs, "Task "+t.Key+": name "+msg)
		}
		for _, dep := range t.DependsOn {
			m, ok := seenDep[dep]
			switch {
			case !ok || m.task != i:
				seenDep[dep] = depMark{task: i}
			case !m.reported:
				errs = append(errs, "Task "+t.Key+": duplicate dependency \""+dep+"\"")
				seenDep[dep] = depMark{task: i, reported: true}
			}
		}
		errs = dagCheckOptions(t, errs)
	}
	return index, errs
}

func dagCheckOptions(t *TaskSpec, errs []string) []string {
	prefix := "Task " + t.Key + ": "
	// A queue is named like a task (its default is the task's name): a Redis-style key such as
	// jobs:stream:high is fine; the transports map names to their own keys and subjects.
	if msg := CheckName(t.Queue); t.Queue != "" && msg != "" {
		errs = append(errs, prefix+"queue "+msg)
	}
	if t.Priority < -1000 || t.Priority > 1000 {
		errs = append(errs, prefix+"priority must be between -1000 and 1000")
	}
	if t.Runtime != "" && t.Runtime != "pull" && t.Runtime != "push" {
		errs = append(errs, prefix+`runtime must be "pull" or "push"`)
	}
	if v := t.MaxAttempts; v != nil && (*v < 1 || *v > 1000) {
		errs = append(errs, prefix+"maxAttempts must be between 1 and 1000")
	}
	if v := t.BackoffBaseMs; v != nil && (*v < 0 || *v > 86400000) {
		errs = append(errs, prefix+"backoffBaseMs must be between 0 and 86400000")
	}
	if v := t.BackoffMaxMs; v != nil && (*v < 0 || *v > 86400000) {
		errs = append(errs, prefix+"backoffMaxMs must be between 0 and 86400000")
	}
	if t.BackoffBaseMs != nil && t.BackoffMaxMs != nil && *t.BackoffMaxMs < *t.BackoffBaseMs {
		errs = append(errs, prefix+"backoffMaxMs must not be less than backoffBaseMs")
	}
	if v := t.TimeoutSeconds; v != nil && (*v < 1 || *v > 604800) {
		errs = append(errs, prefix+"timeoutSeconds must be between 1 and 604800")
	}
	if v := t.HeartbeatTimeoutSeconds; v != nil && (*v < 2 || *v > 86400) {
		errs = append(errs, prefix+"heartbeatTimeoutSeconds must be between 2 and 86400")
	}
	if v := t.CancelGraceSeconds; v != nil && (*v < 0 || *v > 86400) {
		errs = append(errs, prefix+"cancelGraceSeconds must be between 0 and 86400")
	}
	return errs
}

// dagValidKey reports whether s matches /^[a-zA-Z0-9-_]{1,128}$/. Only ASCII can match, so the
// byte length is the character count the JavaScript regex would see.
func dagValidKey(s string) bool {
	if len(s) < 1 || len(s) > dagMaxKeyLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// dagCheckReferences is stage 4: every parent must be a new or an existing task.
func dagCheckReferences(tasks []TaskSpec, index map[string]int, existing map[string]struct{}) []string {
	var errs []string
	for i := range tasks {
		for _, dep := range tasks[i].DependsOn {
			if _, ok := index[dep]; ok {
				continue
			}
			if _, ok := existing[dep]; ok {
				continue
			}
			errs = append(errs, "Task "+tasks[i].Key+" depends on \""+dep+"\" which does not exist")
		}
	}
	return errs
}

// dagTopoSort is stage 5, Kahn's algorithm over the edges between new tasks; parents that already
// exist are resolved and add no edge. It visits in the documented order (a FIFO queue filled in
// input order, children in input order), so Order is deterministic. On a cycle it returns the
// message naming every task left unsorted, in input order.
func dagTopoSort(tasks []TaskSpec, index map[string]int) ([]string, string) {
	n := len(tasks)
	inDegree := make([]int, n)
	// Children are kept in compressed rows: the children of p are children[start[p]:start[p+1]].
	start := make([]int, n+1)
	for i := range tasks {
		for _, dep := range tasks[i].DependsOn {
			if p, ok := index[dep]; ok {
				start[p+1]++
				inDegree[i]++
			}
		}
	}
	for p := 0; p < n; p++ {
		start[p+1] += start[p]
	}
	children := make([]int, start[n])
	next := make([]int, n)
	copy(next, start[:n])
	for i := range tasks {
		for _, dep := range tasks[i].DependsOn {
			if p, ok := index[dep]; ok {
				children[next[p]] = i
				next[p]++
			}
		}
	}

	queue := make([]int, 0, n)
	for i := range tasks {
		if inDegree[i] == 0 {
			queue = append(queue, i)
		}
	}
	for head := 0; head < len(queue); head++ {
		p := queue[head]
		for _, c := range children[start[p]:start[p+1]] {
			inDegree[c]--
			if inDegree[c] == 0 {
				queue = append(queue, c)
			}
		}
	}

	if len(queue) != n {
		// A task never queued still has unresolved parents: it is on a cycle or downstream of one.
		var b strings.Builder
		b.WriteString("Cycle detected involving: ")
		first := true
		for i := range tasks {
			if inDegree[i] == 0 {
				continue
			}
			if !first {
				b.WriteString(", ")
			}
			first = false
			b.WriteString(tasks[i].Key)
		}
		return nil, b.String()
	}

	order := make([]string, n)
	for k, i := range queue {
		order[k] = tasks[i].Key
	}
	return order, ""
}

// dagRootError is stage 6. When a job is created every parent is a new task, so stage 5 passing
// already implies a root; the check is kept because the documented validator has it.
func dagRootError(tasks []TaskSpec, existingCount int) string {
	if existingCount > 0 {
		return ""
	}
	for i := range tasks {
		if len(tasks[i].DependsOn) == 0 {
			return ""
		}
	}
	return "At least one root task (empty dependsOn) is required"
}

// MaxNameLength bounds task, job and worker names: they are routing keys (a task's queue defaults
// to its name) and index entries.
const MaxNameLength = 256

// CheckName returns what is wrong with a name ("" when nothing): too long, or containing control
// characters, which no queue, log or database column should have to carry.
func CheckName(name string) string {
	if utf8.RuneCountInString(name) > MaxNameLength {
		return fmt.Sprintf("must be at most %d characters", MaxNameLength)
	}
	if !utf8.ValidString(name) {
		return "must be valid UTF-8"
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return "must not contain control characters"
		}
	}
	return ""
}
