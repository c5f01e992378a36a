package ui_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/baton-dev/baton/internal/bundle"
	"github.com/baton-dev/baton/internal/bundle/bundletest"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/report"
	"github.com/baton-dev/baton/worker"
)

// chainDoc is a pipeline of a manual source (follower, whose output is published as blocks), a
// job that reads it (ranges, published as block_ranges), a job downstream of that (totals), and
// one that writes what it makes of ranges' output to a buffered dataset (alerts).
const chainDoc = `
name: chain
jobs:
  - name: follower
    activation: source
    runtime: ecs_platform
    operator: block_follower
    outputs: 1
    source: {kind: manual}
  - name: ranges
    activation: reactive
    runtime: ecs_platform
    operator: range_builder
    outputs: 1
    execution_strategy: PerUpdate
    inputs:
      - from: {job: follower, output: 0}
  - name: totals
    activation: reactive
    runtime: ecs_platform
    operator: totals
    outputs: 0
    inputs:
      - from: {job: ranges, output: 0}
  - name: alerts
    activation: reactive
    runtime: ecs_platform
    operator: alerts
    outputs: 1
    inputs:
      - from: {job: ranges, output: 0}
publish:
  blocks:
    from: {job: follower, output: 0}
  block_ranges:
    from: {job: ranges, output: 0}
  alert_events:
    from: {job: alerts, output: 0}
    write_mode: buffered
    schema:
      columns:
        - {name: dedupe_key, type: string, required: true}
      unique: [dedupe_key]
`

// chainWidth is chainDoc with a config of ranges: deployed over chainDoc, ranges and totals,
// which reads what ranges writes, are rebuilt, and alerts, which writes a buffered dataset, is
// switched at activation.
func chainWidth(width int) string {
	return strings.Replace(chainDoc, "    operator: range_builder\n", fmt.Sprintf("    operator: range_builder\n    config: {width: %d}\n", width), 1)
}

// chainWorkers are the task names of chainDoc's reactive jobs.
var chainWorkers = []string{"range_builder", "totals", "alerts"}

// startBuild deploys chainDoc for acme, records an event of blocks, and deploys ranges' config
// change. The build's backfill routes the event again to the new ranges, whose task, with no
// worker, keeps the build building. It returns the active version and the one being built.
func startBuild(t *testing.T, s *server) (active, building string) {
	t.Helper()
	active = s.deploy(t, "acme", chainDoc).Version
	blocks, err := s.dp.GetDataset(t.Context(), "acme", "blocks", 0)
	if err != nil {
		t.Fatal(err)
	}
	// Any running task may report events: a plain job's stands for the source's.
	s.submit(t, "acme", []byte(`{"name":"emitter","tasks":[{"taskId":"emit","name":"emit","dependsOn":[]}]}`))
	claims, err := s.d.ClaimNext(t.Context(), dispatch.ClaimNextParams{Queues: []string{"emit"}, WorkerID: "emitter"})
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim the emitter: %v %v", claims, err)
	}
	c := claims[0].Task
	one := int64(1)
	ev := report.Event{DatasetUUID: blocks.Dataset.UUID, DatasetVersion: blocks.Dataset.CurrentVersion, PartitionKey: "1-1", Start: &one, End: &one}
	if _, err := s.dp.Intake().Record(t.Context(), dispatch.Fence{TaskID: c.ID, Attempt: c.Attempt, LeaseToken: c.LeaseToken}, []report.Event{ev}); err != nil {
		t.Fatalf("record an event of blocks: %v", err)
	}
	res := s.deploy(t, "acme", chainWidth(2))
	if res.State != dataplane.BuildBuilding || res.Activated {
		t.Fatalf("deploy of the config change: %+v, want a version building", res)
	}
	v := waitPipeline(t, s, "the build's backfill routes the event to the new ranges", func(v *dataplane.PipelineView) bool {
		return v.Build != nil && v.Build.Backfill.Scanned && len(v.Build.Jobs) > 0 && v.Build.Jobs[0].Name == "ranges" &&
			v.Build.Jobs[0].Counts["routed"] == 1
	})
	if v.Build.State != dataplane.BuildBuilding {
		t.Fatalf("build %+v, want it building", v.Build)
	}
	return active, res.Version
}

// waitPipeline polls acme's pipeline chain until ok says so.
func waitPipeline(t *testing.T, s *server, what string, ok func(*dataplane.PipelineView) bool) *dataplane.PipelineView {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		v, err := s.dp.GetPipeline(t.Context(), "acme", "chain")
		if err != nil {
			t.Fatal(err)
		}
		if ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 20s: pipeline %+v build %+v", what, v.Pipeline, v.Build)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func buildReady(v *dataplane.PipelineView) bool {
	return v.Build != nil && v.Build.State == dataplane.BuildReady
}

