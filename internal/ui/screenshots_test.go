package ui_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/baton-dev/baton/worker"
)

// TestScreenshots retakes the README's screenshots of the dashboard when BATON_UI_SCREENSHOTS
// names the directory to write them to (scripts/screenshots.sh): the jobs page, a job page
// mid-run and the queues page, over a server with a little history and workers at work.
func TestScreenshots(t *testing.T) {
	dir := os.Getenv("BATON_UI_SCREENSHOTS")
	if dir == "" {
		t.Skip("set BATON_UI_SCREENSHOTS=DIR to retake the dashboard's screenshots into DIR (scripts/screenshots.sh)")
	}
	s := newServer(t)
	ctx := browser(t)

	// History: finished jobs, one of them with a dead letter.
	fast := map[string]worker.Handler{}
	ok := func(ctx context.Context, task *worker.Task) (any, error) {
		return map[string]any{"rows": 1200 + len(task.Key)}, nil
	}
	for _, name := range []string{"scrape-store", "analyze-competitors", "color-tags", "font-pairing", "compile-result"} {
		fast[name] = ok
	}
	fast["validate"] = func(ctx context.Context, task *worker.Task) (any, error) {
		return nil, &worker.Error{Category: worker.DataQuality, Message: "row 4812: price is negative"}
	}
	s.runHandlers(t, "worker-a1", fast)
	for range 6 {
		waitJob(t, s, s.submit(t, "acme", exampleJob(t)), "completed")
	}
	waitJob(t, s, s.submit(t, "acme", []byte(`{"name":"import-prices","tasks":[
		{"taskId":"fetch","name":"scrape-store","dependsOn":[]},
		{"taskId":"validate","name":"validate","dependsOn":["fetch"]},
		{"taskId":"publish","name":"compile-result","dependsOn":["validate"]}]}`)), "partial_failure")

	// A job mid-run: extraction done, transforms running or retrying, loads waiting.
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	var flaky atomic.Int32
	slow := map[string]worker.Handler{
		"extract": ok,
		"transform": func(ctx context.Context, task *worker.Task) (any, error) {
			if task.Key == "transform-eu" {
				return ok(ctx, task)
			}
			if task.Key == "transform-apac" && flaky.Add(1) == 1 {
				return nil, &worker.Error{Category: worker.Infrastructure, Message: "warehouse connection reset"}
			}
			select {
			case <-hold:
			case <-ctx.Done():
			}
			return nil, errors.New("stopped")
		},
	}
	s.runHandlers(t, "worker-b7", slow)
	job := s.submit(t, "acme", etlJob())
	time.Sleep(2 * time.Second) // let the first wave run

	shot := func(name, path, ready string) {
		t.Helper()
		run(t, ctx, "open "+path, chromedp.EmulateViewport(1280, 800), chromedp.Navigate(s.public.URL+path),
			chromedp.WaitVisible(chromedp.CSS(ready)), chromedp.Sleep(500*time.Millisecond))
		png := value(t, ctx, "screenshot "+name, chromedp.FullScreenshot(100))
		out := filepath.Join(dir, name)
		if err := os.WriteFile(out, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", out)
	}
	signInBrowser(t, ctx, s, s.keys["acme"])
	shot("dashboard-jobs.png", "/ui/jobs", "#jobs")
	shot("dashboard-job.png", "/ui/jobs/"+job, "#dag")
	shot("dashboard-queues.png", "/ui/queues", "#queues")
}

// etlJob fans an extraction out to a transform per region, then loads and reports.
func etlJob() []byte {
	regions := []string{"eu", "us", "apac", "latam"}
	tasks := `{"taskId":"extract-orders","name":"extract","dependsOn":[]},{"taskId":"extract-customers","name":"extract","dependsOn":[]}`
	for _, r := range regions {
		tasks += fmt.Sprintf(`,{"taskId":"transform-%s","name":"transform","dependsOn":["extract-orders","extract-customers"]}`, r)
		tasks += fmt.Sprintf(`,{"taskId":"load-%s","name":"load","dependsOn":["transform-%s"]}`, r, r)
	}
	tasks += `,{"taskId":"report","name":"report","dependsOn":["load-eu","load-us","load-apac","load-latam"]}`
	return []byte(`{"name":"nightly-etl","tasks":[` + tasks + `]}`)
}
