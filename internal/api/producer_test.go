package api_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

var (
	jobIDPattern = regexp.MustCompile(`^job-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	uuidPattern  = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
)

// invalidKeySuffix ends the validator's invalid-taskId message.
const invalidKeySuffix = `" — must match /^[a-zA-Z0-9-_]{1,128}$/`

// tk is one task of a request body; deps are its dependsOn.
func tk(key, name string, deps ...string) map[string]any {
	if deps == nil {
		deps = []string{}
	}
	return map[string]any{"taskId": key, "name": name, "dependsOn": deps}
}

// withFields returns a copy of task with the given fields set (name, value, name, value...).
func withFields(task map[string]any, kv ...any) map[string]any {
	out := make(map[string]any, len(task)+len(kv)/2)
	for k, v := range task {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i].(string)] = kv[i+1]
	}
	return out
}

// tasksBody is the JSON request {"tasks": tasks}.
func tasksBody(tasks ...map[string]any) string {
	b, err := json.Marshal(map[string]any{"tasks": tasks})
	if err != nil {
		panic(err)
	}
	return string(b)
}

// chainBody is a job of n tasks t0 ← t1 ← ... each depending on the previous one.
func chainBody(prefix string, n int) string {
	tasks := make([]map[string]any, n)
	for i := range tasks {
		if i == 0 {
			tasks[i] = tk(fmt.Sprintf("%s%d", prefix, i), "work")
		} else {
			tasks[i] = tk(fmt.Sprintf("%s%d", prefix, i), "work", fmt.Sprintf("%s%d", prefix, i-1))
		}
	}
	return tasksBody(tasks...)
}

func sortedKeys(m map[string]any) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// jsonInt reads a JSON number that must be an integer.
func jsonInt(t *testing.T, v any) int64 {
	t.Helper()
	f, ok := v.(float64)
	if !ok || f != float64(int64(f)) {
		t.Fatalf("%v (%T) is not an integer JSON number", v, v)
	}
	return int64(f)
}

// jsonStrings reads a JSON array of strings.
func jsonStrings(t *testing.T, v any) []string {
	t.Helper()
	arr, ok := v.([]any)
	if !ok {
		t.Fatalf("%v (%T) is not a JSON array", v, v)
	}
	out := make([]string, len(arr))
	for i, x := range arr {
		s, ok := x.(string)
		if !ok {
			t.Fatalf("%v: element %d is %T, not a string", v, i, x)
		}
		out[i] = s
	}
	return out
}

// jsonEqual reports whether got (decoded) equals the JSON text want.
func jsonEqual(t *testing.T, got any, want string) bool {
	t.Helper()
	var w any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad expected JSON %s: %v", want, err)
	}
	return reflect.DeepEqual(got, w)
}

func (a *testAPI) getJob(id string) map[string]any {
	a.t.Helper()
	res := a.do("GET", "/jobs/"+id, nil)
	if res.Status != http.StatusOK {
		a.t.Fatalf("GET /jobs/%s: %d %s", id, res.Status, res.Raw)
	}
	return res.Body
}

// taskIn returns the task with the given taskId from a job view.
func taskIn(t *testing.T, job map[string]any, key string) map[string]any {
	t.Helper()
	for _, x := range job["tasks"].([]any) {
		if m := x.(map[string]any); m["taskId"] == key {
			return m
		}
	}
	t.Fatalf("no task %s in job %v", key, job["jobId"])
	return nil
}

// statuses maps each task of a job view to its status.
func statuses(job map[string]any) map[string]string {
	out := map[string]string{}
	for _, x := range job["tasks"].([]any) {
		m := x.(map[string]any)
		out[m["taskId"].(string)] = m["status"].(string)
	}
	return out
}

// listIDs lists GET /jobs?query and returns the job ids and the next cursor ("" when null).
func (a *testAPI) listIDs(query string) ([]string, string) {
	a.t.Helper()
	res := a.do("GET", "/jobs?"+query, nil)
	if res.Status != http.StatusOK {
		a.t.Fatalf("GET /jobs?%s: %d %s", query, res.Status, res.Raw)
	}
	var ids []string
	for _, x := range res.Body["jobs"].([]any) {
		ids = append(ids, x.(map[string]any)["jobId"].(string))
	}
	next, _ := res.Body["nextCursor"].(string)
	if _, present := res.Body["nextCursor"]; !present {
		a.t.Fatalf("GET /jobs?%s: no nextCursor member: %s", query, res.Raw)
	}
	return ids, next
}

func (a *testAPI) wantNoJobs() {
	a.t.Helper()
	if ids, _ := a.listIDs(""); len(ids) != 0 {
		a.t.Fatalf("a rejected request left jobs behind: %v", ids)
	}
}

// runAll runs the tasks with the given keys in order, successfully.
func (a *testAPI) runAll(jobID string, keys ...string) {
	a.t.Helper()
	for _, k := range keys {
		a.runTask(jobID, k, false)
	}
}

var exampleKeys = []string{"scrape-store", "analyze-competitors", "color-tags", "font-pairing", "compile-result"}

// addTasksExample is the producer contract's example of adding tasks.
const addTasksExample = `{
  "tasks": [
    { "taskId": "extra-analysis", "name": "market-analysis", "dependsOn": ["scrape-store"], "input": { "depth": "detailed" } },
    { "taskId": "final-report", "name": "compile-report", "dependsOn": ["extra-analysis", "compile-result"], "input": {} }
  ]
}`

func TestCreateJobExample(t *testing.T) {
	forEachDriver(t, defaultOptions(), func(t *testing.T, a *testAPI) {
		before := time.Now().UnixMilli()
		res := a.do("POST", "/jobs", exampleJob)
		after := time.Now().UnixMilli()
		wantStatus(t, res, http.StatusCreated)
		if got, want := sortedKeys(res.Body), []string{"createdAt", "jobId", "rootTasks", "status", "totalTasks"}; !slices.Equal(got, want) {
			t.Fatalf("keys %v, want exactly %v", got, want)
		}
		id, _ := res.Body["jobId"].(string)
		if !jobIDPattern.MatchString(id) {
			t.Errorf("jobId %q is not job-<uuid v4>", id)
		}
		if res.Body["status"] != "created" {
			t.Errorf("status %v, want created", res.Body["status"])
		}
		if n := jsonInt(t, res.Body["totalTasks"]); n != 5 {
			t.Errorf("totalTasks %d, want 5", n)
		}
		if got := jsonStrings(t, res.Body["rootTasks"]); !slices.Equal(got, []string{"scrape-store", "analyze-competitors"}) {
			t.Errorf("rootTasks %v", got)
		}
		createdAt := jsonInt(t, res.Body["createdAt"])
		if createdAt < before || createdAt > after {
			t.Errorf("createdAt %d not within [%d, %d]", createdAt, before, after)
		}

		job := a.getJob(id)
		for _, k := range []string{"jobId", "status", "totalTasks", "progress", "createdAt", "completedAt", "tasks"} {
			if _, ok := job[k]; !ok {
				t.Errorf("job view has no %q: %v", k, job)
			}
		}
		if job["jobId"] != id || job["status"] != "processing" || jsonInt(t, job["totalTasks"]) != 5 {
			t.Errorf("job view %v", job)
		}
		if job["completedAt"] != nil {
			t.Errorf("completedAt %v, want null", job["completedAt"])
		}
		if got := jsonInt(t, job["createdAt"]); got != createdAt {
			t.Errorf("createdAt %d in the job view, %d when created", got, createdAt)
		}
		if !jsonEqual(t, job["progress"], `{"waiting":3,"pending":2,"processing":0,"completed":0,"failed":0,"canceled":0,"skipped":0}`) {
			t.Errorf("progress %v", job["progress"])
		}
		tasks := job["tasks"].([]any)
		if len(tasks) != 5 {
			t.Fatalf("%d tasks", len(tasks))
		}
		wantDeps := map[string][]string{"scrape-store": {}, "analyze-competitors": {}, "color-tags": {"scrape-store"},
			"font-pairing": {"scrape-store"}, "compile-result": {"color-tags", "font-pairing"}}
		ids := map[string]bool{}
		for i, x := range tasks {
			v := x.(map[string]any)
			key := exampleKeys[i]
			for _, k := range []string{"taskId", "id", "name", "dependsOn", "status", "lastEventType", "lastEventAt"} {
				if _, ok := v[k]; !ok {
					t.Errorf("task %s has no %q: %v", key, k, v)
				}
			}
			if v["taskId"] != key || v["name"] != key {
				t.Errorf("task %d is %v, want %s in submission order", i, v, key)
			}
			gid, _ := v["id"].(string)
			if !uuidPattern.MatchString(gid) || ids[gid] {
				t.Errorf("task %s: id %q is not a fresh uuid", key, gid)
			}
			ids[gid] = true
			if got := jsonStrings(t, v["dependsOn"]); !slices.Equal(got, wantDeps[key]) {
				t.Errorf("task %s: dependsOn %v, want %v", key, got, wantDeps[key])
			}
			if len(wantDeps[key]) == 0 {
				if v["status"] != "pending" || v["lastEventType"] != "Task Pending" || jsonInt(t, v["lastEventAt"]) != createdAt {
					t.Errorf("root task %s: %v", key, v)
				}
			} else if v["status"] != "waiting" || v["lastEventType"] != nil || v["lastEventAt"] != nil {
				t.Errorf("dependent task %s: %v", key, v)
			}
		}
	})
}

