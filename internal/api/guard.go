package api

import (
	"net/http"
	"strings"

	"github.com/baton-dev/baton/internal/api/codec"
	"github.com/baton-dev/baton/internal/request"
)

// Bytes that no store column can hold are refused here, once for every route of both listeners,
// before any handler reads them: PostgreSQL refuses a NUL byte and invalid UTF-8 in text (and
// \u0000 and unpaired surrogates in jsonb), so such input must end as a 400, never reach a query
// and come back as a 500. SQLite would store them, but a request must mean the same on both.
// request.BadBytes checks the path, query and headers; request.ReadBody checks a JSON body.

// guard wraps a listener's mux: it refuses requests whose path, query or headers hold bytes a
// store cannot keep, then serves the request.
func (s *Server) guard(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if msg := request.BadBytes(r); msg != "" {
			s.writeError(w, r, guardError(r, msg))
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// guardError is the 400 of a refused request in the shape of the route's dialect: the producer
// API answers {"error": text}, the worker dialects {"error": "invalid_request", "message": text}.
func guardError(r *http.Request, msg string) *request.Error {
	if isProducerPath(r.URL.Path) {
		return request.Errorf(http.StatusBadRequest, "%s", msg)
	}
	return codec.InvalidRequest("%s", msg)
}

// isProducerPath reports whether p is outside the worker dialects' paths.
func isProducerPath(p string) bool {
	return !strings.HasPrefix(p, "/internal/") && !strings.HasPrefix(p, "/v1/") && !strings.HasPrefix(p, "/api/")
}

// notFound is the catch-all of a listener's mux: a known path with a method it does not serve is
// a 405 with Allow; anything else is a 404.
func (s *Server) notFound(mux *http.ServeMux) http.Handler {
	return s.serve(func(w http.ResponseWriter, r *http.Request) (any, error) {
		if allow := request.AllowedMethods(mux, r); len(allow) > 0 {
			he := request.Errorf(http.StatusMethodNotAllowed, "method %s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, strings.Join(allow, ", "))
			if !isProducerPath(r.URL.Path) {
				he = &request.Error{Status: http.StatusMethodNotAllowed, Body: map[string]any{"error": "method_not_allowed", "message": he.Body["error"]}}
			}
			he.Header = http.Header{"Allow": {strings.Join(allow, ", ")}}
			return nil, he
		}
		return nil, request.Errorf(http.StatusNotFound, "no such endpoint: %s %s", r.Method, r.URL.Path)
	})
}
