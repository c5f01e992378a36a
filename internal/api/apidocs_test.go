package api_test

import (
	"bytes"
	"log/slog"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/baton-dev/baton/internal/api"
	"github.com/baton-dev/baton/internal/api/apidocs"
)

// docsScriptSrc finds the src of the page's script element and its spec-url.
var (
	docsScriptSrc = regexp.MustCompile(`<script src="([^"]+)"`)
	docsSpecURL   = regexp.MustCompile(`<redoc spec-url="([^"]+)"`)
)

// docsGet serves one request on the public listener of a server with CORS for every origin.
func docsGet(t *testing.T, method, target string, headers ...string) *httptest.ResponseRecorder {
	t.Helper()
	s := api.New(api.Config{Logger: slog.New(slog.DiscardHandler), CORSOrigins: []string{"*"}})
	req := httptest.NewRequest(method, target, nil)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	rec := httptest.NewRecorder()
	s.ProducerHandler().ServeHTTP(rec, req)
	return rec
}

func wantMediaType(t *testing.T, rec *httptest.ResponseRecorder, what, want string) {
	t.Helper()
	mt, _, err := mime.ParseMediaType(rec.Header().Get("Content-Type"))
	if err != nil || mt != want {
		t.Errorf("%s: Content-Type %q, want %s", what, rec.Header().Get("Content-Type"), want)
	}
}

func TestDocsAPIPage(t *testing.T) {
	rec := docsGet(t, "GET", "/docs/api", "Origin", "https://app.example.com")
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /docs/api = %d: %s", rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "text/html; charset=utf-8" {
		t.Errorf("Content-Type %q, want text/html; charset=utf-8", ct)
	}
	h := rec.Header()
	if csp := h.Get("Content-Security-Policy"); csp != apidocs.ContentSecurityPolicy {
		t.Errorf("Content-Security-Policy %q, want %q", csp, apidocs.ContentSecurityPolicy)
	}
	for _, directive := range []string{"default-src 'none'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(apidocs.ContentSecurityPolicy, directive) {
			t.Errorf("the policy lacks %s", directive)
		}
	}
	if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Cache-Control") != "no-cache" {
		t.Errorf("headers %v", h)
	}
	// The public listener's wrappers still apply: CORS marks the answer as readable.
	if h.Get("Access-Control-Allow-Origin") != "*" {
		t.Errorf("Access-Control-Allow-Origin %q: the CORS wrapper did not run", h.Get("Access-Control-Allow-Origin"))
	}

	body := rec.Body.String()
	// Nothing from another host: no absolute or protocol-relative URL at all.
	for _, absolute := range []string{"http:", "https:", `"//`, "fonts."} {
		if strings.Contains(body, absolute) {
			t.Errorf("the page holds %q:\n%s", absolute, body)
		}
	}
	src := docsScriptSrc.FindStringSubmatch(body)
	spec := docsSpecURL.FindStringSubmatch(body)
	if src == nil || spec == nil {
		t.Fatalf("the page has no script or no <redoc spec-url>:\n%s", body)
	}
	// The URLs are relative: behind a proxy's prefix they stay under it.
	for _, base := range []string{"http://baton.test/docs/api", "https://example.com/some/prefix/docs/api"} {
		b, _ := url.Parse(base)
		prefix := strings.TrimSuffix(b.Path, "/docs/api")
		s, _ := url.Parse(src[1])
		o, _ := url.Parse(spec[1])
		if got := b.ResolveReference(s).Path; got != prefix+"/docs/api/redoc.standalone.js" {
			t.Errorf("from %s the script is at %s", base, got)
		}
		if got := b.ResolveReference(o).Path; got != prefix+"/openapi.json" {
			t.Errorf("from %s the document is at %s", base, got)
		}
	}

	// The script the page names is the embedded bundle, with its version in the URL.
	s, _ := url.Parse(src[1])
	if v := s.Query().Get("v"); v == "" || `"`+v+`"` != apidocs.ScriptETag {
		t.Errorf("the page loads %s, want the version %s", src[1], apidocs.ScriptETag)
	}
	js := docsGet(t, "GET", "/docs/"+src[1])
	if js.Code != http.StatusOK {
		t.Fatalf("GET %s = %d", src[1], js.Code)
	}
	wantMediaType(t, js, "the script", "application/javascript")
	if !bytes.Equal(js.Body.Bytes(), apidocs.Script) {
		t.Error("the script served is not the embedded one")
	}
	if !bytes.Contains(apidocs.Script, []byte(`" ReDoc Version: ","`+apidocs.RedocVersion+`"`)) {
		t.Errorf("the embedded bundle is not Redoc %s", apidocs.RedocVersion)
	}
	if bytes.Contains(apidocs.Script, []byte("cdn.redoc.ly")) {
		t.Error("the embedded bundle still loads its logo from cdn.redoc.ly: run scripts/update-redoc.sh")
	}
	jh := js.Header()
	if jh.Get("ETag") != apidocs.ScriptETag || !strings.Contains(jh.Get("Cache-Control"), "max-age=31536000") ||
		jh.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("script headers %v", jh)
	}
	if n, _ := strconv.Atoi(jh.Get("Content-Length")); n != len(apidocs.Script) {
		t.Errorf("Content-Length %q, want %d", jh.Get("Content-Length"), len(apidocs.Script))
	}
	if got := docsGet(t, "GET", "/docs/api/redoc.standalone.js", "If-None-Match", apidocs.ScriptETag); got.Code != http.StatusNotModified || got.Body.Len() != 0 {
		t.Errorf("GET with If-None-Match = %d, %d bytes; want 304, none", got.Code, got.Body.Len())
	}
}

func TestDocsAPIMethodsAndPaths(t *testing.T) {
	// HEAD answers as GET does, without the body.
	for path, media := range map[string]string{"/docs/api": "text/html", "/docs/api/redoc.standalone.js": "application/javascript"} {
		rec := docsGet(t, "HEAD", path)
		if rec.Code != http.StatusOK || rec.Body.Len() != 0 {
			t.Errorf("HEAD %s = %d with %d bytes, want 200 without a body", path, rec.Code, rec.Body.Len())
		}
		wantMediaType(t, rec, "HEAD "+path, media)
		if rec.Header().Get("Content-Length") == "" {
			t.Errorf("HEAD %s has no Content-Length", path)
		}
		// Another method is a 405 that says which ones are served, as on every route.
		for _, method := range []string{"POST", "PUT", "DELETE"} {
			rec := docsGet(t, method, path)
			want := "method " + method + " is not allowed on " + path + "; allowed: GET, HEAD"
			if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != "GET, HEAD" || !strings.Contains(rec.Body.String(), want) {
				t.Errorf("%s %s = %d, Allow %q: %s", method, path, rec.Code, rec.Header().Get("Allow"), rec.Body)
			}
		}
	}
	// Nothing else under /docs/api/ is served.
	for _, path := range []string{"/docs/api/", "/docs/api/redoc.js", "/docs/api/x/", "/docs", "/docs/"} {
		if rec := docsGet(t, "GET", path); rec.Code != http.StatusNotFound {
			t.Errorf("GET %s = %d, want 404", path, rec.Code)
		}
	}
	// The guard refuses what it refuses on every route.
	if rec := docsGet(t, "GET", "/docs/api?q=%00"); rec.Code != http.StatusBadRequest {
		t.Errorf("GET /docs/api?q=%%00 = %d, want 400", rec.Code)
	}
}