func TestCreateJobValidation(t *testing.T) {
	long := strings.Repeat("k", 129)
	r := tk("r", "root")
	cases := []struct {
		name string
		body string
		want []string
	}{
		{"empty tasks", `{"tasks":[]}`, []string{"tasks must be a non-empty array"}},
		{"missing tasks", `{}`, []string{"tasks must be a non-empty array"}},
		{"tasks null", `{"tasks":null}`, []string{"tasks must be a non-empty array"}},
		{"tasks an object", `{"tasks":{"taskId":"a","name":"a"}}`, []string{"tasks must be a non-empty array"}},
		{"tasks a string", `{"tasks":"a"}`, []string{"tasks must be a non-empty array"}},
		{"51 tasks", chainBody("t", 51), []string{"Too many tasks: 51 (max 50)"}},
		{"invalid taskId", tasksBody(tk("my task!", "x")), []string{`Invalid taskId: "my task!` + invalidKeySuffix}},
		{"taskId of 129 characters", tasksBody(tk(long, "x")), []string{`Invalid taskId: "` + long + invalidKeySuffix}},
		{"empty taskId", tasksBody(tk("", "x")), []string{`Invalid taskId: "` + invalidKeySuffix}},
		{"missing taskId", `{"tasks":[{"name":"x"}]}`, []string{`Invalid taskId: "` + invalidKeySuffix}},
		{"non-ASCII taskId", tasksBody(tk("tâche", "x")), []string{`Invalid taskId: "tâche` + invalidKeySuffix}},
		{"duplicate taskId", tasksBody(tk("scrape-store", "a"), tk("scrape-store", "b")), []string{"Duplicate taskId: scrape-store"}},
		{"missing name", `{"tasks":[{"taskId":"a"}]}`, []string{"Task a: name is required"}},
		{"empty name", tasksBody(tk("a", "")), []string{"Task a: name is required"}},
		{"non-string name", `{"tasks":[{"taskId":"a","name":5}]}`, []string{"Task a: name is required"}},
		{"null name", `{"tasks":[{"taskId":"a","name":null}]}`, []string{"Task a: name is required"}},
		{"unknown dependency", tasksBody(r, tk("color-tags", "c", "unknown-task")),
			[]string{`Task color-tags depends on "unknown-task" which does not exist`}},
		{"two unknown dependencies", tasksBody(r, tk("a", "a", "x"), tk("b", "b", "r", "y")),
			[]string{`Task a depends on "x" which does not exist`, `Task b depends on "y" which does not exist`}},
		{"cycle", tasksBody(r, tk("a", "a", "b"), tk("b", "b", "a"), tk("c", "c", "a")), []string{"Cycle detected involving: a, b, c"}},
		{"self dependency", tasksBody(r, tk("s", "s", "s")), []string{"Cycle detected involving: s"}},
		{"no root (all on a cycle)", tasksBody(tk("a", "a", "b"), tk("b", "b", "a")), []string{"Cycle detected involving: a, b"}},
		{"duplicate dependency", tasksBody(r, tk("a", "a", "r", "r")), []string{`Task a: duplicate dependency "r"`}},
		{"every field error, in order", tasksBody(tk("bad key", "x"), tk("a", "x"), tk("a", ""), withFields(tk("b", "x"), "priority", 5000)),
			[]string{`Invalid taskId: "bad key` + invalidKeySuffix, "Duplicate taskId: a", "Task a: name is required",
				"Task b: priority must be between -1000 and 1000"}},
		{"field errors stop before references", tasksBody(tk("a", "", "nope")), []string{"Task a: name is required"}},
		{"reference errors stop before cycles", tasksBody(r, tk("a", "a", "b", "nope"), tk("b", "b", "a")),
			[]string{`Task a depends on "nope" which does not exist`}},

		{"queue", tasksBody(withFields(r, "queue", "tab\tin it")), []string{"Task r: queue must not contain control characters"}},
		{"priority above", tasksBody(withFields(r, "priority", 1001)), []string{"Task r: priority must be between -1000 and 1000"}},
		{"priority below", tasksBody(withFields(r, "priority", -1001)), []string{"Task r: priority must be between -1000 and 1000"}},
		{"runtime", tasksBody(withFields(r, "runtime", "lambda")), []string{`Task r: runtime must be "pull" or "push"`}},
		{"maxAttempts 0", tasksBody(withFields(r, "maxAttempts", 0)), []string{"Task r: maxAttempts must be between 1 and 1000"}},
		{"maxAttempts 1001", tasksBody(withFields(r, "maxAttempts", 1001)), []string{"Task r: maxAttempts must be between 1 and 1000"}},
		{"backoffBaseMs", tasksBody(withFields(r, "backoffBaseMs", -1)), []string{"Task r: backoffBaseMs must be between 0 and 86400000"}},
		{"backoffMaxMs", tasksBody(withFields(r, "backoffMaxMs", 86400001)), []string{"Task r: backoffMaxMs must be between 0 and 86400000"}},
		{"backoffMaxMs below backoffBaseMs", tasksBody(withFields(r, "backoffBaseMs", 2000, "backoffMaxMs", 1000)),
			[]string{"Task r: backoffMaxMs must not be less than backoffBaseMs"}},
		{"timeoutSeconds 0", tasksBody(withFields(r, "timeoutSeconds", 0)), []string{"Task r: timeoutSeconds must be between 1 and 604800"}},
		{"timeoutSeconds above", tasksBody(withFields(r, "timeoutSeconds", 604801)), []string{"Task r: timeoutSeconds must be between 1 and 604800"}},
		{"heartbeatTimeoutSeconds 1", tasksBody(withFields(r, "heartbeatTimeoutSeconds", 1)), []string{"Task r: heartbeatTimeoutSeconds must be between 2 and 86400"}},
		{"heartbeatTimeoutSeconds above", tasksBody(withFields(r, "heartbeatTimeoutSeconds", 86401)), []string{"Task r: heartbeatTimeoutSeconds must be between 2 and 86400"}},
		{"cancelGraceSeconds below", tasksBody(withFields(r, "cancelGraceSeconds", -1)), []string{"Task r: cancelGraceSeconds must be between 0 and 86400"}},
		{"cancelGraceSeconds above", tasksBody(withFields(r, "cancelGraceSeconds", 86401)), []string{"Task r: cancelGraceSeconds must be between 0 and 86400"}},
		{"every optional field at once", tasksBody(withFields(r, "queue", "a\u0001b", "priority", 2000, "runtime", "x", "maxAttempts", 0,
			"backoffBaseMs", 10, "backoffMaxMs", 5, "timeoutSeconds", 0, "heartbeatTimeoutSeconds", 0, "cancelGraceSeconds", -5)),
			[]string{"Task r: queue must not contain control characters", "Task r: priority must be between -1000 and 1000",
				`Task r: runtime must be "pull" or "push"`, "Task r: maxAttempts must be between 1 and 1000",
				"Task r: backoffMaxMs must not be less than backoffBaseMs", "Task r: timeoutSeconds must be between 1 and 604800",
				"Task r: heartbeatTimeoutSeconds must be between 2 and 86400", "Task r: cancelGraceSeconds must be between 0 and 86400"}},
	}
	forEachDriver(t, defaultOptions(), func(t *testing.T, a *testAPI) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				a := a.on(t)
				wantErrors(t, a.do("POST", "/jobs", c.body), c.want...)
				a.wantNoJobs()
			})
		}
	})
}

func TestCreateJobAcceptsFiftyTasks(t *testing.T) {
	forEachDriver(t, defaultOptions(), func(t *testing.T, a *testAPI) {
		res := a.do("POST", "/jobs", chainBody("t", 50))
		wantStatus(t, res, http.StatusCreated)
		if n := jsonInt(t, res.Body["totalTasks"]); n != 50 {
			t.Fatalf("totalTasks %d", n)
		}
		if got := jsonStrings(t, res.Body["rootTasks"]); !slices.Equal(got, []string{"t0"}) {
			t.Fatalf("rootTasks %v", got)
		}
		job := a.getJob(res.Body["jobId"].(string))
		if len(job["tasks"].([]any)) != 50 || !jsonEqual(t, job["progress"], `{"waiting":49,"pending":1,"processing":0,"completed":0,"failed":0,"canceled":0,"skipped":0}`) {
			t.Fatalf("job view: %v", job["progress"])
		}
	})
}

