package ui_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
)

// signIn signs c in with key through the sign-in form and returns the session's form token.
func signIn(t *testing.T, s *server, c *http.Client, key string) string {
	t.Helper()
	res, err := c.Get(s.public.URL + "/ui/login")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	res = postForm(t, c, s.public.URL+"/ui/login", url.Values{"key": {key}, "next": {"/ui/jobs"}, "csrf": {csrfOf(t, s, c)}})
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/ui/jobs" {
		t.Fatalf("sign in: %d to %q, want 303 to /ui/jobs", res.StatusCode, res.Header.Get("Location"))
	}
	return csrfOf(t, s, c)
}

func csrfOf(t *testing.T, s *server, c *http.Client) string {
	t.Helper()
	u, _ := url.Parse(s.public.URL + "/ui/")
	for _, k := range c.Jar.Cookies(u) {
		if k.Name == "baton_csrf" {
			return k.Value
		}
	}
	return ""
}

func postForm(t *testing.T, c *http.Client, to string, form url.Values, header ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, to, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res
}

func get(t *testing.T, c *http.Client, to string) (*http.Response, string) {
	t.Helper()
	res, err := c.Get(to)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

func TestSignInWithAPIKey(t *testing.T) {
	s := newServer(t)
	job := s.submit(t, "acme", exampleJob(t))
	c := client(t)

	res, _ := get(t, c, s.public.URL+"/")
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/ui/" {
		t.Errorf("GET / = %d to %q, want 303 to /ui/", res.StatusCode, res.Header.Get("Location"))
	}
	res, _ = get(t, c, s.public.URL+"/ui/jobs")
	if res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(res.Header.Get("Location"), "/ui/login?next=%2Fui%2Fjobs") {
		t.Errorf("GET /ui/jobs signed out = %d to %q, want 303 to the sign-in page", res.StatusCode, res.Header.Get("Location"))
	}
	get(t, c, s.public.URL+"/ui/login")
	token := csrfOf(t, s, c)

	cases := []struct {
		name   string
		key    string
		csrf   string // "current": the token the browser's cookie holds
		status int
		says   string
	}{
		{"wrong key", "bk_not-a-key-of-this-server", "current", http.StatusUnauthorized, "not valid"},
		{"no key", "", "current", http.StatusUnauthorized, "Enter an API key"},
		{"no form token", s.keys["acme"], "", http.StatusForbidden, "CSRF"},
		{"another form token", s.keys["acme"], "forged", http.StatusForbidden, "CSRF"},
	}
	for _, tc := range cases {
		form := url.Values{"key": {tc.key}}
		switch tc.csrf {
		case "current":
			form.Set("csrf", token)
		case "":
		default:
			form.Set("csrf", tc.csrf)
		}
		req, _ := http.NewRequest(http.MethodPost, s.public.URL+"/ui/login", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != tc.status || !strings.Contains(string(b), tc.says) {
			t.Errorf("%s: %d, want %d saying %q", tc.name, res.StatusCode, tc.status, tc.says)
		}
		if u, _ := url.Parse(s.public.URL + "/ui/"); hasCookie(c, u, "baton_key") {
			t.Fatalf("%s: the browser got a key cookie", tc.name)
		}
		token = csrfOf(t, s, c) // a refused form token is replaced
	}

	// The refused keys are counted like the API's.
	if invalid, missing := s.rejected(t, "api_key_invalid"), s.rejected(t, "api_key_missing"); invalid != 1 || missing != 1 {
		t.Errorf("refused keys counted: %v invalid, %v missing; want 1 and 1", invalid, missing)
	}
	signIn(t, s, c, s.keys["acme"])
	res, err := c.Get(s.public.URL + "/ui/jobs")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(body), job) {
		t.Fatalf("GET /ui/jobs signed in = %d, want 200 listing %s", res.StatusCode, job)
	}
	for _, sc := range res.Cookies() {
		t.Errorf("a page set cookie %s", sc.Name)
	}
	// The cookies: HttpOnly, SameSite=Strict, the dashboard's path only.
	checkCookieFlags(t, s)
}

func hasCookie(c *http.Client, u *url.URL, name string) bool {
	for _, k := range c.Jar.Cookies(u) {
		if k.Name == name && k.Value != "" {
			return true
		}
	}
	return false
}

