package metrics

import (
	"net/http"
	"time"

	"github.com/baton-dev/baton/internal/observe"
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
		sw := &observe.StatusWriter{ResponseWriter: w}
		defer func() {
			// A handler that panicked wrote nothing, and its connection is dropped: counted as
			// 200 all the same (the panic is logged).
			c, o := m.requestSeries(httpKey{listener: listener, route: routeOf(r.Pattern), method: methodOf(r.Method), code: sw.Status()})
			c.Inc()
			o.Observe(time.Since(start).Seconds())
		}()
		h.ServeHTTP(sw, r)
	})
}

// routeOf is the route label of a ServeMux pattern: its path (observe.Route), or NoRoute.
func routeOf(pattern string) string {
	if pattern == "" {
		return NoRoute
	}
	return observe.Route(pattern)
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