func TestCreateJobAcceptsBoundaryValues(t *testing.T) {
	forEachDriver(t, defaultOptions(), func(t *testing.T, a *testAPI) {
		key := strings.Repeat("K", 128)
		id := a.createJob(tasksBody(
			withFields(tk(key, "x"), "queue", "q_1-A", "priority", 1000, "runtime", "push", "maxAttempts", 1000, "backoffBaseMs", 0,
				"backoffMaxMs", 86400000, "timeoutSeconds", 604800, "heartbeatTimeoutSeconds", 86400, "cancelGraceSeconds", 86400),
			withFields(tk("low", "x"), "priority", -1000, "runtime", "pull", "maxAttempts", 1, "backoffBaseMs", 86400000,
				"backoffMaxMs", 86400000, "timeoutSeconds", 1, "heartbeatTimeoutSeconds", 2, "cancelGraceSeconds", 0),
			tk("defaults", "defaults-name"),
		))
		for _, c := range []struct{ key, want string }{
			{key, `{"queue":"q_1-A","priority":1000,"runtime":"push","maxAttempts":1000}`},
			{"low", `{"queue":"x","priority":-1000,"runtime":"pull","maxAttempts":1}`},
			{"defaults", `{"queue":"defaults-name","priority":0,"runtime":"pull","maxAttempts":3}`},
		} {
			res := a.do("GET", "/jobs/"+id+"/tasks/"+c.key, nil)
			wantStatus(t, res, http.StatusOK)
			got := map[string]any{"queue": res.Body["queue"], "priority": res.Body["priority"], "runtime": res.Body["runtime"], "maxAttempts": res.Body["maxAttempts"]}
			if !jsonEqual(t, got, c.want) {
				t.Errorf("task %.10s: %v, want %s", c.key, got, c.want)
			}
		}
	})
}

func TestCreateJobRejectsMalformedBodies(t *testing.T) {
	const allowed = "taskId, name, dependsOn, input, queue, priority, runtime, maxAttempts, backoffBaseMs, backoffMaxMs, " +
		"timeoutSeconds, heartbeatTimeoutSeconds, cancelGraceSeconds"
	cases := []struct {
		name, body string
		want       string // the exact error, or a prefix when it ends in "…"
	}{
		{"malformed JSON", `{"tasks": [}`, "malformed JSON at byte 12: …"},
		{"not JSON at all", `<tasks/>`, "malformed JSON at byte 1: invalid character '<' looking for beginning of value"},
		{"truncated", `{"tasks": [`, "malformed JSON: unexpected end of input"},
		{"empty body", ``, "request body is empty: send a JSON object"},
		{"blank body", " \n\t", "request body is empty: send a JSON object"},
		{"JSON null", `null`, "request body must be a JSON object, not null"},
		{"array body", `[` + exampleJob + `]`, "request body must be a JSON object, not array"},
		{"string body", `"tasks"`, "request body must be a JSON object, not string"},
		{"number body", `42`, "request body must be a JSON object, not number"},
		{"trailing garbage", exampleJob + ` x`, "malformed JSON: unexpected data after the top-level object"},
		{"two objects", exampleJob + exampleJob, "malformed JSON: unexpected data after the top-level object"},
		{"unknown top-level field", `{"tasks":[{"taskId":"a","name":"a"}],"priority":1}`, `unknown field "priority"; allowed fields: tasks, name`},
		{"depends_on", `{"tasks":[{"taskId":"a","name":"a"},{"taskId":"b","name":"b","depends_on":["a"]}]}`,
			`tasks[1]: unknown field "depends_on" (did you mean "dependsOn"?); allowed fields: ` + allowed},
		{"unknown task field", `{"tasks":[{"taskId":"a","name":"a","retries":3}]}`, `tasks[0]: unknown field "retries"; allowed fields: ` + allowed},
		{"task not an object", `{"tasks":[{"taskId":"a","name":"a"},5]}`, "tasks[1] must be a JSON object"},
		{"task null", `{"tasks":[null]}`, "tasks[0] must be a JSON object"},
		{"taskId a number", `{"tasks":[{"taskId":5,"name":"a"}]}`, "tasks[0].taskId must be a string"},
		{"dependsOn a string", `{"tasks":[{"taskId":"a","name":"a"},{"taskId":"b","name":"b","dependsOn":"a"}]}`, "tasks[1].dependsOn must be an array of taskId strings"},
		{"dependsOn of numbers", `{"tasks":[{"taskId":"a","name":"a","dependsOn":[1]}]}`, "tasks[0].dependsOn must be an array of taskId strings"},
		{"priority 1.5", `{"tasks":[{"taskId":"a","name":"a","priority":1.5}]}`, "tasks[0].priority must be an integer"},
		{"priority a string", `{"tasks":[{"taskId":"a","name":"a","priority":"5"}]}`, "tasks[0].priority must be an integer"},
		{"priority beyond 32 bits", `{"tasks":[{"taskId":"a","name":"a","priority":4294967296}]}`, "tasks[0].priority must be an integer in the 32-bit range"},
		{"maxAttempts a boolean", `{"tasks":[{"taskId":"a","name":"a","maxAttempts":true}]}`, "tasks[0].maxAttempts must be an integer"},
		{"backoffBaseMs beyond 64 bits", `{"tasks":[{"taskId":"a","name":"a","backoffBaseMs":99999999999999999999}]}`, "tasks[0].backoffBaseMs must be an integer"},
		{"queue a number", `{"tasks":[{"taskId":"a","name":"a","queue":7}]}`, "tasks[0].queue must be a string"},
		{"runtime an array", `{"tasks":[{"taskId":"a","name":"a","runtime":["pull"]}]}`, "tasks[0].runtime must be a string"},
		{"job name a number", `{"name":5,"tasks":[{"taskId":"a","name":"a"}]}`, "body.name must be a string"},
	}
	forEachDriver(t, defaultOptions(), func(t *testing.T, a *testAPI) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				a := a.on(t)
				res := a.do("POST", "/jobs", c.body)
				wantStatus(t, res, http.StatusBadRequest)
				msg, _ := res.Body["error"].(string)
				if prefix, ok := strings.CutSuffix(c.want, "…"); ok {
					if !strings.HasPrefix(msg, prefix) {
						t.Errorf("error %q, want it to start with %q", msg, prefix)
					}
				} else if msg != c.want {
					t.Errorf("error %q, want %q", msg, c.want)
				}
				a.wantNoJobs()
			})
		}
	})
}

func TestCreateJobAcceptsAnyJSONInput(t *testing.T) {
	forEachDriver(t, defaultOptions(), func(t *testing.T, a *testAPI) {
		inputs := []struct{ key, input, want string }{
			{"string", `"text"`, `"text"`},
			{"number", `12345678901234567890.5`, `12345678901234567890.5`},
			{"array", `[1, "a", null]`, `[1,"a",null]`},
			{"bool", `true`, `true`},
			{"null", `null`, `{}`},
			{"nested", `{"a": {"b": [{"c": 1}]}, "z": "é\u00e9"}`, `{"a":{"b":[{"c":1}]},"z":"é\u00e9"}`}, // verbatim, compacted
			{"absent", ``, `{}`},
		}
		var parts []string
		for _, in := range inputs {
			p := `{"taskId":"` + in.key + `","name":"n"`
			if in.input != "" {
				p += `,"input":` + in.input
			}
			parts = append(parts, p+`}`)
		}
		id := a.createJob(`{"tasks":[` + strings.Join(parts, ",") + `]}`)
		for _, in := range inputs {
			res := a.do("GET", "/jobs/"+id+"/tasks/"+in.key, nil)
			wantStatus(t, res, http.StatusOK)
			var raw struct{ Input json.RawMessage }
			if err := json.Unmarshal(res.Raw, &raw); err != nil {
				t.Fatal(err)
			}
			if string(raw.Input) != in.want {
				t.Errorf("task %s: input %s, want %s", in.key, raw.Input, in.want)
			}
		}
	})
}

func TestBodyTooLarge(t *testing.T) {
	opts := defaultOptions()
	opts.maxBodyBytes = 1024
	// sized is a one-task job whose body is exactly n bytes.
	sized := func(n int) string {
		b := `{"tasks":[{"taskId":"a","name":"a","input":""}]}`
		return strings.Replace(b, `""`, `"`+strings.Repeat("x", n-len(b))+`"`, 1)
	}
	forEachDriver(t, opts, func(t *testing.T, a *testAPI) {
		if len(sized(1025)) != 1025 {
			t.Fatal("bad sizing")
		}
		wantError(t, a.do("POST", "/jobs", sized(1025)), http.StatusRequestEntityTooLarge, "request body too large: the limit is 1024 bytes")
		wantError(t, a.do("POST", "/jobs", sized(4096)), http.StatusRequestEntityTooLarge, "request body too large: the limit is 1024 bytes")
		a.wantNoJobs()
		id := a.createJob(sized(1024))

		res := a.do("POST", "/jobs/"+id+"/tasks", strings.Replace(sized(3000), `"a"`, `"b"`, 2))
		wantError(t, res, http.StatusRequestEntityTooLarge, "request body too large: the limit is 1024 bytes")
		if n := jsonInt(t, a.getJob(id)["totalTasks"]); n != 1 {
			t.Fatalf("totalTasks %d after a refused addition", n)
		}
		wantError(t, a.do("POST", "/jobs/"+id+"/cancel", strings.Repeat(" ", 2000)), http.StatusRequestEntityTooLarge, "request body too large: the limit is 1024 bytes")
		if st := a.getJob(id)["status"]; st != "processing" {
			t.Fatalf("status %v after a refused cancel", st)
		}
	})
}

