package observe

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestRoute(t *testing.T) {
	for pattern, want := range map[string]string{
		"":                         "",
		"/jobs":                    "/jobs",
		"GET /jobs/{jobId}":        "/jobs/{jobId}",
		"POST  /jobs":              "/jobs",
		"example.com/jobs":         "/jobs",
		"GET example.com/jobs/{x}": "/jobs/{x}",
	} {
		if got := Route(pattern); got != want {
			t.Errorf("Route(%q) = %q, want %q", pattern, got, want)
		}
	}
}

func TestStatusWriter(t *testing.T) {
	cases := []struct {
		name  string
		write func(w http.ResponseWriter)
		want  int
	}{
		{"nothing written", func(http.ResponseWriter) {}, 200},
		{"a body", func(w http.ResponseWriter) { w.Write([]byte("x")) }, 200},
		{"a status", func(w http.ResponseWriter) { w.WriteHeader(404) }, 404},
		{"an early hint, then the answer", func(w http.ResponseWriter) { w.WriteHeader(103); w.WriteHeader(201) }, 201},
		{"a stream flushed", func(w http.ResponseWriter) { w.(http.Flusher).Flush() }, 200},
	}
	for _, tc := range cases {
		rec := httptest.NewRecorder()
		sw := &StatusWriter{ResponseWriter: rec}
		tc.write(sw)
		if sw.Status() != tc.want {
			t.Errorf("%s: Status() = %d, want %d", tc.name, sw.Status(), tc.want)
		}
	}
	// http.ResponseController reaches the writer underneath.
	rec := httptest.NewRecorder()
	if err := http.NewResponseController(&StatusWriter{ResponseWriter: rec}).Flush(); err != nil || !rec.Flushed {
		t.Errorf("Flush through a ResponseController: %v, flushed %v", err, rec.Flushed)
	}
}