// versionState is the state the version list shows for version.
func versionState(version, state string) string {
	return fmt.Sprintf(`<tr data-version="%s"><td><code>%s</code></td><td><span class="badge st-%s">%s</span>`, version, version, state, state)
}

// The pipeline page shows a build: building with its rebuilt jobs, switched jobs and datasets,
// then ready; it activates a ready build and abandons one, each from a form with the form token,
// and says why when the data plane refuses.
func TestPipelinePageShowsTheBuild(t *testing.T) {
	s := newServer(t)
	v1, v2 := startBuild(t, s)
	c := client(t)
	token := signIn(t, s, c, s.keys["acme"])
	page := s.public.URL + "/ui/pipelines/chain"
	actionURL := func(version, action string) string {
		return page + "/versions/" + url.PathEscape(version) + "/" + action
	}
	view, err := s.dp.GetPipeline(t.Context(), "acme", "chain")
	if err != nil {
		t.Fatal(err)
	}
	ds := view.Build.Datasets[0]

	res, body := get(t, c, page)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET the page: %d", res.StatusCode)
	}
	for _, want := range []string{`id="pipeline-build" data-state="building"`, "Building version <code>" + v2 + "</code> <small>(on <code>" + v1 + "</code>)",
		`<dd id="build-activate">manual:`, `<dd id="build-backfill">scanned:`,
		`<tr data-job="ranges"><td><b>ranges</b></td><td>config changed</td>`, `<progress max="1" value="0"></progress> <span>0 of 1 completed</span>`,
		`<tr data-job="totals"><td><b>totals</b></td><td>reads block_ranges, which is rebuilt</td>`, `<span class="empty">no tasks yet</span>`,
		`<tr data-job="alerts"><td><b>alerts</b></td><td>reads block_ranges, which is rebuilt; it writes a buffered dataset`,
		`<a href="/ui/datasets/block_ranges">block_ranges</a></td><td><code>` + ds.CurrentVersion + `</code></td><td>→</td><td><code>` + ds.CandidateVersion + `</code>`,
		`action="/ui/pipelines/chain/versions/` + v2 + `/abandon" id="abandon-form"`, "Activate is offered once the build is ready",
		versionState(v1, "active"), versionState(v2, "building")} {
		if !strings.Contains(body, want) {
			t.Errorf("the building page lacks %q", want)
		}
	}
	if strings.Contains(body, `id="activate-form"`) {
		t.Error("the building page offers Activate")
	}
	if m := inline.FindString(body); m != "" {
		t.Errorf("the page has inline %q, which its policy blocks", m)
	}

	// Activate before ready is refused, and says why.
	res = postForm(t, c, actionURL(v2, "activate"), url.Values{"csrf": {token}})
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/ui/pipelines/chain?flash=not-ready" {
		t.Errorf("activate while building = %d to %q, want the not-ready message", res.StatusCode, res.Header.Get("Location"))
	}
	if _, body := get(t, c, page+"?flash=not-ready"); !strings.Contains(body, `<p class="flash error" role="status">The build is not ready yet`) {
		t.Error("the not-ready message is not shown")
	}
	// The forms need the token, from this site; another tenant's key finds no such pipeline.
	for _, action := range []string{"activate", "abandon"} {
		if res := postForm(t, c, actionURL(v2, action), url.Values{}); res.StatusCode != http.StatusForbidden {
			t.Errorf("%s without the form token = %d, want 403", action, res.StatusCode)
		}
		if res := postForm(t, c, actionURL(v2, action), url.Values{"csrf": {token}}, "Sec-Fetch-Site", "cross-site"); res.StatusCode != http.StatusForbidden {
			t.Errorf("%s from another site = %d, want 403", action, res.StatusCode)
		}
	}
	other := client(t)
	otherToken := signIn(t, s, other, s.keys["globex"])
	if res, _ := get(t, other, page); res.StatusCode != http.StatusNotFound {
		t.Errorf("the other tenant's GET = %d, want 404", res.StatusCode)
	}
	for _, action := range []string{"activate", "abandon"} {
		if res := postForm(t, other, actionURL(v2, action), url.Values{"csrf": {otherToken}}); res.StatusCode != http.StatusNotFound {
			t.Errorf("the other tenant's %s = %d, want 404", action, res.StatusCode)
		}
	}
	if v := waitPipeline(t, s, "the build is untouched", func(*dataplane.PipelineView) bool { return true }); v.Pipeline.BuildingVersion != v2 {
		t.Fatalf("after the refused forms: %+v", v.Pipeline)
	}

	// A worker runs the build's task: the build is ready, and Activate is offered.
	s.runWorker(t, nil, chainWorkers...)
	waitPipeline(t, s, "the build gets ready", buildReady)
	_, body = get(t, c, page)
	for _, want := range []string{`id="pipeline-build" data-state="ready"`, "Ready to activate: version <code>" + v2 + "</code>",
		`action="/ui/pipelines/chain/versions/` + v2 + `/activate" id="activate-form"`, `<span>1 of 1 completed</span>`,
		versionState(v2, "ready")} {
		if !strings.Contains(body, want) {
			t.Errorf("the ready page lacks %q", want)
		}
	}
	res = postForm(t, c, actionURL(v2, "activate"), url.Values{"csrf": {token}})
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/ui/pipelines/chain?flash=activated" {
		t.Fatalf("activate = %d to %q", res.StatusCode, res.Header.Get("Location"))
	}
	if v, err := s.dp.GetPipeline(t.Context(), "acme", "chain"); err != nil || v.Pipeline.ActiveVersion != v2 || v.Build != nil {
		t.Fatalf("after activate: %+v %v, want %s active", v, err, v2)
	}
	_, body = get(t, c, page+"?flash=activated")
	if strings.Contains(body, `id="pipeline-build"`) || !strings.Contains(body, versionState(v2, "active")) ||
		!strings.Contains(body, versionState(v1, "deployed")) || !strings.Contains(body, `<p class="flash ok" role="status">Version activated`) {
		t.Error("after activate the page does not show the new version active and the old one deployed")
	}
	if res := postForm(t, c, actionURL(v2, "activate"), url.Values{"csrf": {token}}); res.Header.Get("Location") != "/ui/pipelines/chain?flash=not-building" {
		t.Errorf("activate the active version: to %q, want the not-building message", res.Header.Get("Location"))
	}

	// Another change builds; abandoning it leaves the active version as it is.
	v3 := s.deploy(t, "acme", chainWidth(3)).Version
	res = postForm(t, c, actionURL(v3, "abandon"), url.Values{"csrf": {token}})
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/ui/pipelines/chain?flash=abandoned" {
		t.Fatalf("abandon = %d to %q", res.StatusCode, res.Header.Get("Location"))
	}
	if v, err := s.dp.GetPipeline(t.Context(), "acme", "chain"); err != nil || v.Pipeline.ActiveVersion != v2 || v.Build != nil {
		t.Fatalf("after abandon: %+v %v, want %s still active", v, err, v2)
	}
	_, body = get(t, c, page)
	if strings.Contains(body, `id="pipeline-build"`) || !strings.Contains(body, versionState(v3, "abandoned")) {
		t.Error("after abandon the page does not show the version abandoned")
	}
	if res := postForm(t, c, actionURL(v3, "abandon"), url.Values{"csrf": {token}}); res.Header.Get("Location") != "/ui/pipelines/chain?flash=not-building" {
		t.Errorf("abandon again: to %q, want the not-building message", res.Header.Get("Location"))
	}
}