func TestAddTasksExample(t *testing.T) {
	forEachDriver(t, defaultOptions(), func(t *testing.T, a *testAPI) {
		id := a.createJob(exampleJob)
		a.runTask(id, "scrape-store", false)

		res := a.do("POST", "/jobs/"+id+"/tasks", addTasksExample)
		wantStatus(t, res, http.StatusOK)
		want := `{"jobId":"` + id + `","addedTasks":["extra-analysis","final-report"],"immediatelyReady":["extra-analysis"],"totalTasksNow":7}`
		if !jsonEqual(t, res.Body, want) {
			t.Fatalf("answer %s, want %s", res.Raw, want)
		}

		job := a.getJob(id)
		if jsonInt(t, job["totalTasks"]) != 7 || job["status"] != "processing" {
			t.Fatalf("job %v", job)
		}
		extra, final := taskIn(t, job, "extra-analysis"), taskIn(t, job, "final-report")
		if extra["status"] != "pending" || extra["name"] != "market-analysis" || extra["lastEventType"] != "Task Pending" {
			t.Errorf("extra-analysis %v", extra)
		}
		if final["status"] != "waiting" || !slices.Equal(jsonStrings(t, final["dependsOn"]), []string{"extra-analysis", "compile-result"}) {
			t.Errorf("final-report %v", final)
		}
		detail := a.do("GET", "/jobs/"+id+"/tasks/extra-analysis", nil)
		if !jsonEqual(t, detail.Body["input"], `{"depth":"detailed"}`) ||
			!jsonEqual(t, detail.Body["dependencyOutputs"], `{"scrape-store":{"done":"scrape-store"}}`) {
			t.Errorf("extra-analysis detail %s", detail.Raw)
		}

		// The job completes only once the added tasks have run too.
		a.runAll(id, "analyze-competitors", "color-tags", "font-pairing", "compile-result")
		if st := a.getJob(id)["status"]; st != "processing" {
			t.Fatalf("status %v with added tasks left", st)
		}
		a.runAll(id, "extra-analysis", "final-report")
		if job := a.getJob(id); job["status"] != "completed" || jsonInt(t, job["totalTasks"]) != 7 {
			t.Fatalf("job %v", job)
		}
	})
}

func TestAddTasksReadiness(t *testing.T) {
	forEachDriver(t, defaultOptions(), func(t *testing.T, a *testAPI) {
		id := a.createJob(exampleJob)
		a.runTask(id, "analyze-competitors", true)

		res := a.do("POST", "/jobs/"+id+"/tasks", tasksBody(
			tk("new-root", "x"),
			tk("after-scrape", "x", "scrape-store"),
			tk("after-failed", "x", "analyze-competitors"),
			tk("after-new-root", "x", "new-root"),
			tk("after-skipped", "x", "after-failed"),
		))
		wantStatus(t, res, http.StatusOK)
		if got := jsonStrings(t, res.Body["immediatelyReady"]); !slices.Equal(got, []string{"new-root"}) {
			t.Errorf("immediatelyReady %v", got)
		}
		if got := jsonStrings(t, res.Body["addedTasks"]); len(got) != 5 {
			t.Errorf("addedTasks %v", got)
		}
		got := statuses(a.getJob(id))
		want := map[string]string{"scrape-store": "pending", "analyze-competitors": "failed", "color-tags": "waiting",
			"font-pairing": "waiting", "compile-result": "waiting", "new-root": "pending", "after-scrape": "waiting",
			"after-failed": "skipped", "after-new-root": "waiting", "after-skipped": "skipped"}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("statuses %v, want %v", got, want)
		}
	})
}

func TestAddTasksValidation(t *testing.T) {
	many := make([]map[string]any, 46)
	for i := range many {
		many[i] = tk(fmt.Sprintf("n%d", i), "x")
	}
	cases := []struct {
		name, body string
		want       []string
	}{
		{"duplicate of an existing task", tasksBody(tk("scrape-store", "x")), []string{"Duplicate taskId: scrape-store"}},
		{"duplicate among new tasks", tasksBody(tk("x", "x"), tk("x", "y")), []string{"Duplicate taskId: x"}},
		{"cycle among new tasks", tasksBody(tk("x", "x", "scrape-store", "y"), tk("y", "y", "x")), []string{"Cycle detected involving: x, y"}},
		{"bad reference", tasksBody(tk("x", "x", "scrape-store", "unknown-task")), []string{`Task x depends on "unknown-task" which does not exist`}},
		{"invalid taskId", tasksBody(tk("x y", "x")), []string{`Invalid taskId: "x y` + invalidKeySuffix}},
		{"missing name", tasksBody(tk("x", "")), []string{"Task x: name is required"}},
		{"empty tasks", `{"tasks":[]}`, []string{"tasks must be a non-empty array"}},
		{"missing tasks", `{}`, []string{"tasks must be a non-empty array"}},
		{"over the cap with the existing tasks", tasksBody(many...), []string{"Too many tasks: 51 (max 50)"}},
		{"option out of range", tasksBody(withFields(tk("x", "x"), "maxAttempts", 0)), []string{"Task x: maxAttempts must be between 1 and 1000"}},
	}
	forEachDriver(t, defaultOptions(), func(t *testing.T, a *testAPI) {
		id := a.createJob(exampleJob)
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				a := a.on(t)
				wantErrors(t, a.do("POST", "/jobs/"+id+"/tasks", c.body), c.want...)
				if job := a.getJob(id); jsonInt(t, job["totalTasks"]) != 5 || len(job["tasks"].([]any)) != 5 {
					t.Fatalf("a refused addition changed the job: %v", job["totalTasks"])
				}
			})
		}
		t.Run("decoding", func(t *testing.T) {
			a := a.on(t)
			wantError(t, a.do("POST", "/jobs/"+id+"/tasks", `{"tasks":[{"taskId":"x","name":"x"}],"name":"n"}`),
				http.StatusBadRequest, `unknown field "name"; allowed fields: tasks`)
			wantError(t, a.do("POST", "/jobs/"+id+"/tasks", ``), http.StatusBadRequest, "request body is empty: send a JSON object")
			wantError(t, a.do("POST", "/jobs/"+id+"/tasks", `{"tasks":[{"taskId":"x","name":"x","depends_on":[]}]}`), http.StatusBadRequest,
				`tasks[0]: unknown field "depends_on" (did you mean "dependsOn"?); allowed fields: taskId, name, dependsOn, input, queue, priority, runtime, maxAttempts, backoffBaseMs, backoffMaxMs, timeoutSeconds, heartbeatTimeoutSeconds, cancelGraceSeconds`)
		})
		// Exactly up to the cap is fine.
		res := a.do("POST", "/jobs/"+id+"/tasks", tasksBody(many[:45]...))
		wantStatus(t, res, http.StatusOK)
		if n := jsonInt(t, res.Body["totalTasksNow"]); n != 50 {
			t.Fatalf("totalTasksNow %d", n)
		}
	})
}

func TestAddTasksUnknownJob(t *testing.T) {
	forEachDriver(t, defaultOptions(), func(t *testing.T, a *testAPI) {
		for _, id := range []string{"job-00000000-0000-4000-8000-000000000000", "nope"} {
			wantError(t, a.do("POST", "/jobs/"+id+"/tasks", tasksBody(tk("x", "x"))), http.StatusNotFound, "Job not found")
		}
	})
}

func TestAddTasksToFinishedJob(t *testing.T) {
	const msg = "Job already completed — cannot add tasks"
	forEachDriver(t, defaultOptions(), func(t *testing.T, a *testAPI) {
		completed := a.createJob(exampleJob)
		a.runAll(completed, exampleKeys...)
		failed := a.createJob(tasksBody(tk("a", "a")))
		a.runTask(failed, "a", true)
		canceled := a.createJob(exampleJob)
		wantStatus(t, a.do("POST", "/jobs/"+canceled+"/cancel", nil), http.StatusOK)
		// A job whose cancel waits for a running task takes no new tasks either.
		canceling := a.createJob(tasksBody(tk("a", "a")))
		if _, err := a.d.ClaimTask(context.Background(), dispatch.ClaimTaskParams{TaskID: taskIn(t, a.getJob(canceling), "a")["id"].(string), WorkerID: "w"}); err != nil {
			t.Fatal(err)
		}
		wantStatus(t, a.do("POST", "/jobs/"+canceling+"/cancel", nil), http.StatusOK)

		for _, c := range []struct{ id, status string }{
			{completed, "completed"}, {failed, "partial_failure"}, {canceled, "canceled"}, {canceling, "processing"},
		} {
			job := a.getJob(c.id)
			if job["status"] != c.status {
				t.Fatalf("job status %v, want %s", job["status"], c.status)
			}
			wantError(t, a.do("POST", "/jobs/"+c.id+"/tasks", tasksBody(tk("late", "x"))), http.StatusConflict, msg)
			if n := jsonInt(t, a.getJob(c.id)["totalTasks"]); n != jsonInt(t, job["totalTasks"]) {
				t.Fatalf("a refused addition changed totalTasks to %d", n)
			}
		}
	})
}

