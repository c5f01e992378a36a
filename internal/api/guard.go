package api

import (
	"bytes"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/baton-dev/baton/internal/jsontext"
)

// Bytes that no store column can hold are refused here, once for every route of both listeners,
// before any handler reads them: PostgreSQL refuses a NUL byte and invalid UTF-8 in text (and
// \u0000 and unpaired surrogates in jsonb), so such input must end as a 400, never reach a query
// and come back as a 500. SQLite would store them, but a request must mean the same on both.

// guard wraps a listener's mux: it refuses requests whose path, query or headers hold bytes a
// store cannot keep, then serves the request.
func (s *Server) guard(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if msg := badRequestBytes(r); msg != "" {
			s.writeError(w, r, guardError(r, msg))
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// guardError is the 400 of a refused request in the shape of the route's dialect: the producer
// API answers {"error": text}, the worker dialects {"error": "invalid_request", "message": text}.
func guardError(r *http.Request, msg string) *httpError {
	if isProducerPath(r.URL.Path) {
		return errorf(http.StatusBadRequest, "%s", msg)
	}
	return invalidRequest("%s", msg)
}

// isProducerPath reports whether p is outside the worker dialects' paths.
func isProducerPath(p string) bool {
	return !strings.HasPrefix(p, "/internal/") && !strings.HasPrefix(p, "/v1/") && !strings.HasPrefix(p, "/api/")
}

// badRequestBytes says what is wrong with the request's path, query or headers, or "".
func badRequestBytes(r *http.Request) string {
	if !cleanText(r.URL.Path) {
		return "the request path must be valid UTF-8 without NUL or control characters"
	}
	if r.URL.RawQuery != "" {
		// URL.Query would silently drop what it cannot parse (a bad %-escape).
		q, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil {
			return "malformed query string: " + err.Error()
		}
		for k, vs := range q {
			if !cleanText(k) {
				return "query parameter names must be valid UTF-8 without NUL or control characters"
			}
			for _, v := range vs {
				if !cleanText(v) {
					return "query parameter " + strconv.Quote(k) + " must be valid UTF-8 without NUL or control characters"
				}
			}
		}
	}
	for k, vs := range r.Header {
		for _, v := range vs {
			// net/http already refuses control characters in header values; bytes above 0x7f
			// are legal HTTP but not text a store can keep unless they are UTF-8.
			if !cleanText(v) {
				return "header " + k + " must be valid UTF-8 without NUL or control characters"
			}
		}
	}
	return ""
}

// cleanText reports whether s is valid UTF-8 without NUL or other control characters (a tab is
// allowed: header values may fold with it).
func cleanText(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// checkJSONText refuses a JSON text that PostgreSQL's text and jsonb could not store: invalid
// UTF-8, a \u0000 escape, or an unpaired UTF-16 surrogate escape (\ud800 alone). It does not
// check the syntax (the decoder does); it only looks at string escapes, and only when there are
// any, so a body without \u costs one UTF-8 scan.
func checkJSONText(b []byte) error {
	if !utf8.Valid(b) {
		return errorf(http.StatusBadRequest, "request body must be valid UTF-8")
	}
	if !bytes.Contains(b, []byte(`\u`)) {
		return nil
	}
	if e := jsontext.Check(b); e != nil {
		if e.NUL() {
			return errorf(http.StatusBadRequest, `request body must not contain \u0000 (a NUL character) in a string`)
		}
		return errorf(http.StatusBadRequest, `request body has an unpaired UTF-16 surrogate escape (\u%04x)`, e.Code)
	}
	return nil
}

// allowedMethods lists the methods mux serves path with, other than through its catch-all "/".
func allowedMethods(mux *http.ServeMux, r *http.Request) []string {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := mux.Handler(probe); pattern != "" && pattern != "/" {
			allow = append(allow, m)
		}
	}
	return allow
}

// notFound is the catch-all of a listener's mux: a known path with a method it does not serve is
// a 405 with Allow; anything else is a 404.
func (s *Server) notFound(mux *http.ServeMux) http.Handler {
	return s.serve(func(w http.ResponseWriter, r *http.Request) (any, error) {
		if allow := allowedMethods(mux, r); len(allow) > 0 {
			he := errorf(http.StatusMethodNotAllowed, "method %s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, strings.Join(allow, ", "))
			if !isProducerPath(r.URL.Path) {
				he = &httpError{status: http.StatusMethodNotAllowed, body: map[string]any{"error": "method_not_allowed", "message": he.body["error"]}}
			}
			he.header = http.Header{"Allow": {strings.Join(allow, ", ")}}
			return nil, he
		}
		return nil, errorf(http.StatusNotFound, "no such endpoint: %s %s", r.Method, r.URL.Path)
	})
}