// A build with a task that failed for good stays building, and the panel says what to do.
func TestPipelinePageShowsABlockedBuild(t *testing.T) {
	s := newServer(t)
	_, v2 := startBuild(t, s)
	no := false
	s.runHandlers(t, "failing-worker", map[string]worker.Handler{
		"range_builder": func(ctx context.Context, task *worker.Task) (any, error) {
			return nil, &worker.Error{Category: worker.DataQuality, Message: "width 2 is not supported", Retryable: &no}
		},
	})
	waitPipeline(t, s, "the build's ranges task fails", func(v *dataplane.PipelineView) bool {
		return v.Build != nil && v.Build.Jobs[0].Counts["failed"] == 1
	})
	c := client(t)
	signIn(t, s, c, s.keys["acme"])
	_, body := get(t, c, s.public.URL+"/ui/pipelines/chain")
	for _, want := range []string{`id="pipeline-build" data-state="building"`, `<p class="flash error" id="build-blocked">1 task of the build failed for good`,
		`<td class="n bad">1</td>`, `action="/ui/pipelines/chain/versions/` + v2 + `/abandon"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the blocked build's page lacks %q", want)
		}
	}
	if strings.Contains(body, `id="activate-form"`) {
		t.Error("the blocked build's page offers Activate")
	}
}

// In the browser the build panel follows the build without a reload, from building to ready,
// and its Activate button cuts over. Screenshots of the panel, building and ready, are written
// to the test's temporary directory, or to BATON_UI_SCREENSHOTS when it names one.
func TestBrowserPipelineBuild(t *testing.T) {
	s := newServer(t)
	ctx := browser(t)
	v1, v2 := startBuild(t, s)
	dir := os.Getenv("BATON_UI_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	shot := func(name string) {
		t.Helper()
		png := value(t, ctx, "screenshot "+name, chromedp.FullScreenshot(100))
		out := filepath.Join(dir, name)
		if err := os.WriteFile(out, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", out)
	}
	signInBrowser(t, ctx, s, s.keys["acme"])
	run(t, ctx, "open the pipeline", chromedp.EmulateViewport(1280, 800), chromedp.Navigate(s.public.URL+"/ui/pipelines/chain"),
		chromedp.WaitVisible(chromedp.CSS(`#pipeline-build`)))

	title := text(t, ctx, "read the title", `#build-title`)
	if want := "Building version " + v2 + " (on " + v1 + ")"; title != want {
		t.Errorf("the panel's title is %q, want %q", title, want)
	}
	if n := count(t, ctx, "#build-jobs tbody tr"); n != 2 {
		t.Errorf("%d rebuilt jobs shown, want 2 (ranges, totals)", n)
	}
	if n := count(t, ctx, `#build-switched tr[data-job="alerts"]`); n != 1 {
		t.Error("alerts is not shown switched at activation")
	}
	if n := count(t, ctx, "#build-datasets tbody tr"); n != 1 {
		t.Errorf("%d rebuilt datasets shown, want 1 (block_ranges)", n)
	}
	if n := count(t, ctx, "#activate"); n != 0 {
		t.Error("Activate is offered while the build is building")
	}
	if n := count(t, ctx, "#abandon"); n != 1 {
		t.Error("Abandon is not offered")
	}
	shot("pipeline-build-building.png")

	// The build's task runs: the panel turns ready in place.
	eval[bool](t, ctx, `window.notReloaded = true`)
	s.runWorker(t, nil, chainWorkers...)
	waitFor(t, ctx, "the panel turns ready", `(document.getElementById('pipeline-build')||{dataset:{}}).dataset.state === 'ready'`)
	waitFor(t, ctx, "Activate is offered", `document.getElementById('activate') !== null`)
	waitFor(t, ctx, "the page was not reloaded", `window.notReloaded === true`)
	if got := text(t, ctx, "read the title", `#build-title`); !strings.HasPrefix(got, "Ready to activate: version "+v2) {
		t.Errorf("the ready panel's title is %q", got)
	}
	shot("pipeline-build-ready.png")

	run(t, ctx, "activate",
		chromedp.Click(chromedp.CSS(`#activate`)),
		chromedp.WaitVisible(chromedp.CSS(`.flash.ok`)),
	)
	waitFor(t, ctx, "the panel is gone", `document.getElementById('pipeline-build') === null`)
	state := eval[string](t, ctx, fmt.Sprintf(`document.querySelector('#pipeline-versions tr[data-version=%q] .badge').textContent`, v2))
	if state != "active" {
		t.Errorf("after activate the version list shows %s %s, want active", v2, state)
	}
}

// The pipeline page names the bundle each job runs, with its pinned hash.
func TestPipelinePageShowsEachJobsBundle(t *testing.T) {
	s := newServer(t)
	zip := bundletest.Zip(t, map[string]string{"main.py": "print('{}')\n"}, bundle.Python, "main.py")
	req, _ := http.NewRequest(http.MethodPost, s.public.URL+"/v1/udf/bundles", bytes.NewReader(zip))
	req.Header.Set("x-api-key", s.keys["acme"])
	req.Header.Set("Content-Type", "application/zip")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var b struct{ BundleID, SHA256 string }
	err = json.NewDecoder(res.Body).Decode(&struct {
		ID  *string `json:"bundle_id"`
		Sum *string `json:"sha256"`
	}{&b.BundleID, &b.SHA256})
	res.Body.Close()
	if err != nil || res.StatusCode != http.StatusCreated {
		t.Fatalf("upload: %d %v", res.StatusCode, err)
	}
	s.deploy(t, "acme", `
name: coded
jobs:
  - {name: run, activation: source, runtime: ecs_udf, operator: udf, outputs: 0, source: {kind: manual}, udf: {bundle_id: `+b.BundleID+`}}
  - {name: monitor, activation: source, runtime: ecs_platform, operator: monitor, outputs: 0, source: {kind: manual}, secrets: [rpc_key]}
`)
	c := client(t)
	signIn(t, s, c, s.keys["acme"])
	_, body := get(t, c, s.public.URL+"/ui/pipelines/coded")
	for _, want := range []string{`<code title="sha256 ` + b.SHA256 + `">` + b.BundleID + `</code>`, "python main.py · sha256 " + b.SHA256[:12],
		"secrets: rpc_key"} {
		if !strings.Contains(body, want) {
			t.Errorf("the pipeline page lacks %q", want)
		}
	}
}