func TestListJobsNewestFirstWithDefaultLimit(t *testing.T) {
	forEachDriver(t, defaultOptions(), func(t *testing.T, a *testAPI) {
		var created []string
		for i := range 25 {
			created = append(created, a.createJob(chainBody(fmt.Sprintf("j%d-", i), 1+i%3)))
		}
		slices.Reverse(created)

		res := a.do("GET", "/jobs", nil)
		wantStatus(t, res, http.StatusOK)
		if got := sortedKeys(res.Body); !slices.Equal(got, []string{"jobs", "nextCursor"}) {
			t.Fatalf("keys %v", got)
		}
		jobs := res.Body["jobs"].([]any)
		if len(jobs) != 20 {
			t.Fatalf("%d jobs on the first page, want the default 20", len(jobs))
		}
		for i, x := range jobs {
			j := x.(map[string]any)
			if got := sortedKeys(j); !slices.Equal(got, []string{"createdAt", "jobId", "status", "totalTasks"}) {
				t.Fatalf("job keys %v", got)
			}
			if j["jobId"] != created[i] || j["status"] != "processing" {
				t.Fatalf("jobs[%d] = %v, want %s", i, j, created[i])
			}
			want := int64(1 + (24-i)%3)
			if jsonInt(t, j["totalTasks"]) != want {
				t.Fatalf("jobs[%d].totalTasks = %v, want %d", i, j["totalTasks"], want)
			}
			if i > 0 && jsonInt(t, j["createdAt"]) > jsonInt(t, jobs[i-1].(map[string]any)["createdAt"]) {
				t.Fatalf("jobs not newest first at %d", i)
			}
		}
		next, _ := res.Body["nextCursor"].(string)
		if next == "" {
			t.Fatalf("nextCursor %v on a full page", res.Body["nextCursor"])
		}
		rest, end := a.listIDs("cursor=" + url.QueryEscape(next))
		if !slices.Equal(rest, created[20:]) || end != "" {
			t.Fatalf("second page %v (next %q), want %v and the end", rest, end, created[20:])
		}
	})
}

