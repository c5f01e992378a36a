package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
)

// readBody reads the whole (size-capped) request body, refusing text no store can keep
// (checkJSONText), once for the whole body.
func readBody(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(r.Body)
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return nil, err
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// The listener's read timeout passed before the whole body came (a client too slow, or
		// one that stopped sending): the connection is closed after this answer.
		return nil, errorf(http.StatusRequestTimeout, "the request body did not arrive within the server's read timeout")
	}
	if err != nil {
		return nil, errorf(http.StatusBadRequest, "could not read the request body: %v", err)
	}
	if err := checkJSONText(b); err != nil {
		return nil, err
	}
	return b, nil
}

// decodeObject parses body as one JSON object and returns its members, numbers kept exact.
func decodeObject(body []byte) (map[string]json.RawMessage, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, errorf(http.StatusBadRequest, "request body is empty: send a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var obj map[string]json.RawMessage
	if err := dec.Decode(&obj); err != nil {
		return nil, malformed(err)
	}
	if obj == nil {
		return nil, errorf(http.StatusBadRequest, "request body must be a JSON object, not null")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errorf(http.StatusBadRequest, "malformed JSON: unexpected data after the top-level object")
	}
	return obj, nil
}

func malformed(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return errorf(http.StatusBadRequest, "malformed JSON at byte %d: %v", syn.Offset, syn)
	case errors.As(err, &typ):
		return errorf(http.StatusBadRequest, "request body must be a JSON object, not %s", typ.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errorf(http.StatusBadRequest, "malformed JSON: unexpected end of input")
	}
	return errorf(http.StatusBadRequest, "malformed JSON: %v", err)
}

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
	return errorf(http.StatusBadRequest, "%sunknown field %q%s; allowed fields: %s", where, unknown[0], hint, strings.Join(allowed, ", "))
}

var taskFields = []string{"taskId", "name", "dependsOn", "input", "queue", "priority", "runtime", "maxAttempts",
	"backoffBaseMs", "backoffMaxMs", "timeoutSeconds", "heartbeatTimeoutSeconds", "cancelGraceSeconds"}

// decodeTasks reads the "tasks" member of a job submission or task addition. A missing or
// non-array "tasks" is the DAG validator's error; anything else malformed is a 400 that names
// the task and the field.
func decodeTasks(raw json.RawMessage, present bool) ([]lifecycle.TaskSpec, error) {
	var items []json.RawMessage
	if !present || isNull(raw) || json.Unmarshal(raw, &items) != nil {
		return nil, &dispatch.ValidationError{Errors: []string{"tasks must be a non-empty array"}}
	}
	specs := make([]lifecycle.TaskSpec, len(items))
	for i, item := range items {
		where := fmt.Sprintf("tasks[%d]", i)
		obj, err := decodeObject(item)
		if err != nil {
			return nil, errorf(http.StatusBadRequest, "%s must be a JSON object", where)
		}
		if err := checkFields(obj, where+": ", taskFields...); err != nil {
			return nil, err
		}
		s := &specs[i]
		f := fields{obj: obj, where: where}
		s.Key = f.str("taskId")
		s.Name = f.name()
		s.DependsOn = f.strs("dependsOn")
		if in, ok := obj["input"]; ok && !isNull(in) {
			s.Input = compact(in)
		}
		s.Queue = f.str("queue")
		if p := f.intp("priority"); p != nil {
			s.Priority = *p
		}
		s.Runtime = f.str("runtime")
		s.MaxAttempts = f.intp("maxAttempts")
		s.BackoffBaseMs = f.int64p("backoffBaseMs")
		s.BackoffMaxMs = f.int64p("backoffMaxMs")
		s.TimeoutSeconds = f.intp("timeoutSeconds")
		s.HeartbeatTimeoutSeconds = f.intp("heartbeatTimeoutSeconds")
		s.CancelGraceSeconds = f.intp("cancelGraceSeconds")
		if f.err != nil {
			return nil, f.err
		}
	}
	return specs, nil
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

func compact(raw json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return raw
	}
	return b.Bytes()
}

// fields reads typed members of one object, keeping the first type error.
type fields struct {
	obj   map[string]json.RawMessage
	where string
	err   error
}

func (f *fields) fail(name, want string) {
	if f.err == nil {
		f.err = errorf(http.StatusBadRequest, "%s.%s must be %s", f.where, name, want)
	}
}

func (f *fields) str(name string) string {
	raw, ok := f.obj[name]
	if !ok || isNull(raw) {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		f.fail(name, "a string")
	}
	return s
}

// name follows the producer contract: a name that is not a string is reported as missing by the
// DAG validator.
func (f *fields) name() string {
	var s string
	if raw, ok := f.obj["name"]; ok {
		_ = json.Unmarshal(raw, &s)
	}
	return s
}

func (f *fields) strs(name string) []string {
	raw, ok := f.obj[name]
	if !ok || isNull(raw) {
		return nil
	}
	var ss []string
	if json.Unmarshal(raw, &ss) != nil {
		f.fail(name, "an array of taskId strings")
	}
	return ss
}

func (f *fields) int64p(name string) *int64 {
	raw, ok := f.obj[name]
	if !ok || isNull(raw) {
		return nil
	}
	n, err := strconv.ParseInt(string(bytes.TrimSpace(raw)), 10, 64)
	if err != nil {
		f.fail(name, "an integer")
		return nil
	}
	return &n
}

func (f *fields) intp(name string) *int {
	n := f.int64p(name)
	if n == nil {
		return nil
	}
	if *n < -1<<31 || *n > 1<<31-1 {
		f.fail(name, "an integer in the 32-bit range")
		return nil
	}
	v := int(*n)
	return &v
}
