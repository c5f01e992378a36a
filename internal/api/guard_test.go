package api_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/baton-dev/baton/internal/api"
	"github.com/baton-dev/baton/internal/lifecycle"
)

// badBytes are path, query and header values PostgreSQL cannot store as text: a NUL, lone
// continuation and lead bytes, an overlong encoding, a UTF-16 surrogate encoded as UTF-8.
var badBytes = []string{"\x00", "a\x00b", "\xff", "\xc3\x28", "\xc0\xaf", "\xed\xa0\x80", "ok\x80"}

// badJSON are bodies whose strings PostgreSQL's text and jsonb cannot hold.
var badJSON = []string{
	`{"task_id":"\u0000","worker_id":"\u0000","tasks":[{"taskId":"a","name":"\u0000"}],"streams":["\u0000"]}`,
	"{\"task_id\":\"\xff\",\"worker_id\":\"w\xfe\",\"tasks\":[{\"taskId\":\"a\",\"name\":\"n\",\"input\":{\"k\":\"\xc3\x28\"}}]}",
	`{"worker_id":"w","tasks":[{"taskId":"a","name":"n","input":{"k":"\ud800"}}],"streams":["\udc00x"]}`,
}

var pathParam = regexp.MustCompile(`\{[^}]+\}`)

// Every route of both listeners, with bytes PostgreSQL cannot store in each path parameter, query
// parameter, header and JSON string: never a 5xx, on either store, and nothing changes.
func TestBadBytesNeverReachTheStore(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		a := &testAPI{t: t, st: w.st, d: w.d, srv: w.public}
		a.key = a.newKey("acme")
		key := a.key
		jobID := a.createJob(exampleJob)
		_, ids := w.submit(lifecycle.TaskSpec{Key: "t", Name: "op"})
		c, tok := w.claim(ids["t"])
		before := fencedState(t, w, c.Task.JobID, ids["t"])

		handlers := map[api.Listener]http.Handler{api.PublicListener: w.server.ProducerHandler(), api.InternalListener: w.server.InternalHandler()}
		serve := func(listener api.Listener, method, target string, body []byte, header http.Header) int {
			req := httptest.NewRequest(method, "http://baton"+target, bytes.NewReader(body))
			for k, vs := range header {
				req.Header[k] = vs
			}
			rec := httptest.NewRecorder()
			handlers[listener].ServeHTTP(rec, req)
			if rec.Code >= 500 {
				t.Errorf("%s %q (headers %q): %d %s", method, target, header, rec.Code, rec.Body)
			}
			return rec.Code
		}
		good := func() http.Header {
			return http.Header{"X-Api-Key": {key}, "Content-Type": {"application/json"}, "Authorization": {"Bearer " + tok},
				"X-Trace-Task-Capability": {tok}}
		}
		queryNames := []string{"status", "cursor", "limit", "after", "task_id", "Last-Event-ID", "x"}
		headerNames := []string{"X-Api-Key", "Idempotency-Key", "Last-Event-ID", "Authorization", "X-Trace-Task-Capability",
			"Accept", "Content-Type", "Origin", "Traceparent"}
		requests := 0
		for _, rt := range w.server.Routes() {
			fill := func(v string) string {
				return pathParam.ReplaceAllStringFunc(rt.Pattern, func(p string) string {
					switch p {
					case "{jobId}":
						return jobID + v
					case "{task_id}":
						return ids["t"] + v
					}
					return "scrape-store" + v
				})
			}
			body := []byte(`{}`)
			for _, bad := range badBytes {
				esc := urlEscapeAll(bad)
				if strings.Contains(rt.Pattern, "{") {
					if code := serve(rt.Listener, rt.Method, fill(esc), body, good()); code != http.StatusBadRequest {
						t.Errorf("%s %s with %q in a path parameter: %d, want 400", rt.Method, rt.Pattern, bad, code)
					}
					requests++
				}
				for _, q := range queryNames {
					serve(rt.Listener, rt.Method, fill("")+"?"+q+"="+esc, body, good())
					serve(rt.Listener, rt.Method, fill("")+"?"+urlEscapeAll(q+bad)+"=1", body, good())
					requests += 2
				}
				for _, h := range headerNames {
					hs := good()
					hs[http.CanonicalHeaderKey(h)] = []string{"v" + bad}
					if code := serve(rt.Listener, rt.Method, fill(""), body, hs); code != http.StatusBadRequest {
						t.Errorf("%s %s with %q in header %s: %d, want 400", rt.Method, rt.Pattern, bad, h, code)
					}
					requests++
				}
			}
			if rt.Method == "POST" {
				for _, b := range badJSON {
					if code := serve(rt.Listener, rt.Method, fill(""), []byte(b), good()); code != http.StatusBadRequest {
						t.Errorf("%s %s with body %q: %d, want 400", rt.Method, rt.Pattern, b, code)
					}
					requests++
				}
			}
		}
		if after := fencedState(t, w, c.Task.JobID, ids["t"]); after != before {
			t.Errorf("refused requests changed state:\n%s\n%s", before, after)
		}
		t.Logf("%d requests", requests)
	})
}

// urlEscapeAll %-escapes every byte of s.
func urlEscapeAll(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		fmt.Fprintf(&b, "%%%02X", s[i])
	}
	return b.String()
}

// The JSON check refuses what jsonb cannot hold and lets through what it can, escapes included.
func TestJSONTextCheck(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		a := &testAPI{t: t, st: w.st, d: w.d, srv: w.public}
		a.key = a.newKey("acme")
		for _, c := range []struct {
			input string
			ok    bool
		}{
			{`"\u00e9\u003c\u0026 \\u0000 is text"`, true},     // escaped backslash: a literal \u0000
			{`"\ud83d\ude00 emoji as a surrogate pair"`, true}, // a valid pair
			{`"caf\u00e9"`, true},
			{`"\u0000"`, false},
			{`"x\\\u0000"`, false}, // an escaped backslash, then a real \u0000
			{`"\ud83d alone"`, false},
			{`"\ude00 alone"`, false},
			{`"\ud83d\u0041"`, false},
		} {
			res := a.do("POST", "/jobs", `{"tasks":[{"taskId":"a","name":"n","input":{"s":`+c.input+`}}]}`)
			if c.ok && res.Status != http.StatusCreated || !c.ok && res.Status != http.StatusBadRequest {
				t.Errorf("input %s: %d %s", c.input, res.Status, res.Raw)
			}
		}
	})
}