func TestListJobsLimitIsClamped(t *testing.T) {
	forEachDriver(t, defaultOptions(), func(t *testing.T, a *testAPI) {
		ctx := context.Background()
		for range 101 {
			if _, err := a.d.CreateJob(ctx, dispatch.CreateJobParams{Tenant: "acme", Tasks: []lifecycle.TaskSpec{{Key: "a", Name: "a"}}}); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range []struct {
			limit string
			want  int
		}{{"0", 1}, {"-5", 1}, {"1", 1}, {"37", 37}, {"100", 100}, {"101", 100}, {"500", 100}} {
			ids, next := a.listIDs("limit=" + c.limit)
			if len(ids) != c.want || next == "" {
				t.Errorf("limit=%s: %d jobs (next %q), want %d and a next cursor", c.limit, len(ids), next, c.want)
			}
		}
	})
}

func TestListJobsRejectsBadParameters(t *testing.T) {
	forEachDriver(t, defaultOptions(), func(t *testing.T, a *testAPI) {
		a.createJob(exampleJob)
		for _, v := range []string{"abc", "1.5", "10x", "1e2"} {
			wantError(t, a.do("GET", "/jobs?limit="+url.QueryEscape(v), nil), http.StatusBadRequest,
				fmt.Sprintf("limit must be an integer from 1 to 100, got %q", v))
		}
		b64 := base64.RawURLEncoding.EncodeToString
		for _, c := range []string{"not-a-cursor!", b64([]byte("{}")), b64([]byte(`{"before":0}`)), b64([]byte(`{"before":-3}`)),
			b64([]byte(`{"before":"7"}`)), b64([]byte("garbage")), base64.URLEncoding.EncodeToString([]byte(`{"before":50}`))} {
			wantError(t, a.do("GET", "/jobs?cursor="+url.QueryEscape(c), nil), http.StatusBadRequest,
				"invalid cursor: pass the nextCursor of a previous page")
		}
		for _, s := range []string{"failed", "PROCESSING", "done", "created"} {
			wantError(t, a.do("GET", "/jobs?status="+s, nil), http.StatusBadRequest,
				fmt.Sprintf("status must be one of processing, completed, partial_failure, canceled; got %q", s))
		}
	})
}

func TestListJobsCursorPaging(t *testing.T) {
	forEachDriver(t, defaultOptions(), func(t *testing.T, a *testAPI) {
		var created []string
		for i := range 12 {
			created = append(created, a.createJob(chainBody(fmt.Sprintf("p%d-", i), 1)))
		}
		slices.Reverse(created)
		for _, c := range []struct {
			limit int
			pages []int
		}{{5, []int{5, 5, 2}}, {4, []int{4, 4, 4}}, {12, []int{12}}, {20, []int{12}}, {1, slices.Repeat([]int{1}, 12)}} {
			var all []string
			var sizes []int
			cursor := ""
			for {
				q := fmt.Sprintf("limit=%d", c.limit)
				if cursor != "" {
					q += "&cursor=" + url.QueryEscape(cursor)
				}
				ids, next := a.listIDs(q)
				all, sizes = append(all, ids...), append(sizes, len(ids))
				if next == "" {
					break
				}
				if len(sizes) > 20 {
					t.Fatal("paging does not end")
				}
				cursor = next
			}
			if !slices.Equal(sizes, c.pages) || !slices.Equal(all, created) {
				t.Errorf("limit %d: pages %v, want %v; jobs in order: %v", c.limit, sizes, c.pages, slices.Equal(all, created))
			}
		}
	})
}

func TestListJobsStatusFilter(t *testing.T) {
	forEachDriver(t, defaultOptions(), func(t *testing.T, a *testAPI) {
		processing := a.createJob(exampleJob)
		var completed []string
		for range 3 {
			id := a.createJob(tasksBody(tk("a", "a")))
			a.runTask(id, "a", false)
			completed = append(completed, id)
		}
		slices.Reverse(completed)
		failed := a.createJob(tasksBody(tk("a", "a"), tk("b", "b", "a")))
		a.runTask(failed, "a", true)
		canceled := a.createJob(exampleJob)
		wantStatus(t, a.do("POST", "/jobs/"+canceled+"/cancel", nil), http.StatusOK)
		a.createJob(exampleJob)

		for _, c := range []struct {
			status string
			want   []string
		}{
			{"completed", completed},
			{"partial_failure", []string{failed}},
			{"canceled", []string{canceled}},
		} {
			if ids, next := a.listIDs("status=" + c.status); !slices.Equal(ids, c.want) || next != "" {
				t.Errorf("status=%s: %v (next %q), want %v", c.status, ids, next, c.want)
			}
		}
		if ids, _ := a.listIDs("status=processing"); len(ids) != 2 || ids[1] != processing {
			t.Errorf("status=processing: %v", ids)
		}
		res := a.do("GET", "/jobs?status=partial_failure", nil)
		if j := res.Body["jobs"].([]any)[0].(map[string]any); j["status"] != "partial_failure" || jsonInt(t, j["totalTasks"]) != 2 {
			t.Errorf("partial_failure job %v", j)
		}
		// Paging within a filter.
		ids, next := a.listIDs("status=completed&limit=2")
		if !slices.Equal(ids, completed[:2]) || next == "" {
			t.Fatalf("first completed page %v (next %q)", ids, next)
		}
		ids, next = a.listIDs("status=completed&limit=2&cursor=" + url.QueryEscape(next))
		if !slices.Equal(ids, completed[2:]) || next != "" {
			t.Fatalf("second completed page %v (next %q)", ids, next)
		}
	})
}

func TestGetTask(t *testing.T) {
	forEachDriver(t, defaultOptions(), func(t *testing.T, a *testAPI) {
		id := a.createJob(exampleJob)
		other := a.createJob(exampleJob)
		before := time.Now().UnixMilli()
		a.runTask(id, "scrape-store", false)
		a.runTask(id, "analyze-competitors", true)
		after := time.Now().UnixMilli()
		job := a.getJob(id)

		// By taskId and by global id, the same answer.
		scrapeID := taskIn(t, job, "scrape-store")["id"].(string)
		byKey := a.do("GET", "/jobs/"+id+"/tasks/scrape-store", nil)
		wantStatus(t, byKey, http.StatusOK)
		byID := a.do("GET", "/jobs/"+id+"/tasks/"+scrapeID, nil)
		wantStatus(t, byID, http.StatusOK)
		if !reflect.DeepEqual(byKey.Body, byID.Body) {
			t.Errorf("by key %s\nby id  %s", byKey.Raw, byID.Raw)
		}
		s := byKey.Body
		if s["jobId"] != id || s["taskId"] != "scrape-store" || s["id"] != scrapeID || s["status"] != "completed" || s["error"] != nil ||
			!jsonEqual(t, s["input"], `{"storeId":"store-123","url":"https://example.com"}`) ||
			!jsonEqual(t, s["dependencyOutputs"], `{}`) || !jsonEqual(t, s["output"], `{"done":"scrape-store"}`) ||
			s["lastEventType"] != "Task Completed" || jsonInt(t, s["attempt"]) != 1 {
			t.Errorf("scrape-store: %s", byKey.Raw)
		}
		attempts := s["attempts"].([]any)
		if len(attempts) != 1 {
			t.Fatalf("attempts %v", attempts)
		}
		at := attempts[0].(map[string]any)
		started, finished := jsonInt(t, at["startedAt"]), jsonInt(t, at["finishedAt"])
		if jsonInt(t, at["attempt"]) != 1 || at["workerId"] != "test-worker" || at["outcome"] != "succeeded" || at["result"] != "completed" ||
			started < before || started > finished || finished > after || at["error"] != nil {
			t.Errorf("attempt %v", at)
		}

		failed := a.do("GET", "/jobs/"+id+"/tasks/analyze-competitors", nil).Body
		if failed["status"] != "failed" || !jsonEqual(t, failed["error"], `{"category":"DATA_QUALITY","message":"bad input"}`) ||
			failed["output"] != nil || failed["deadLetteredAt"] == nil || failed["lastEventType"] != "Task Failed" {
			t.Errorf("analyze-competitors: %v", failed)
		}
		fa := failed["attempts"].([]any)[0].(map[string]any)
		if fa["outcome"] != "failed" || fa["result"] != "failed" || !jsonEqual(t, fa["error"], `{"category":"DATA_QUALITY","message":"bad input"}`) {
			t.Errorf("failed attempt %v", fa)
		}

		color := a.do("GET", "/jobs/"+id+"/tasks/"+taskIn(t, job, "color-tags")["id"].(string), nil).Body
		if color["taskId"] != "color-tags" || color["status"] != "pending" || !jsonEqual(t, color["input"], `{"style":"modern"}`) ||
			!jsonEqual(t, color["dependencyOutputs"], `{"scrape-store":{"done":"scrape-store"}}`) || color["output"] != nil ||
			color["error"] != nil || len(color["attempts"].([]any)) != 0 || !slices.Equal(jsonStrings(t, color["dependsOn"]), []string{"scrape-store"}) {
			t.Errorf("color-tags: %v", color)
		}
		compile := a.do("GET", "/jobs/"+id+"/tasks/compile-result", nil).Body
		if compile["status"] != "waiting" || !jsonEqual(t, compile["dependencyOutputs"], `{"color-tags":null,"font-pairing":null}`) {
			t.Errorf("compile-result: %v", compile)
		}

		otherTask := taskIn(t, a.getJob(other), "scrape-store")["id"].(string)
		for _, path := range []string{
			"/jobs/" + id + "/tasks/nope",
			"/jobs/" + id + "/tasks/" + otherTask, // a task of another job
			"/jobs/" + id + "/tasks/00000000-0000-7000-8000-000000000000",
		} {
			wantError(t, a.do("GET", path, nil), http.StatusNotFound, "Task not found")
		}
		wantError(t, a.do("GET", "/jobs/job-nope/tasks/scrape-store", nil), http.StatusNotFound, "Job not found")
		wantError(t, a.do("GET", "/jobs/job-nope", nil), http.StatusNotFound, "Job not found")
	})
}

// failRetryably runs one attempt of the task with the given key that fails with a retryable
// error, so the task goes back to pending with that error as its last one.
func (a *testAPI) failRetryably(jobID, key string) {
	a.t.Helper()
	ctx := context.Background()
	id, err := a.d.TaskInJob(ctx, "", jobID, key)
	if err != nil {
		a.t.Fatal(err)
	}
	c, err := a.d.ClaimTask(ctx, dispatch.ClaimTaskParams{TaskID: id, WorkerID: "test-worker"})
	if err != nil {
		a.t.Fatalf("claim %s: %v", key, err)
	}
	if _, err := a.d.Complete(ctx, dispatch.CompleteParams{TaskID: id, Attempt: c.Task.Attempt, LeaseToken: c.Task.LeaseToken,
		Outcome: store.OutcomeFailed, Error: &store.TaskError{Category: "INFRASTRUCTURE", Message: "connection reset"}}); err != nil {
		a.t.Fatalf("fail %s: %v", key, err)
	}
}

// The job view lists each task's result once it is final: the output of a completed task and the
// error of a failed one, in the shapes of the task view; null for every other task.
func TestGetJobShowsTaskOutputsAndErrors(t *testing.T) {
	forEachDriver(t, defaultOptions(), func(t *testing.T, a *testAPI) {
		id := a.createJob(exampleJob)
		a.runTask(id, "scrape-store", false)
		a.runTask(id, "analyze-competitors", true)
		a.failRetryably(id, "color-tags") // pending again, with a last error
		job := a.getJob(id)

		wantKeys := []string{"attempt", "dependsOn", "error", "id", "lastEventAt", "lastEventType", "name", "output", "status", "taskId"}
		for _, x := range job["tasks"].([]any) {
			if got := sortedKeys(x.(map[string]any)); !slices.Equal(got, wantKeys) {
				t.Fatalf("task keys %v, want %v", got, wantKeys)
			}
		}
		scrape := taskIn(t, job, "scrape-store")
		if scrape["status"] != "completed" || !jsonEqual(t, scrape["output"], `{"done":"scrape-store"}`) || scrape["error"] != nil {
			t.Errorf("completed task: %v", scrape)
		}
		failed := taskIn(t, job, "analyze-competitors")
		if failed["status"] != "failed" || failed["output"] != nil ||
			!jsonEqual(t, failed["error"], `{"category":"DATA_QUALITY","message":"bad input"}`) {
			t.Errorf("failed task: %v", failed)
		}
		for _, key := range []string{"color-tags", "font-pairing", "compile-result"} {
			if tk := taskIn(t, job, key); tk["output"] != nil || tk["error"] != nil {
				t.Errorf("%s (%s): output %v, error %v; want both null", key, tk["status"], tk["output"], tk["error"])
			}
		}
		// The task view keeps the retried task's last error; the job view waits for a final one.
		color := a.do("GET", "/jobs/"+id+"/tasks/color-tags", nil).Body
		if color["status"] != "pending" || !jsonEqual(t, color["error"], `{"category":"INFRASTRUCTURE","message":"connection reset"}`) {
			t.Fatalf("color-tags in the task view: %v", color)
		}
		// Final results read the same in both views.
		for _, key := range []string{"scrape-store", "analyze-competitors"} {
			full := a.do("GET", "/jobs/"+id+"/tasks/"+key, nil).Body
			if tk := taskIn(t, job, key); !reflect.DeepEqual(tk["output"], full["output"]) || !reflect.DeepEqual(tk["error"], full["error"]) {
				t.Errorf("%s: job view output %v error %v, task view output %v error %v", key, tk["output"], tk["error"], full["output"], full["error"])
			}
		}

		// The whole job, run to the end: every task shows its own output.
		done := a.createJob(exampleJob)
		a.runAll(done, exampleKeys...)
		job = a.getJob(done)
		for _, key := range exampleKeys {
			if tk := taskIn(t, job, key); !jsonEqual(t, tk["output"], fmt.Sprintf(`{"done":%q}`, key)) || tk["error"] != nil {
				t.Errorf("%s: output %v, error %v", key, tk["output"], tk["error"])
			}
		}
	})
}

func TestCancelJob(t *testing.T) {
	forEachDriver(t, defaultOptions(), func(t *testing.T, a *testAPI) {
		id := a.createJob(exampleJob)
		before := time.Now().UnixMilli()
		res := a.do("POST", "/jobs/"+id+"/cancel", nil)
		wantStatus(t, res, http.StatusOK)
		if res.Body["jobId"] != id || res.Body["status"] != "canceled" || jsonInt(t, res.Body["totalTasks"]) != 5 ||
			jsonInt(t, res.Body["completedAt"]) < before || jsonInt(t, res.Body["cancelRequestedAt"]) < before || res.Body["createdAt"] == nil {
			t.Fatalf("cancel answered %s", res.Raw)
		}
		job := a.getJob(id)
		if job["status"] != "canceled" || job["completedAt"] == nil ||
			!jsonEqual(t, job["progress"], `{"waiting":0,"pending":0,"processing":0,"completed":0,"failed":0,"canceled":5,"skipped":0}`) {
			t.Fatalf("job %v", job)
		}
		for _, k := range exampleKeys {
			if v := taskIn(t, job, k); v["lastEventType"] != "Task Canceled" {
				t.Errorf("task %s: %v", k, v)
			}
		}
		wantError(t, a.do("POST", "/jobs/"+id+"/cancel", nil), http.StatusConflict, "Job already finished")

		done := a.createJob(tasksBody(tk("a", "a")))
		a.runTask(done, "a", false)
		wantError(t, a.do("POST", "/jobs/"+done+"/cancel", nil), http.StatusConflict, "Job already finished")
		if st := a.getJob(done)["status"]; st != "completed" {
			t.Fatalf("completed job is now %v", st)
		}
		wantError(t, a.do("POST", "/jobs/job-nope/cancel", nil), http.StatusNotFound, "Job not found")
	})
}

func TestCancelJobWithRunningTask(t *testing.T) {
	forEachDriver(t, defaultOptions(), func(t *testing.T, a *testAPI) {
		ctx := context.Background()
		id := a.createJob(exampleJob)
		claim, err := a.d.ClaimTask(ctx, dispatch.ClaimTaskParams{TaskID: taskIn(t, a.getJob(id), "scrape-store")["id"].(string), WorkerID: "w"})
		if err != nil {
			t.Fatal(err)
		}
		res := a.do("POST", "/jobs/"+id+"/cancel", nil)
		wantStatus(t, res, http.StatusOK)
		if res.Body["status"] != "processing" || res.Body["completedAt"] != nil || res.Body["cancelRequestedAt"] == nil {
			t.Fatalf("cancel answered %s", res.Raw)
		}
		if got := statuses(a.getJob(id)); !reflect.DeepEqual(got, map[string]string{"scrape-store": "processing",
			"analyze-competitors": "canceled", "color-tags": "canceled", "font-pairing": "canceled", "compile-result": "canceled"}) {
			t.Fatalf("statuses %v", got)
		}
		// Asking again while the running task winds down changes nothing.
		again := a.do("POST", "/jobs/"+id+"/cancel", nil)
		wantStatus(t, again, http.StatusOK)
		if again.Body["cancelRequestedAt"] != res.Body["cancelRequestedAt"] {
			t.Errorf("second cancel moved cancelRequestedAt: %v then %v", res.Body["cancelRequestedAt"], again.Body["cancelRequestedAt"])
		}
		if _, err := a.d.Complete(ctx, dispatch.CompleteParams{TaskID: claim.Task.ID, LeaseToken: claim.Task.LeaseToken, Outcome: store.OutcomeCanceled}); err != nil {
			t.Fatal(err)
		}
		if job := a.getJob(id); job["status"] != "canceled" || job["completedAt"] == nil {
			t.Fatalf("job %v", job)
		}
	})
}

func TestResumeJob(t *testing.T) {
	forEachDriver(t, defaultOptions(), func(t *testing.T, a *testAPI) {
		id := a.createJob(exampleJob)
		a.runTask(id, "scrape-store", true)
		wantError(t, a.do("POST", "/jobs/"+id+"/resume", nil), http.StatusConflict, "Job is still processing; only a finished job can be resumed")
		a.runTask(id, "analyze-competitors", false)
		if job := a.getJob(id); job["status"] != "partial_failure" || job["completedAt"] == nil {
			t.Fatalf("job %v", job)
		}

		res := a.do("POST", "/jobs/"+id+"/resume", nil)
		wantStatus(t, res, http.StatusOK)
		resumed := jsonStrings(t, res.Body["resumedTasks"])
		slices.Sort(resumed)
		if !slices.Equal(resumed, []string{"color-tags", "compile-result", "font-pairing", "scrape-store"}) ||
			res.Body["status"] != "processing" || res.Body["completedAt"] != nil || res.Body["jobId"] != id {
			t.Fatalf("resume answered %s", res.Raw)
		}
		want := map[string]string{"scrape-store": "pending", "analyze-competitors": "completed", "color-tags": "waiting",
			"font-pairing": "waiting", "compile-result": "waiting"}
		if got := statuses(a.getJob(id)); !reflect.DeepEqual(got, want) {
			t.Fatalf("statuses after resume %v, want %v", got, want)
		}
		// The resumed task runs a new attempt; the old one stays in its history.
		a.runAll(id, "scrape-store", "color-tags", "font-pairing", "compile-result")
		if job := a.getJob(id); job["status"] != "completed" {
			t.Fatalf("job %v", job)
		}
		scrape := a.do("GET", "/jobs/"+id+"/tasks/scrape-store", nil).Body
		if n := len(scrape["attempts"].([]any)); n != 2 || jsonInt(t, scrape["attempt"]) != 2 || scrape["error"] != nil {
			t.Errorf("scrape-store after resume: %v", scrape)
		}
		wantError(t, a.do("POST", "/jobs/"+id+"/resume", nil), http.StatusConflict, "Job has no failed, canceled or skipped tasks to resume")
		wantError(t, a.do("POST", "/jobs/job-nope/resume", nil), http.StatusNotFound, "Job not found")
	})
}

func TestResumeCanceledJob(t *testing.T) {
	forEachDriver(t, defaultOptions(), func(t *testing.T, a *testAPI) {
		id := a.createJob(exampleJob)
		a.runTask(id, "scrape-store", false)
		wantStatus(t, a.do("POST", "/jobs/"+id+"/cancel", nil), http.StatusOK)
		res := a.do("POST", "/jobs/"+id+"/resume", nil)
		wantStatus(t, res, http.StatusOK)
		if got := jsonStrings(t, res.Body["resumedTasks"]); len(got) != 4 || res.Body["cancelRequestedAt"] != nil {
			t.Fatalf("resume answered %s", res.Raw)
		}
		want := map[string]string{"scrape-store": "completed", "analyze-competitors": "pending", "color-tags": "pending",
			"font-pairing": "pending", "compile-result": "waiting"}
		if got := statuses(a.getJob(id)); !reflect.DeepEqual(got, want) {
			t.Fatalf("statuses %v, want %v", got, want)
		}
		// A resumed job takes new tasks again.
		wantStatus(t, a.do("POST", "/jobs/"+id+"/tasks", tasksBody(tk("late", "x", "scrape-store"))), http.StatusOK)
	})
}

func TestCancelAndResumeTakeNoBody(t *testing.T) {
	forEachDriver(t, defaultOptions(), func(t *testing.T, a *testAPI) {
		id := a.createJob(exampleJob)
		for _, b := range []string{`{"reason":"x"}`, `[]`, `x`, `{} {}`} {
			wantError(t, a.do("POST", "/jobs/"+id+"/cancel", b), http.StatusBadRequest, "this endpoint takes no request body (send nothing, {} or null)")
			wantError(t, a.do("POST", "/jobs/"+id+"/resume", b), http.StatusBadRequest, "this endpoint takes no request body (send nothing, {} or null)")
		}
		if st := a.getJob(id)["status"]; st != "processing" {
			t.Fatalf("a refused cancel changed the job: %v", st)
		}
		for _, b := range []string{``, `{}`, ` null `, "{ \n}"} {
			id := a.createJob(exampleJob)
			wantStatus(t, a.do("POST", "/jobs/"+id+"/cancel", b), http.StatusOK)
			wantStatus(t, a.do("POST", "/jobs/"+id+"/resume", b), http.StatusOK)
		}
	})
}

func TestIdempotencyKey(t *testing.T) {
	forEachDriver(t, defaultOptions(), func(t *testing.T, a *testAPI) {
		post := func(key, tenantKey, b string) response {
			return a.do("POST", "/jobs", b, "x-api-key", tenantKey, "Idempotency-Key", key)
		}
		first := post("order-42", a.key, exampleJob)
		wantStatus(t, first, http.StatusCreated)
		if h := first.Header.Get("Idempotent-Replayed"); h != "" {
			t.Errorf("first request answered Idempotent-Replayed: %q", h)
		}
		again := post("order-42", a.key, exampleJob)
		wantStatus(t, again, http.StatusCreated)
		if again.Header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("replay lacks Idempotent-Replayed: true (headers %v)", again.Header)
		}
		if !reflect.DeepEqual(first.Body, again.Body) {
			t.Errorf("replay answered %s, first %s", again.Raw, first.Raw)
		}
		id := first.Body["jobId"].(string)
		if ids, _ := a.listIDs(""); !slices.Equal(ids, []string{id}) {
			t.Fatalf("jobs %v after a replay, want only %s", ids, id)
		}

		wantError(t, post("order-42", a.key, chainBody("t", 2)), http.StatusUnprocessableEntity,
			"Idempotency-Key was already used with a different request body")
		if ids, _ := a.listIDs(""); len(ids) != 1 {
			t.Fatalf("jobs %v after a mismatched key", ids)
		}

		otherKey := a.newKey("other")
		theirs := post("order-42", otherKey, exampleJob)
		wantStatus(t, theirs, http.StatusCreated)
		if theirs.Body["jobId"] == id || theirs.Header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("another tenant's request with the same key got %s", theirs.Raw)
		}
		if ids, _ := a.listIDs(""); len(ids) != 1 {
			t.Fatalf("acme sees %v", ids)
		}

		// Without a key every request is a new job; an over-long key is refused.
		a.createJob(exampleJob)
		a.createJob(exampleJob)
		if ids, _ := a.listIDs(""); len(ids) != 3 {
			t.Fatalf("jobs %v", ids)
		}
		wantError(t, post(strings.Repeat("k", 256), a.key, exampleJob), http.StatusBadRequest, "Idempotency-Key must be at most 255 characters")
		wantStatus(t, post(strings.Repeat("k", 255), a.key, exampleJob), http.StatusCreated)
	})
}

