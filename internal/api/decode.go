package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/request"
)

// checkFields rejects members other than allowed; where names the object in messages.
func checkFields(obj map[string]json.RawMessage, where string, allowed ...string) error {
	var unknown []string
	for k := range obj {
		if !slices.Contains(allowed, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	hint := ""
	if slices.Contains(unknown, "depends_on") {
		hint = ` (did you mean "dependsOn"?)`
	}
	return request.Errorf(http.StatusBadRequest, "%sunknown field %q%s; allowed fields: %s", where, unknown[0], hint, strings.Join(allowed, ", "))
}

var taskFields = []string{"taskId", "name", "dependsOn", "input", "queue", "priority", "runtime", "maxAttempts",
	"backoffBaseMs", "backoffMaxMs", "timeoutSeconds", "heartbeatTimeoutSeconds", "cancelGraceSeconds"}

// decodeTasks reads the "tasks" member of a job submission or task addition. A missing or
// non-array "tasks" is the DAG validator's error; anything else malformed is a 400 that names
// the task and the field.
func decodeTasks(raw json.RawMessage, present bool) ([]lifecycle.TaskSpec, error) {
	var items []json.RawMessage
	if !present || request.IsNull(raw) || json.Unmarshal(raw, &items) != nil {
		return nil, &dispatch.ValidationError{Errors: []string{"tasks must be a non-empty array"}}
	}
	specs := make([]lifecycle.TaskSpec, len(items))
	for i, item := range items {
		where := fmt.Sprintf("tasks[%d]", i)
		obj, err := request.DecodeObject(item)
		if err != nil {
			return nil, request.Errorf(http.StatusBadRequest, "%s must be a JSON object", where)
		}
		if err := checkFields(obj, where+": ", taskFields...); err != nil {
			return nil, err
		}
		s := &specs[i]
		f := request.Fields{Obj: obj, Where: where}
		s.Key = f.Str("taskId")
		s.Name = taskName(obj)
		s.DependsOn = taskIDs(&f, "dependsOn")
		if in, ok := obj["input"]; ok && !request.IsNull(in) {
			s.Input = request.Compact(in)
		}
		s.Queue = f.Str("queue")
		if p := f.Int("priority"); p != nil {
			s.Priority = *p
		}
		s.Runtime = f.Str("runtime")
		s.MaxAttempts = f.Int("maxAttempts")
		s.BackoffBaseMs = f.Int64("backoffBaseMs")
		s.BackoffMaxMs = f.Int64("backoffMaxMs")
		s.TimeoutSeconds = f.Int("timeoutSeconds")
		s.HeartbeatTimeoutSeconds = f.Int("heartbeatTimeoutSeconds")
		s.CancelGraceSeconds = f.Int("cancelGraceSeconds")
		if f.Err != nil {
			return nil, f.Err
		}
	}
	return specs, nil
}

// taskName follows the producer contract: a name that is not a string is reported as missing by
// the DAG validator.
func taskName(obj map[string]json.RawMessage) string {
	var s string
	if raw, ok := obj["name"]; ok {
		_ = json.Unmarshal(raw, &s)
	}
	return s
}

// taskIDs reads a member that lists taskIds.
func taskIDs(f *request.Fields, name string) []string {
	raw, ok := f.Obj[name]
	if !ok || request.IsNull(raw) {
		return nil
	}
	var ss []string
	if json.Unmarshal(raw, &ss) != nil {
		f.Fail(name, "an array of taskId strings")
	}
	return ss
}
