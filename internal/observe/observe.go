// Package observe tells the HTTP instrumentation what a request was and what it was answered:
// the route that served it, and the status code written.
package observe

import (
	"net/http"
	"strings"
)

// Route is the route of a ServeMux pattern, for labels and span names: its path, without the
// method and host it may name ("/jobs/{jobId}" for "GET /jobs/{jobId}"); "" for no pattern.
func Route(pattern string) string {
	if i := strings.IndexByte(pattern, ' '); i >= 0 {
		pattern = strings.TrimLeft(pattern[i+1:], " \t")
	}
	if i := strings.IndexByte(pattern, '/'); i > 0 {
		pattern = pattern[i:]
	}
	return pattern
}

// StatusWriter records the status code of a response. It keeps what handlers look for on a
// ResponseWriter: Flush (event streams) and Unwrap (http.ResponseController).
type StatusWriter struct {
	http.ResponseWriter
	code int
}

// Status is the status code written: 200 when the handler wrote a body or nothing at all
// (net/http then answers 200), the informational codes left out.
func (w *StatusWriter) Status() int {
	if w.code == 0 {
		return http.StatusOK
	}
	return w.code
}

func (w *StatusWriter) WriteHeader(code int) {
	if w.code == 0 && code >= 200 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *StatusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush implements http.Flusher.
func (w *StatusWriter) Flush() {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap is the wrapped writer, for http.ResponseController.
func (w *StatusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