func TestUnknownRouteAndHealth(t *testing.T) {
	forEachDriver(t, defaultOptions(), func(t *testing.T, a *testAPI) {
		for _, c := range []struct{ method, path string }{
			{"GET", "/nope"}, {"GET", "/jobs/x/y/z"}, {"POST", "/jobs/x/unknown"},
		} {
			for _, headers := range [][]string{nil, {"Accept", "application/json"}} {
				res := a.do(c.method, c.path, nil, headers...)
				wantError(t, res, http.StatusNotFound, "no such endpoint: "+c.method+" "+c.path)
			}
		}
		// A known path with a method it does not serve is a 405 that says which ones it does.
		for _, c := range []struct{ method, path, allow string }{
			{"DELETE", "/jobs", "GET, HEAD, POST"}, {"PUT", "/jobs/x", "GET, HEAD"}, {"GET", "/jobs/x/cancel", "POST"},
			{"PATCH", "/jobs/x/tasks", "POST"},
		} {
			res := a.do(c.method, c.path, nil)
			wantError(t, res, http.StatusMethodNotAllowed, "method "+c.method+" is not allowed on "+c.path+"; allowed: "+c.allow)
			if got := res.Header.Get("Allow"); got != c.allow {
				t.Errorf("%s %s: Allow %q, want %q", c.method, c.path, got, c.allow)
			}
		}
		for path, want := range map[string]string{"/healthz": `{"status":"ok"}`, "/readyz": `{"status":"ready"}`} {
			res := a.do("GET", path, nil, "Accept", "application/json") // no key
			wantStatus(t, res, http.StatusOK)
			if !jsonEqual(t, res.Body, want) {
				t.Errorf("%s answered %s", path, res.Raw)
			}
		}
		res := a.do("GET", "/openapi.json", nil, "Accept", "application/json")
		if wantStatus(t, res, http.StatusOK); res.Body["openapi"] == nil {
			t.Errorf("/openapi.json: %s", res.Raw)
		}
	})
}

