// Package codec reads and writes the wire shapes of Baton's HTTP dialects below their handlers:
// request bodies and parameters into the core's records, strictly (unknown members, wrong types
// and out-of-range values are a 400 with the field's name), and the core's task states into each
// dialect's names.
package codec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/baton-dev/baton/internal/dataplane/reads"
	"github.com/baton-dev/baton/internal/dataset"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/report"
	"github.com/baton-dev/baton/internal/request"
	"github.com/baton-dev/baton/internal/store"
	"github.com/google/uuid"
)

// taskFields are the members of a task in a submitted job.
var taskFields = []string{"taskId", "name", "dependsOn", "input", "queue", "priority", "runtime", "maxAttempts",
	"backoffBaseMs", "backoffMaxMs", "timeoutSeconds", "heartbeatTimeoutSeconds", "cancelGraceSeconds"}

// maxVersionText bounds the ids and hashes of a published dataset version, which the store
// indexes.
const maxVersionText = 255

// MaxStreams bounds the queues one stream-worker claim looks at.
const MaxStreams = 100

// CheckFields rejects members other than allowed; where names the object in messages.
func CheckFields(obj map[string]json.RawMessage, where string, allowed ...string) error {
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

// Tasks reads the "tasks" member of a job submission or task addition. A missing or
// non-array "tasks" is the DAG validator's error; anything else malformed is a 400 that names
// the task and the field.
func Tasks(raw json.RawMessage, present bool) ([]lifecycle.TaskSpec, error) {
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
		if err := CheckFields(obj, where+": ", taskFields...); err != nil {
			return nil, err
		}
		s := &specs[i]
		f := request.Fields{Obj: obj, Where: where}
		s.Key = f.Str("taskId")
		s.Name = taskName(obj)
		s.DependsOn = TaskIDs(&f, "dependsOn")
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

// TaskIDs reads a member that lists taskIds.
func TaskIDs(f *request.Fields, name string) []string {
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

// InvalidRequest is the dialects' 400: a code and a message that names the field.
func InvalidRequest(format string, args ...any) *request.Error {
	return &request.Error{Status: http.StatusBadRequest, Body: map[string]any{"error": "invalid_request", "message": fmt.Sprintf(format, args...)}}
}

// Published reads a completion's datasets_published: the dataset versions the task wrote,
// which the core registers when the completion commits (the output keeps them too).
func Published(raw json.RawMessage) ([]report.Published, error) {
	var items []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, InvalidRequest("datasets_published must be an array of objects")
	}
	out := make([]report.Published, len(items))
	for i, obj := range items {
		where := fmt.Sprintf("datasets_published[%d]", i)
		f := request.Fields{Obj: obj, Where: where}
		out[i] = report.Published{DatasetUUID: f.Str("dataset_uuid"), DatasetVersion: f.Str("dataset_version"),
			StorageRef: request.Compact(obj["storage_ref"]), ConfigHash: f.Str("config_hash"), RangeStart: f.Int64("range_start"), RangeEnd: f.Int64("range_end")}
		if f.Err != nil {
			return nil, f.Err
		}
		v := out[i]
		if v.DatasetUUID == "" || v.DatasetVersion == "" {
			return nil, InvalidRequest("%s: dataset_uuid and dataset_version are required", where)
		}
		for name, text := range map[string]string{"dataset_uuid": v.DatasetUUID, "dataset_version": v.DatasetVersion, "config_hash": v.ConfigHash} {
			if len(text) > maxVersionText {
				return nil, InvalidRequest("%s.%s must be at most %d bytes", where, name, maxVersionText)
			}
		}
	}
	return out, nil
}

// Events reads the internal dialect's events (single, partitioned or batch shapes);
// what they mean is checked by the core.
func Events(raw json.RawMessage) ([]report.Event, error) {
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		return nil, InvalidRequest("events must be an array of event objects")
	}
	events := make([]report.Event, len(items))
	for i, item := range items {
		where := fmt.Sprintf("events[%d]", i)
		obj, err := request.DecodeObject(item)
		if err != nil {
			return nil, InvalidRequest("%s must be an object", where)
		}
		f := request.Fields{Obj: obj, Where: where}
		events[i] = report.Event{DatasetUUID: f.Str("dataset_uuid"), DatasetVersion: f.Str("dataset_version"),
			Cursor: f.Int64("cursor"), PartitionKey: f.Str("partition_key"), Start: f.Int64("start"), End: f.Int64("end")}
		if f.Err != nil {
			return nil, f.Err
		}
	}
	return events, nil
}

// InternalTaskError reads the optional error object of a failed completion.
func InternalTaskError(raw json.RawMessage) (*store.TaskError, error) {
	obj, err := request.DecodeObject(raw)
	if err != nil {
		return nil, InvalidRequest("error must be an object {category, message, stack_trace, retryable}")
	}
	f := request.Fields{Obj: obj, Where: "error"}
	e := &store.TaskError{Category: lifecycle.Category(f.Str("category")), Message: f.Str("message"), StackTrace: f.Str("stack_trace")}
	if f.Err != nil {
		return nil, f.Err
	}
	if raw, ok := obj["retryable"]; ok && !request.IsNull(raw) {
		var v bool
		if json.Unmarshal(raw, &v) != nil {
			return nil, InvalidRequest("error.retryable must be true or false")
		}
		e.Retryable = &v
	}
	return e, nil
}

// ObjectArray checks that raw is an array of JSON objects and returns it compacted.
func ObjectArray(raw json.RawMessage, name string) (json.RawMessage, error) {
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		return nil, InvalidRequest("%s must be an array of objects", name)
	}
	for i, it := range items {
		var obj map[string]json.RawMessage
		if json.Unmarshal(it, &obj) != nil || obj == nil {
			return nil, InvalidRequest("%s[%d] must be an object", name, i)
		}
	}
	return request.Compact(raw), nil
}

