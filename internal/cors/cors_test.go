package cors_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/baton-dev/baton/internal/cors"
)

func TestParseOrigins(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"*", []string{"*"}},
		{" * ", []string{"*"}},
		{"none", nil},
		{"https://ui.example.com", []string{"https://ui.example.com"}},
		{"https://UI.example.com, http://localhost:5173,https://ui.example.com", []string{"https://ui.example.com", "http://localhost:5173"}},
		{"http://[::1]:8080", []string{"http://[::1]:8080"}},
	} {
		got, err := cors.ParseOrigins(c.in)
		if err != nil || !slices.Equal(got, c.want) || (c.want == nil) != (got == nil) {
			t.Errorf("ParseOrigins(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	for _, c := range []struct{ in, wantErr string }{
		{"", "empty"},
		{"  ", "empty"},
		{"https://ui.example.com/", "path"},
		{"https://ui.example.com/app", "path"},
		{"https://ui.example.com?x=1", "query"},
		{"ui.example.com", "scheme"},
		{"https://", "host"},
		{"https://ui.example.com,", "empty entry"},
		{"*,https://ui.example.com", "stands alone"},
		{"none,https://ui.example.com", "stands alone"},
		{"https://*.example.com", "wildcards"},
		{"https://user@ui.example.com", "user"},
		{"null", "scheme"},
	} {
		got, err := cors.ParseOrigins(c.in)
		if err == nil || !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("ParseOrigins(%q) = %q, %v; want an error about %q", c.in, got, err, c.wantErr)
		}
	}
}

// The policy's answers, as the public listener's tests (internal/api) check them end to end.
func TestPolicyHandler(t *testing.T) {
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	serve := func(p cors.Policy, method string, header ...string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, "/jobs", nil)
		for i := 0; i+1 < len(header); i += 2 {
			r.Header.Set(header[i], header[i+1])
		}
		rec := httptest.NewRecorder()
		p.Handler(next).ServeHTTP(rec, r)
		return rec
	}
	preflight := []string{"Origin", "https://ui.example.com", "Access-Control-Request-Method", "POST"}

	every := cors.NewPolicy([]string{"https://a.example.com", "*"})
	if rec := serve(every, "GET", "Origin", "https://x.example.com"); rec.Code != http.StatusTeapot ||
		rec.Header().Get("Access-Control-Allow-Origin") != "*" || rec.Header().Get("Access-Control-Expose-Headers") != "Retry-After, Idempotent-Replayed" ||
		rec.Header().Get("Vary") != "" {
		t.Errorf("every origin: %d %v", rec.Code, rec.Header())
	}
	if rec := serve(every, "OPTIONS", preflight...); rec.Code != http.StatusNoContent || rec.Body.Len() != 0 ||
		rec.Header().Get("Access-Control-Allow-Methods") != "GET, POST, OPTIONS" || rec.Header().Get("Access-Control-Max-Age") != "600" ||
		!strings.Contains(rec.Header().Get("Access-Control-Allow-Headers"), "X-Trace-Task-Capability") {
		t.Errorf("preflight: %d %v", rec.Code, rec.Header())
	}

	list := cors.NewPolicy([]string{"https://UI.example.com"})
	if rec := serve(list, "GET", "Origin", "https://ui.example.com"); rec.Header().Get("Access-Control-Allow-Origin") != "https://ui.example.com" ||
		!slices.Equal(rec.Header().Values("Vary"), []string{"Origin"}) {
		t.Errorf("a listed origin: %v", rec.Header())
	}
	rec := serve(list, "OPTIONS", "Origin", "https://evil.example.com", "Access-Control-Request-Method", "POST")
	if rec.Code != http.StatusForbidden || rec.Header().Get("Access-Control-Allow-Origin") != "" ||
		rec.Body.String() != `{"error":"origin https://evil.example.com may not call this API from a browser (CORS)"}`+"\n" {
		t.Errorf("an unlisted origin's preflight: %d %v %s", rec.Code, rec.Header(), rec.Body)
	}
	// An OPTIONS that is not a preflight goes on.
	if rec := serve(list, "OPTIONS", "Origin", "https://ui.example.com"); rec.Code != http.StatusTeapot {
		t.Errorf("OPTIONS without a requested method: %d", rec.Code)
	}

	for _, off := range []cors.Policy{{}, cors.NewPolicy(nil)} {
		if rec := serve(off, "OPTIONS", preflight...); rec.Code != http.StatusTeapot || len(rec.Header()) != 0 {
			t.Errorf("off: %d %v", rec.Code, rec.Header())
		}
	}
}