// checkCookieFlags signs in without a jar and reads the Set-Cookie headers themselves.
func checkCookieFlags(t *testing.T, s *server) {
	t.Helper()
	c := client(t)
	get(t, c, s.public.URL+"/ui/login")
	req, _ := http.NewRequest(http.MethodPost, s.public.URL+"/ui/login",
		strings.NewReader(url.Values{"key": {s.keys["acme"]}, "csrf": {csrfOf(t, s, c)}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	seen := map[string]bool{}
	for _, h := range res.Header.Values("Set-Cookie") {
		name, _, _ := strings.Cut(h, "=")
		seen[name] = true
		for _, attr := range []string{"Path=/ui", "HttpOnly", "SameSite=Strict"} {
			if !strings.Contains(h, attr) {
				t.Errorf("cookie %s lacks %s: %s", name, attr, h)
			}
		}
	}
	if !seen["baton_key"] || !seen["baton_csrf"] {
		t.Errorf("sign-in set cookies %v, want baton_key and baton_csrf", seen)
	}
}

func TestPagesAreScopedToTheKeysTenant(t *testing.T) {
	s := newServer(t)
	ours := s.submit(t, "acme", exampleJob(t))
	theirs := s.submit(t, "globex", exampleJob(t))
	c := client(t)
	token := signIn(t, s, c, s.keys["acme"])

	_, body := get(t, c, s.public.URL+"/ui/jobs")
	if !strings.Contains(body, ours) || strings.Contains(body, theirs) {
		t.Errorf("the jobs page must list %s and not the other tenant's %s", ours, theirs)
	}
	for _, path := range []string{"/ui/jobs/" + theirs, "/ui/jobs/" + theirs + "/tasks/scrape-store", "/ui/jobs/" + theirs + "/live",
		"/ui/jobs?q=" + theirs} {
		res, body := get(t, c, s.public.URL+path)
		if path == "/ui/jobs?q="+theirs {
			if res.StatusCode != http.StatusOK || !strings.Contains(body, "No job with id") {
				t.Errorf("searching the other tenant's job: %d, want 200 saying there is no such job", res.StatusCode)
			}
			continue
		}
		if res.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s = %d, want 404", path, res.StatusCode)
		}
	}
	res := postForm(t, c, s.public.URL+"/ui/jobs/"+theirs+"/cancel", url.Values{"csrf": {token}})
	if res.StatusCode != http.StatusNotFound {
		t.Errorf("cancel the other tenant's job = %d, want 404", res.StatusCode)
	}
	if j, _, err := s.d.GetJob(t.Context(), "globex", theirs); err != nil || !j.CancelRequestedAt.IsZero() || j.Status != lifecycle.JobProcessing {
		t.Errorf("the other tenant's job was touched: %+v, %v", j, err)
	}
	// The search finds our job by id.
	res, _ = get(t, c, s.public.URL+"/ui/jobs?q="+ours)
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/ui/jobs/"+ours {
		t.Errorf("search our job = %d to %q", res.StatusCode, res.Header.Get("Location"))
	}
}

func TestActionsNeedTheFormToken(t *testing.T) {
	s := newServer(t)
	job := s.submit(t, "acme", exampleJob(t))
	c := client(t)
	token := signIn(t, s, c, s.keys["acme"])
	to := s.public.URL + "/ui/jobs/" + job + "/cancel"
	for _, tc := range []struct {
		name   string
		form   url.Values
		header []string
	}{
		{"no token", url.Values{}, nil},
		{"wrong token", url.Values{"csrf": {"x" + token}}, nil},
		{"from another site", url.Values{"csrf": {token}}, []string{"Sec-Fetch-Site", "cross-site"}},
	} {
		if res := postForm(t, c, to, tc.form, tc.header...); res.StatusCode != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", tc.name, res.StatusCode)
		}
	}
	if j, _, _ := s.d.GetJob(t.Context(), "acme", job); !j.CancelRequestedAt.IsZero() {
		t.Fatal("a refused form canceled the job")
	}
	res := postForm(t, c, to, url.Values{"csrf": {token}})
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/ui/jobs/"+job+"?flash=canceled" {
		t.Fatalf("cancel = %d to %q", res.StatusCode, res.Header.Get("Location"))
	}
	if j, _, _ := s.d.GetJob(t.Context(), "acme", job); j.Status != lifecycle.JobCanceled {
		t.Errorf("job status %s after cancel, want canceled", j.Status)
	}
	// Canceling again says so; resume works once canceled.
	if res := postForm(t, c, to, url.Values{"csrf": {token}}); !strings.HasSuffix(res.Header.Get("Location"), "flash=finished") {
		t.Errorf("cancel again: to %q, want the finished message", res.Header.Get("Location"))
	}
	if res := postForm(t, c, s.public.URL+"/ui/jobs/"+job+"/resume", url.Values{"csrf": {token}}); !strings.HasSuffix(res.Header.Get("Location"), "flash=resumed") {
		t.Errorf("resume: to %q", res.Header.Get("Location"))
	}
	// Sign out forgets the key.
	postForm(t, c, s.public.URL+"/ui/logout", url.Values{"csrf": {token}})
	if res, _ := get(t, c, s.public.URL+"/ui/jobs"); res.StatusCode != http.StatusSeeOther {
		t.Errorf("after sign out: %d, want a redirect to sign in", res.StatusCode)
	}
}

