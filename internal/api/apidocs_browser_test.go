package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/baton-dev/baton/internal/browsertest"
)

// docsCSPRecorder is run in the page before its own scripts: it keeps every violation of the
// Content-Security-Policy, so that the test sees what the policy blocked.
const docsCSPRecorder = `window.__cspViolations = [];
document.addEventListener('securitypolicyviolation', e => window.__cspViolations.push(e.violatedDirective + ' ' + e.blockedURI));`

// TestDocsAPIInBrowser loads the rendered reference in a headless Chromium, directly and behind a
// proxy that serves the listener under a path prefix: Redoc renders the document's operations,
// no request leaves the test server, and the page's policy blocks nothing Redoc needs.
func TestDocsAPIInBrowser(t *testing.T) {
	chrome := browsertest.ChromePath(t)
	s := openAPIServer()
	doc, _ := fetchOpenAPI(t, s)
	summary, _ := doc["paths"].(map[string]any)["/jobs"].(map[string]any)["post"].(map[string]any)["summary"].(string)
	if summary == "" {
		t.Fatal("the document has no summary for POST /jobs")
	}
	proxy := http.NewServeMux()
	proxy.Handle("/baton/", http.StripPrefix("/baton", s.ProducerHandler()))
	proxy.Handle("/", s.ProducerHandler())
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	origin, _ := url.Parse(srv.URL)

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome),
		chromedp.NoSandbox, // CI runs as root, where Chromium's sandbox cannot start
		chromedp.DisableGPU,
		chromedp.WindowSize(1400, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(cancelTab)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}

	// Every request of the tab, and the answers that were not a success.
	var mu sync.Mutex
	var requests, failures []string
	err := chromedp.Listen(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			requests = append(requests, e.Request.URL)
		case *network.EventResponseReceived:
			if e.Response.Status >= 400 {
				failures = append(failures, fmt.Sprintf("%d %s", e.Response.Status, e.Response.URL))
			}
		case *network.EventLoadingFailed:
			failures = append(failures, fmt.Sprintf("%s %s %s", e.ErrorText, e.BlockedReason, e.RequestID))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: docsCSPRecorder}); err != nil {
		t.Fatal(err)
	}

	for _, prefix := range []string{"", "/baton"} {
		target := srv.URL + prefix + "/docs/api"
		tctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		// Redoc draws each operation's summary as a heading of the middle panel.
		rendered := fmt.Sprintf(`[...document.querySelectorAll('h2')].some(h => h.textContent.includes(%q))`, summary)
		err := chromedp.Do(tctx,
			chromedp.Navigate(target),
			chromedp.Poll[chromedp.Void](rendered, chromedp.WithPollingTimeout(110*time.Second)),
		)
		cancel()
		if err != nil {
			docsScreenshot(t, ctx, "failure")
			t.Fatalf("%s: Redoc did not render %q: %v", target, summary, err)
		}
		if prefix == "" {
			t.Logf("screenshot of %s: %s", target, docsScreenshot(t, ctx, "docs-api"))
			// And of the first operation, scrolled into view.
			scroll := fmt.Sprintf(`[...document.querySelectorAll('h2')].find(h => h.textContent.includes(%q)).scrollIntoView()`, summary)
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := chromedp.Run(sctx, chromedp.Evaluate[chromedp.Void](scroll))
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond) // the menu follows the scroll on its next frame
			t.Logf("screenshot of %s: %s", summary, docsScreenshot(t, ctx, "docs-api-operation"))
		}
		vctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		violations, err := chromedp.Run(vctx, chromedp.Evaluate[[]string](`window.__cspViolations`))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if len(violations) > 0 {
			t.Errorf("%s: the Content-Security-Policy blocked %q", target, violations)
		}
	}

	mu.Lock()
	defer mu.Unlock()
	var sawScript, sawDocument bool
	var network []string
	for _, u := range requests {
		p, err := url.Parse(u)
		switch {
		case err != nil:
			t.Errorf("request to %q", u)
		case p.Scheme == "data" || p.Scheme == "blob":
			// In the page itself, not on the network.
		case p.Host != origin.Host:
			t.Errorf("the page asked another host: %s", u)
		default:
			network = append(network, u)
			sawScript = sawScript || strings.HasSuffix(p.Path, "/docs/api/redoc.standalone.js")
			sawDocument = sawDocument || p.Path == "/baton/openapi.json"
		}
	}
	if !sawScript || !sawDocument {
		t.Errorf("the page did not load its script and the document under the prefix: %q", requests)
	}
	if len(failures) > 0 {
		t.Errorf("failed requests: %q", failures)
	}
	t.Logf("%d requests; on the network, all to the test server: %q", len(requests), network)
}

// docsScreenshot saves a screenshot of the window under a new temporary directory, which it keeps,
// and returns its path.
func docsScreenshot(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "baton-docs-api-")
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	png, err := chromedp.Run(sctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Logf("screenshot: %v", err)
		return ""
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
