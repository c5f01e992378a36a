package metrics

import (
	"net/http"
	"strings"
	"time"
)

// NoRoute is the route label of a request answered before its listener's mux routed it (a
// request refused for the bytes of its path or headers, a CORS preflight).
const NoRoute = "none"

// Instrument wraps the handler of a listener: each request is counted, with its duration, under
// the ServeMux pattern that routed it (r.Pattern without its method: "/jobs/{jobId}"), never its
// raw path, so that the series stay few. h must route with an http.ServeMux that receives this
// very request (wrappers in between must not replace it), as the mux sets r.Pattern on it.
func (m *Metrics) Instrument(listener string, h http.Handler) http.Handler {
	if m == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			code := sw.code
			if code == 0 {
				// Nothing was written: net/http answers 200 (or the handler panicked, and the
				// connection is dropped: counted as 200 all the same, the panic is logged).
				code = http.StatusOK
			}
			c, o := m.requestSeries(httpKey{listener: listener, route: routeOf(r.Pattern), method: methodOf(r.Method), code: code})
			c.Inc()
			o.Observe(time.Since(start).Seconds())
		}()
		h.ServeHTTP(sw, r)
	})
}

// routeOf is the route label of a ServeMux pattern: the pattern without its method.
func routeOf(pattern string) string {
	if pattern == "" {
		return NoRoute
	}
	if i := strings.IndexByte(pattern, ' '); i >= 0 {
		return strings.TrimLeft(pattern[i+1:], " \t")
	}
	return pattern
}

// methodOf is the method label: the standard methods, and "other" for any other token a client
// may send, so that they cannot make series.
func methodOf(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "other"
}

// statusWriter remembers the status code of a response. It keeps the Flusher of event streams
// and lets http.ResponseController reach the writer underneath (Unwrap).
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 && code >= 200 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush implements http.Flusher.
func (w *statusWriter) Flush() {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap is for http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