// The pages must work under their Content-Security-Policy: no inline script, handler or style.
var inline = regexp.MustCompile(`<script>|<script [^>]*>[^<]|\son[a-z]+=|\sstyle=|<style`)

func TestPagesKeepTheirContentSecurityPolicy(t *testing.T) {
	s := newServer(t)
	job := s.submit(t, "acme", exampleJob(t))
	s.runWorker(t, nil, "scrape-store", "analyze-competitors", "color-tags", "font-pairing", "compile-result")
	waitJob(t, s, job, lifecycle.JobCompleted)
	c := client(t)
	signIn(t, s, c, s.keys["acme"])
	for _, path := range []string{"/ui/login", "/ui/jobs", "/ui/jobs?status=completed", "/ui/jobs/" + job, "/ui/jobs/" + job + "/tasks/compile-result",
		"/ui/queues", "/ui/dead-letters", "/ui/pipelines", "/ui/datasets", "/ui/nowhere"} {
		res, body := get(t, c, s.public.URL+path)
		want := http.StatusOK
		if path == "/ui/nowhere" {
			want = http.StatusNotFound
		}
		if res.StatusCode != want {
			t.Errorf("GET %s = %d, want %d", path, res.StatusCode, want)
		}
		csp := res.Header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") || strings.Contains(csp, "unsafe") {
			t.Errorf("GET %s: Content-Security-Policy %q", path, csp)
		}
		if m := inline.FindString(body); m != "" {
			t.Errorf("GET %s: inline %q is blocked by the policy", path, m)
		}
		if res.Header.Get("X-Frame-Options") != "DENY" || res.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: missing X-Frame-Options or X-Content-Type-Options", path)
		}
	}
	if res, _ := get(t, c, s.public.URL+"/ui/jobs?status=bogus"); res.StatusCode != http.StatusNotFound {
		t.Errorf("unknown status filter = %d, want 404", res.StatusCode)
	}
	if res, _ := get(t, c, s.public.URL+"/ui/jobs?cursor=bogus"); res.StatusCode != http.StatusBadRequest {
		t.Errorf("bad cursor = %d, want 400", res.StatusCode)
	}
}

func waitJob(t *testing.T, s *server, id string, want lifecycle.JobStatus) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		j, _, err := s.d.GetJob(t.Context(), "", id)
		if err == nil && j.Status == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s is %v (%v), want %s", id, j.Status, err, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The job page's stream sends every task's status first, then each change, then the end.
func TestJobStreamFollowsTheTasks(t *testing.T) {
	s := newServer(t)
	job := s.submit(t, "acme", exampleJob(t))
	c := client(t)
	signIn(t, s, c, s.keys["acme"])
	res, err := c.Get(s.public.URL + "/ui/jobs/" + job + "/live")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("content type %q", res.Header.Get("Content-Type"))
	}
	type state struct {
		Status string            `json:"status"`
		Done   int               `json:"done"`
		Tasks  map[string]string `json:"tasks"`
	}
	events := make(chan [2]string)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(nil, 1<<20)
		var name string
		for sc.Scan() {
			line := sc.Text()
			if v, ok := strings.CutPrefix(line, "event: "); ok {
				name = v
			} else if v, ok := strings.CutPrefix(line, "data: "); ok {
				events <- [2]string{name, v}
			}
		}
	}()
	next := func() (string, state) {
		t.Helper()
		select {
		case e, ok := <-events:
			if !ok {
				t.Fatal("the stream ended")
			}
			var st state
			if err := json.Unmarshal([]byte(e[1]), &st); err != nil {
				t.Fatal(err)
			}
			return e[0], st
		case <-time.After(20 * time.Second):
			t.Fatal("no event")
		}
		return "", state{}
	}
	name, first := next()
	if name != "state" || len(first.Tasks) != 5 || first.Status != "processing" {
		t.Fatalf("first event %s %+v, want the state of 5 tasks", name, first)
	}
	s.runWorker(t, nil, "scrape-store", "analyze-competitors", "color-tags", "font-pairing", "compile-result")
	completed := map[string]bool{}
	for {
		name, st := next()
		for id, status := range st.Tasks {
			if status == "completed" {
				completed[id] = true
			}
		}
		if name == "end" {
			if st.Status != "completed" || st.Done != 5 || len(completed) != 5 {
				t.Fatalf("end %+v with %d tasks seen completed, want the job completed", st, len(completed))
			}
			return
		}
	}
}