// brokenStore fails the queries a test needs to fail, with an error whose text must not reach
// clients.
type brokenStore struct{ store.Store }

var errBroken = errors.New("connection refused: host=db.internal password=hunter2")

func (brokenStore) JobList(context.Context, store.ListJobsParams) ([]*store.Job, error) {
	return nil, errBroken
}
func (brokenStore) Ping(context.Context) error { return errBroken }

func TestInternalErrorIsGeneric(t *testing.T) {
	t.Parallel()
	a := newAPI(t, brokenStore{storetest.OpenSQLite(t)}, defaultOptions())
	res := a.do("GET", "/jobs", nil)
	wantError(t, res, http.StatusInternalServerError, "Internal server error")
	if got := sortedKeys(res.Body); !slices.Equal(got, []string{"error"}) || strings.Contains(string(res.Raw), "hunter2") {
		t.Errorf("500 answered %s", res.Raw)
	}
	ready := a.do("GET", "/readyz", nil, "Accept", "application/json")
	wantStatus(t, ready, http.StatusServiceUnavailable)
	if strings.Contains(string(ready.Raw), "hunter2") || ready.Body["status"] != "unavailable" {
		t.Errorf("/readyz answered %s", ready.Raw)
	}
}

// concurrently sends the same request n times at once and returns the answers.
func (a *testAPI) concurrently(n int, method, path, b string, headers ...string) []response {
	a.t.Helper()
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		out   = make([]response, n)
		errs  = make([]error, n)
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out[i], errs[i] = a.send(method, path, b, append([]string{"x-api-key", a.key}, headers...)...)
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			a.t.Fatalf("%s %s, request %d: %v", method, path, i, err)
		}
	}
	return out
}

// countStatus counts the answers with each status code.
func countStatus(rs []response) map[int]int {
	out := map[int]int{}
	for _, r := range rs {
		out[r.Status]++
	}
	return out
}

func TestIdempotencyKeyConcurrentRequests(t *testing.T) {
	forEachDriver(t, defaultOptions(), func(t *testing.T, a *testAPI) {
		for round := range 3 {
			rs := a.concurrently(8, "POST", "/jobs", exampleJob, "Idempotency-Key", fmt.Sprintf("k-%d", round))
			ids := map[any]bool{}
			fresh := 0
			for _, r := range rs {
				if r.Status != http.StatusCreated {
					t.Fatalf("round %d: %d %s", round, r.Status, r.Raw)
				}
				ids[r.Body["jobId"]] = true
				if r.Header.Get("Idempotent-Replayed") == "" {
					fresh++
				}
			}
			if len(ids) != 1 || fresh != 1 {
				t.Fatalf("round %d: ids %v, %d fresh answers", round, ids, fresh)
			}
		}
		if ids, _ := a.listIDs(""); len(ids) != 3 {
			t.Fatalf("%d jobs for 3 keys", len(ids))
		}
	})
}

func TestConcurrentTransitionsApplyOnce(t *testing.T) {
	forEachDriver(t, defaultOptions(), func(t *testing.T, a *testAPI) {
		id := a.createJob(exampleJob)

		rs := a.concurrently(6, "POST", "/jobs/"+id+"/tasks", tasksBody(tk("x", "x", "scrape-store")))
		if got := countStatus(rs); got[http.StatusOK] != 1 || got[http.StatusBadRequest] != 5 {
			t.Fatalf("concurrent additions of one task: %v", got)
		}
		for _, r := range rs {
			if r.Status == http.StatusBadRequest && r.Body["error"] != "Duplicate taskId: x" {
				t.Fatalf("refused addition: %s", r.Raw)
			}
		}
		if n := jsonInt(t, a.getJob(id)["totalTasks"]); n != 6 {
			t.Fatalf("totalTasks %d", n)
		}

		rs = a.concurrently(6, "POST", "/jobs/"+id+"/cancel", "")
		if got := countStatus(rs); got[http.StatusOK] != 1 || got[http.StatusConflict] != 5 {
			t.Fatalf("concurrent cancels: %v", got)
		}
		rs = a.concurrently(6, "POST", "/jobs/"+id+"/resume", "")
		if got := countStatus(rs); got[http.StatusOK] != 1 || got[http.StatusConflict] != 5 {
			t.Fatalf("concurrent resumes: %v", got)
		}
		count := map[string]int{}
		for _, e := range a.jobEvents(id) {
			count[eventLine(e)]++
		}
		if count["Job Canceled"] != 1 || count["Job Resumed"] != 1 || count["Job Tasks Added"] != 1 || count["Task Canceled x"] != 1 {
			t.Fatalf("event counts %v", count)
		}
		if job := a.getJob(id); job["status"] != "processing" || jsonInt(t, job["progress"].(map[string]any)["pending"]) != 2 {
			t.Fatalf("job after resume: %v", job)
		}
	})
}

func TestJobName(t *testing.T) {
	forEachDriver(t, defaultOptions(), func(t *testing.T, a *testAPI) {
		named := a.createJob(`{"name":"nightly build","tasks":[{"taskId":"a","name":"a"}]}`)
		plain := a.createJob(tasksBody(tk("a", "a")))
		if got := a.getJob(named)["name"]; got != "nightly build" {
			t.Errorf("name %v", got)
		}
		if job := a.getJob(plain); job["name"] != nil {
			t.Errorf("unnamed job has name %v", job["name"])
		}
		res := a.do("GET", "/jobs", nil)
		jobs := res.Body["jobs"].([]any)
		if _, has := jobs[0].(map[string]any)["name"]; has || jobs[1].(map[string]any)["name"] != "nightly build" {
			t.Errorf("listing %s", res.Raw)
		}
	})
}

// randomText is n incompressible alphanumeric characters, the same on every run.
func randomText(n int) string {
	rnd := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, n)
	for i := range b {
		b[i] = "abcdefghijklmnopqrstuvwxyz0123456789"[rnd.IntN(36)]
	}
	return string(b)
}

// Task and job names are free text with no length limit (the producer contract only requires a
// non-empty string). Whatever the server does with a name it cannot keep, it must do it the same
// way on every driver and before anything is stored: refuse it with a 400, or keep it and run the
// job.
func TestNamesTheStoreMightNotHold(t *testing.T) {
	long := randomText(3000) // a task's queue defaults to its name, and the queue is indexed
	cases := []struct {
		name string
		body string
		keys []string // tasks to run, in order, if the job is accepted
	}{
		{"NUL in a task name", `{"tasks":[{"taskId":"a","name":"scrape\u0000store"}]}`, []string{"a"}},
		{"NUL in the job name", `{"name":"nightly\u0000","tasks":[{"taskId":"a","name":"a"}]}`, []string{"a"}},
		{"3000-character root task name", tasksBody(tk("a", long)), []string{"a"}},
		{"3000-character dependent task name", tasksBody(tk("a", "a"), tk("b", long, "a")), []string{"a", "b"}},
	}
	forEachDriver(t, defaultOptions(), func(t *testing.T, a *testAPI) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				a := a.on(t)
				res := a.do("POST", "/jobs", c.body)
				switch res.Status {
				case http.StatusBadRequest:
					if msg, _ := res.Body["error"].(string); msg == "" {
						t.Fatalf("400 without an error message: %s", res.Raw)
					}
					a.wantNoJobs()
					return
				case http.StatusCreated:
				default:
					t.Fatalf("POST /jobs answered %d %s; want 400 (refused) or 201 (kept)", res.Status, res.Raw)
				}
				id := res.Body["jobId"].(string)
				var sent struct {
					Name  string
					Tasks []struct{ Name string }
				}
				if err := json.Unmarshal([]byte(c.body), &sent); err != nil {
					t.Fatal(err)
				}
				job := a.getJob(id)
				if job["name"] != nil && job["name"] != sent.Name || job["name"] == nil && sent.Name != "" {
					t.Errorf("job name %q, sent %q", job["name"], sent.Name)
				}
				for i, x := range job["tasks"].([]any) {
					if got := x.(map[string]any)["name"]; got != sent.Tasks[i].Name {
						t.Errorf("task %d name %.40q, sent %.40q", i, got, sent.Tasks[i].Name)
					}
				}
				a.runAll(id, c.keys...)
				if st := a.getJob(id)["status"]; st != "completed" {
					t.Fatalf("job %v after running every task", st)
				}
			})
		}
	})
}
