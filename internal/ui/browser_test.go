package ui_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/baton-dev/baton/internal/browsertest"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
)

// browser is a headless Chromium tab for one test. When the test fails it saves a screenshot of
// the page under a temporary directory of the test's, which it keeps and names in the log.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browsertest.ChromePath(t)),
		chromedp.NoSandbox, // CI runs as root, where Chromium's sandbox cannot start
		chromedp.DisableGPU,
		chromedp.WindowSize(1400, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	if err := chromedp.Do(ctx); err != nil {
		cancelTab()
		cancelAlloc()
		t.Fatalf("start Chromium: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			saveScreenshot(t, ctx)
		}
		cancelTab()
		cancelAlloc()
	})
	return ctx
}

func saveScreenshot(t *testing.T, ctx context.Context) {
	dir, err := os.MkdirTemp("", "baton-ui-"+strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())+"-")
	if err != nil {
		t.Logf("screenshot: %v", err)
		return
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	png, err := chromedp.Run(sctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Logf("screenshot: %v", err)
		return
	}
	path := filepath.Join(dir, "failure.png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Logf("screenshot: %v", err)
		return
	}
	t.Logf("screenshot of the page at the failure: %s", path)
}

// run runs browser actions with a deadline, failing the test with what was being done.
func run(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(tctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// value runs one browser action that answers a value.
func value[T any](t *testing.T, ctx context.Context, what string, action chromedp.Action[T]) T {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(tctx, action)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// eval evaluates JavaScript in the page.
func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	return value(t, ctx, js, chromedp.Evaluate[T](js))
}

// signInBrowser signs the browser in through the form.
func signInBrowser(t *testing.T, ctx context.Context, s *server, key string) {
	t.Helper()
	run(t, ctx, "sign in",
		chromedp.Navigate(s.public.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#key`)),
		chromedp.SendKeys(chromedp.CSS(`#key`), key),
		chromedp.Submit(chromedp.CSS(`#key`)),
		chromedp.WaitVisible(chromedp.CSS(`#jobs`)),
	)
}

func count(t *testing.T, ctx context.Context, selector string) int {
	t.Helper()
	return eval[int](t, ctx, fmt.Sprintf(`document.querySelectorAll(%q).length`, selector))
}

// text reads the text of the first element the selector matches, waiting for one to exist. It
// reads in one evaluation, so a live page that replaces the element in between cannot make
// the read fail.
func text(t *testing.T, ctx context.Context, what, selector string) string {
	t.Helper()
	js := fmt.Sprintf(`(() => { const e = document.querySelector(%q); return e ? e.innerText : null })()`, selector)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if s := eval[*string](t, ctx, js); s != nil {
			return strings.TrimSpace(*s)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: nothing matches %s after 20s", what, selector)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitFor polls a JavaScript condition in the page.
func waitFor(t *testing.T, ctx context.Context, what, js string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if eval[bool](t, ctx, js) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still false after 20s: %s", what, js)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func nodeIs(id, status string) string {
	return fmt.Sprintf(`(document.querySelector('#dag .node[data-id=%q]')||{classList:{contains:()=>false}}).classList.contains(%q)`, id, "st-"+status)
}

func TestBrowserJobGoesLive(t *testing.T) {
	s := newServer(t)
	ctx := browser(t)
	job := s.submit(t, "acme", exampleJob(t))
	signInBrowser(t, ctx, s, s.keys["acme"])

	// The job appears on the jobs page, and opens its page.
	run(t, ctx, "open the job from the list",
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#jobs tr[data-id=%q] a`, job))),
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`#jobs tr[data-id=%q] a`, job))),
		chromedp.WaitVisible(chromedp.CSS(`#dag`)),
	)
	if n := count(t, ctx, "#dag .node"); n != 5 {
		t.Errorf("the DAG shows %d nodes, want 5", n)
	}
	if n := count(t, ctx, "#dag .edge"); n != 4 {
		t.Errorf("the DAG shows %d edges, want one per dependency: 4", n)
	}
	_, tasks, err := s.d.GetJob(t.Context(), "acme", job)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for _, tk := range tasks {
		ids[tk.Key] = tk.ID
	}
	for _, root := range []string{"scrape-store", "analyze-competitors"} {
		waitFor(t, ctx, root+" is drawn pending", nodeIs(ids[root], "pending"))
	}
	waitFor(t, ctx, "compile-result is drawn waiting", nodeIs(ids["compile-result"], "waiting"))

	// A worker takes the tasks: the nodes change state without a reload of the page.
	eval[bool](t, ctx, `window.notReloaded = true`)
	gate := make(chan struct{})
	s.runWorker(t, gate, "scrape-store", "analyze-competitors", "color-tags", "font-pairing", "compile-result")
	waitFor(t, ctx, "scrape-store turns running", nodeIs(ids["scrape-store"], "running"))
	close(gate)
	for key, id := range ids {
		waitFor(t, ctx, key+" turns completed", nodeIs(id, "completed"))
	}
	waitFor(t, ctx, "the job shows completed", `document.getElementById('job-status').textContent === 'completed'`)
	waitFor(t, ctx, "the progress is full", `document.getElementById('job-progress').value === 5`)
	waitFor(t, ctx, "the page was never reloaded", `window.notReloaded === true`)

	// A task's page: its attempt and output.
	run(t, ctx, "open a task from the graph",
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`#dag .node[data-id=%q]`, ids["compile-result"]))),
		chromedp.WaitVisible(chromedp.CSS(`#attempts`)),
	)
	output := text(t, ctx, "read the output", `#task-output`)
	if !strings.Contains(output, `"task": "compile-result"`) {
		t.Errorf("the task page shows output %q", output)
	}
}