func TestJobsPagesAndFilter(t *testing.T) {
	s := newServer(t)
	seedJobs(t, s, "acme", 60) // every tenth one partial_failure
	c := client(t)
	signIn(t, s, c, s.keys["acme"])
	rows := regexp.MustCompile(`<tr data-id="(job-seeded-\d+)"`)
	older := regexp.MustCompile(`<a href="([^"]+)" rel="next">`)

	_, body := get(t, c, s.public.URL+"/ui/jobs")
	first := rows.FindAllStringSubmatch(body, -1)
	if len(first) != 50 || first[0][1] != "job-seeded-00059" || !strings.Contains(body, "<b>60</b>") {
		t.Fatalf("page 1: %d rows from %v, want 50 from the newest, and a count of 60", len(first), first[:min(1, len(first))])
	}
	next := older.FindStringSubmatch(body)
	if next == nil {
		t.Fatal("page 1 has no link to older jobs")
	}
	_, body = get(t, c, s.public.URL+strings.ReplaceAll(next[1], "&amp;", "&"))
	second := rows.FindAllStringSubmatch(body, -1)
	if len(second) != 10 || second[0][1] != "job-seeded-00009" || older.MatchString(body) || !strings.Contains(body, "« Newest") {
		t.Fatalf("page 2: %d rows, want the 10 oldest, no older link and a link to the newest", len(second))
	}
	_, body = get(t, c, s.public.URL+"/ui/jobs?status=partial_failure")
	if got := rows.FindAllStringSubmatch(body, -1); len(got) != 6 {
		t.Errorf("partial_failure filter: %d rows, want 6", len(got))
	}
}

// The pipeline page shows each limited job's backpressure: its state, mode, backlog and limits,
// and the routings it holds with the events they cover.
func TestPipelinePageShowsBackpressure(t *testing.T) {
	s := newServer(t)
	doc := `
name: capped
jobs:
  - {name: feed, activation: source, runtime: ecs_platform, operator: feed, outputs: 1, source: {kind: manual}}
  - name: sink
    activation: reactive
    runtime: ecs_platform
    operator: sink
    outputs: 0
    max_queue_depth: 40
    backpressure_mode: coalesce
    inputs: [{from: {job: feed, output: 0}}]
`
	s.deploy(t, "acme", doc)
	c := client(t)
	signIn(t, s, c, s.keys["acme"])
	_, body := get(t, c, s.public.URL+"/ui/pipelines/capped")
	for _, want := range []string{`id="pipeline-backpressure"`, "<b>sink</b>", ">open<", "<td>coalesce</td>", `<td class="n">40</td>`, `<td class="n">20</td>`} {
		if !strings.Contains(body, want) {
			t.Errorf("the open job's page lacks %q", want)
		}
	}
	if strings.Contains(body, "<b>feed</b></td><td><span class=\"badge") {
		t.Error("the source job, which has no limits, has a backpressure row")
	}

	// A held routing that covers 7 events: the job is paused.
	v, err := s.st.PipelineGet(t.Context(), "acme", "capped")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	err = s.st.InTx(t.Context(), func(tx store.Tx) error {
		return tx.HeldRoutingInsertMany(t.Context(), []*store.HeldRouting{{Tenant: "acme", Pipeline: "capped", Version: v.ActiveVersion,
			Job: "sink", Key: "pipeline:capped:sink:cursor:x:v1:1", Event: json.RawMessage(`{}`), Events: 7, HeldAt: now, PausedSince: now}})
	})
	if err != nil {
		t.Fatal(err)
	}
	_, body = get(t, c, s.public.URL+"/ui/pipelines/capped")
	for _, want := range []string{">paused<", `<td class="n">1</td><td class="n">7</td>`} {
		if !strings.Contains(body, want) {
			t.Errorf("the paused job's page lacks %q", want)
		}
	}
}

// The worker list shows the isolation level each worker said its untrusted children get.
func TestQueuesPageShowsWorkersIsolation(t *testing.T) {
	s := newServer(t)
	s.submit(t, "acme", []byte(`{"tasks":[{"taskId":"a","name":"op"}]}`))
	body := `{"worker_id":"contained-1","streams":["op"],"max_wait_ms":0,"isolation":"seccomp"}`
	res, err := http.Post(s.internal.URL+"/internal/worker/claim", "application/json", strings.NewReader(body))
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("claim: %v %v", res, err)
	}
	res.Body.Close()
	c := client(t)
	signIn(t, s, c, s.keys["acme"])
	_, page := get(t, c, s.public.URL+"/ui/queues")
	if !strings.Contains(page, "<code>contained-1</code></td><td>op</td><td>seccomp</td>") {
		t.Errorf("the worker list lacks the worker's isolation:\n%s", page)
	}
}