// CheckTaskID checks the shape of a task id: the dispatcher's ids are UUIDs.
func CheckTaskID(id string) error {
	if id == "" {
		return InvalidRequest("task_id is required")
	}
	if len(id) != 36 || uuid.Validate(id) != nil {
		return InvalidRequest("task_id must be a task UUID, got %q", id)
	}
	return nil
}

// StreamTaskError turns the dialect's {code, message, stack, retryable} into a task error. A code
// that is one of the six categories is the category; any other code is kept as Code under the
// default category USER_CODE. retryable, when given, is the explicit flag of the retry rule.
func StreamTaskError(raw json.RawMessage) (*store.TaskError, error) {
	if raw == nil || request.IsNull(raw) {
		return nil, request.Errorf(http.StatusBadRequest, "body.error is required: {code, message, stack, retryable}")
	}
	obj, err := request.DecodeObject(raw)
	if err != nil {
		return nil, request.Errorf(http.StatusBadRequest, "body.error must be a JSON object {code, message, stack, retryable}")
	}
	f := request.Fields{Obj: obj, Where: "body.error"}
	code := f.Str("code")
	e := &store.TaskError{Message: f.Str("message"), StackTrace: f.Str("stack")}
	if f.Err != nil {
		return nil, f.Err
	}
	if e.Retryable = f.Bool("retryable"); f.Err != nil {
		return nil, f.Err
	}
	if c := lifecycle.Category(code); c.Valid() {
		e.Category = c
	} else {
		e.Category, e.Code = lifecycle.UserCode, code
	}
	return e, nil
}

// StreamNames reads "streams": a non-empty array of queue names, deduplicated in order.
func StreamNames(raw json.RawMessage) ([]string, error) {
	var names []string
	if raw == nil || request.IsNull(raw) || json.Unmarshal(raw, &names) != nil || len(names) == 0 {
		return nil, request.Errorf(http.StatusBadRequest, "body.streams is required: a non-empty array of stream (queue) names in priority order")
	}
	if len(names) > MaxStreams {
		return nil, request.Errorf(http.StatusBadRequest, "body.streams lists %d streams; at most %d are allowed", len(names), MaxStreams)
	}
	seen := make(map[string]bool, len(names))
	out := names[:0]
	for i, n := range names {
		if n == "" {
			return nil, request.Errorf(http.StatusBadRequest, "body.streams[%d] must be a non-empty string", i)
		}
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out, nil
}

// CallbackTaskError reads {category, message, stackTrace, retryable}; an absent category is the
// core's default (USER_CODE), an unknown one a 400.
func CallbackTaskError(raw json.RawMessage) (*store.TaskError, error) {
	obj, err := request.DecodeObject(raw)
	if err != nil {
		return nil, request.Errorf(http.StatusBadRequest, "body.error must be a JSON object {category, message, stackTrace, retryable}")
	}
	f := request.Fields{Obj: obj, Where: "body.error"}
	e := &store.TaskError{Category: lifecycle.Category(f.Str("category")), Message: f.Str("message"), StackTrace: f.Str("stackTrace")}
	if f.Err != nil {
		return nil, f.Err
	}
	if e.Category != "" && !e.Category.Valid() {
		return nil, request.Errorf(http.StatusBadRequest, "body.error.category must be one of USER_CODE, DATA_QUALITY, INFRASTRUCTURE, CONFIGURATION, TIMEOUT, CANCELLED; got %q", e.Category)
	}
	if e.Retryable = f.Bool("retryable"); f.Err != nil {
		return nil, f.Err
	}
	return e, nil
}

// CallbackTimeField checks an optional RFC 3339 timestamp member.
func CallbackTimeField(obj map[string]json.RawMessage, name string) error {
	raw, ok := obj[name]
	if !ok || request.IsNull(raw) {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if _, err := time.Parse(time.RFC3339Nano, s); err == nil {
			return nil
		}
	}
	return request.Errorf(http.StatusBadRequest, "body.%s must be an RFC 3339 timestamp such as \"2025-01-15T10:00:00Z\"", name)
}

// DecodeInto decodes a JSON object into v, ignoring members it does not know (a worker dialect).
func DecodeInto(body []byte, v any) error {
	if _, err := request.DecodeObject(body); err != nil {
		return err
	}
	if err := json.NewDecoder(bytes.NewReader(body)).Decode(v); err != nil {
		return InvalidRequest("%v", err)
	}
	return nil
}

// RowQuery reads ?limit=&after=&cursor=&where=; cursorSet says whether cursor was given.
func RowQuery(r *http.Request) (q reads.RowQuery, cursorSet bool, err error) {
	qs := r.URL.Query()
	for name, dst := range map[string]*int64{"after": &q.After, "cursor": &q.Cursor} {
		if v := qs.Get(name); v != "" {
			if *dst, err = strconv.ParseInt(v, 10, 64); err != nil {
				return q, false, request.Errorf(http.StatusBadRequest, "%s must be an integer", name)
			}
		}
	}
	if v := qs.Get("limit"); v != "" {
		if q.Limit, err = strconv.Atoi(v); err != nil || q.Limit < 1 {
			return q, false, request.Errorf(http.StatusBadRequest, "limit must be an integer from 1 to 1000")
		}
	}
	if v := qs.Get("where"); v != "" {
		if q.Where, err = request.ParseWhere(v, dataset.MaxWhereValues); err != nil {
			return q, false, err
		}
	}
	return q, qs.Get("cursor") != "", nil
}

func IntParam(v string, def int64) (int64, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("not a non-negative integer: %q", v)
	}
	return n, nil
}