func TestBrowserCancelFromTheJobPage(t *testing.T) {
	s := newServer(t)
	ctx := browser(t)
	job := s.submit(t, "acme", exampleJob(t)) // no worker: its tasks stay pending and waiting
	signInBrowser(t, ctx, s, s.keys["acme"])
	run(t, ctx, "cancel",
		chromedp.Navigate(s.public.URL+"/ui/jobs/"+job),
		chromedp.WaitVisible(chromedp.CSS(`#cancel`)),
		chromedp.Click(chromedp.CSS(`#cancel`)),
		chromedp.WaitVisible(chromedp.CSS(`.flash.ok`)),
	)
	waitJob(t, s, job, lifecycle.JobCanceled)
	waitFor(t, ctx, "the page shows the job canceled", `document.getElementById('job-status').textContent === 'canceled'`)
	waitFor(t, ctx, "cancel is gone, resume is offered", `document.getElementById('cancel-form').hidden && !document.getElementById('resume-form').hidden`)
}

func TestBrowserWrongKeyIsRefused(t *testing.T) {
	s := newServer(t)
	ctx := browser(t)
	run(t, ctx, "sign in with a wrong key",
		chromedp.Navigate(s.public.URL+"/ui/jobs"),
		chromedp.WaitVisible(chromedp.CSS(`#key`)),
		chromedp.SendKeys(chromedp.CSS(`#key`), "bk_this-key-does-not-exist"),
		chromedp.Submit(chromedp.CSS(`#key`)),
		chromedp.WaitVisible(chromedp.CSS(`#login-error`)),
	)
	msg := text(t, ctx, "read the error", `#login-error`)
	url := value(t, ctx, "read the location", chromedp.Location())
	if !strings.Contains(msg, "not valid") {
		t.Errorf("the sign-in page says %q, want that the key is not valid", msg)
	}
	if !strings.Contains(url, "/ui/login") {
		t.Errorf("after a wrong key the browser is at %s, want the sign-in page", url)
	}
	if n := count(t, ctx, "#jobs"); n != 0 {
		t.Error("a wrong key reached the jobs page")
	}
}

func TestBrowserOtherTenantsJobIsNotReachable(t *testing.T) {
	s := newServer(t)
	ctx := browser(t)
	theirs := s.submit(t, "globex", exampleJob(t))
	signInBrowser(t, ctx, s, s.keys["acme"])
	run(t, ctx, "open the other tenant's job by URL",
		chromedp.Navigate(s.public.URL+"/ui/jobs/"+theirs),
		chromedp.WaitVisible(chromedp.CSS(`.error-message`)),
	)
	pageText := text(t, ctx, "read the page", `main`)
	if !strings.Contains(pageText, "Job not found") || strings.Contains(pageText, "scrape-store") {
		t.Errorf("the other tenant's job page shows %q", pageText)
	}
	if n := count(t, ctx, "#dag"); n != 0 {
		t.Error("the other tenant's DAG is drawn")
	}
}

// The jobs page with 10,000 jobs and the page of a 1,000-task job, timed by the browser from the
// start of the navigation to the load event (the graph drawn). The figures are logged, not
// asserted: this machine is shared.
func TestBrowserLargeLoads(t *testing.T) {
	s := newServer(t)
	ctx := browser(t)
	seedJobs(t, s, "acme", 10_000)
	big := s.submit(t, "acme", wideDAG(1000, 100))
	signInBrowser(t, ctx, s, s.keys["acme"])

	loadTime := func(path, ready string) time.Duration {
		t.Helper()
		run(t, ctx, "open "+path, chromedp.Navigate(s.public.URL+path), chromedp.WaitVisible(chromedp.CSS(ready)))
		ms := eval[float64](t, ctx, `(() => { const n = performance.getEntriesByType('navigation')[0]; return n.loadEventEnd - n.startTime; })()`)
		return time.Duration(ms * float64(time.Millisecond))
	}
	for _, p := range []struct{ name, path, ready string }{
		{"jobs page, 10,000 jobs", "/ui/jobs", "#jobs"},
		{"jobs page, 10,000 jobs, completed only", "/ui/jobs?status=completed", "#jobs"},
		{"job page, 1,000 tasks", "/ui/jobs/" + big, "#dag"},
	} {
		d := loadTime(p.path, p.ready)
		t.Logf("%s: loaded in %s", p.name, d.Round(time.Millisecond))
	}
	if n := count(t, ctx, "#dag .node"); n != 1000 {
		t.Errorf("the 1,000-task DAG shows %d nodes", n)
	}
	// The graph is usable: zooming and panning move its view box.
	before := eval[string](t, ctx, `document.getElementById('dag').getAttribute('viewBox')`)
	run(t, ctx, "zoom in", chromedp.Click(chromedp.CSS(`[data-zoom="in"]`)))
	if after := eval[string](t, ctx, `document.getElementById('dag').getAttribute('viewBox')`); after == before {
		t.Errorf("zooming in left the view box at %s", before)
	}
}

// seedJobs stores n finished one-task jobs for tenant straight into the store, in one
// transaction: the fixture of a large history.
func seedJobs(t *testing.T, s *server, tenant string, n int) {
	t.Helper()
	now := time.Now().Add(-time.Hour)
	err := s.st.InTx(t.Context(), func(tx store.Tx) error {
		for i := range n {
			at := now.Add(time.Duration(i) * time.Millisecond)
			status := lifecycle.JobCompleted
			if i%10 == 0 {
				status = lifecycle.JobPartialFailure
			}
			j := &store.Job{ID: fmt.Sprintf("job-seeded-%05d", i), Tenant: tenant, Name: "nightly", Status: status,
				TotalTasks: 1, CreatedAt: at, FinishedAt: at.Add(time.Second)}
			if err := tx.JobInsert(t.Context(), j); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// wideDAG is a job of n tasks in layers of width: each task depends on two of the layer before.
func wideDAG(n, width int) []byte {
	var b strings.Builder
	b.WriteString(`{"name":"wide","tasks":[`)
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		deps := ""
		if i >= width {
			layer := i/width - 1
			deps = fmt.Sprintf(`"t%d","t%d"`, layer*width+i%width, layer*width+(i+1)%width)
		}
		fmt.Fprintf(&b, `{"taskId":"t%d","name":"step","dependsOn":[%s],"input":{"i":%d}}`, i, deps, i)
	}
	b.WriteString("]}")
	return []byte(b.String())
}
