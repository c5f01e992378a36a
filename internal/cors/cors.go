// Package cors is the public listener's cross-origin policy: which browser origins may read its
// answers, and the answers to their preflight requests.
package cors

// The producer contract's own API answers every request with Access-Control-Allow-Origin: *, so a
// web page on another origin can call it with its API key in x-api-key. The public listener does
// the same by default: the policy's Handler wraps all of it (producer API, event stream,
// task-scoped and callback routes, health checks, /openapi.json), answers the browser's preflight
// OPTIONS itself, before any route or API key check, and marks every other answer as readable by
// the allowed origins, errors included.
//
// An API key travels in a header a browser never adds by itself, so allowing every origin lets
// no page act with a visitor's credentials; a list of origins narrows which pages may call at all.

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/baton-dev/baton/internal/request"
)

const (
	allowMethods = "GET, POST, OPTIONS"
	// Every request header a client of the public listener sends that is not CORS-safelisted:
	// the producer API's key, JSON bodies, idempotent submissions and event-stream resumption,
	// and the credentials of the task-scoped and callback routes.
	allowHeaders = "x-api-key, Content-Type, Idempotency-Key, Last-Event-ID, Authorization, X-Trace-Task-Capability"
	// The answer headers a browser client needs besides the safelisted ones (Content-Type): when
	// to retry a 429, and whether a submission replayed an earlier one.
	exposeHeaders = "Retry-After, Idempotent-Replayed"
	// maxAge is how long, in seconds, a browser may reuse a preflight answer.
	maxAge = "600"
)

// Policy says which origins may read the public listener's answers. The zero value allows none
// and adds no header.
type Policy struct {
	any     bool            // every origin: Access-Control-Allow-Origin: *
	origins map[string]bool // otherwise, these (lower case), each echoed back when it asks
}

// NewPolicy allows origins: {"*"} for every origin, none for no CORS (ParseOrigins reads a list).
func NewPolicy(origins []string) Policy {
	var p Policy
	for _, o := range origins {
		if o == "*" {
			return Policy{any: true}
		}
		if p.origins == nil {
			p.origins = map[string]bool{}
		}
		p.origins[strings.ToLower(o)] = true
	}
	return p
}

func (p Policy) off() bool { return !p.any && len(p.origins) == 0 }

// allowOrigin is the Access-Control-Allow-Origin value for a request from origin, "" for none.
func (p Policy) allowOrigin(origin string) string {
	switch {
	case p.any:
		return "*"
	case origin != "" && p.origins[strings.ToLower(origin)]:
		return origin
	}
	return ""
}

// Handler wraps next with the policy; with no origin allowed it is next itself.
func (p Policy) Handler(next http.Handler) http.Handler {
	if p.off() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		allow := p.allowOrigin(origin)
		h := w.Header()
		if !p.any {
			// The answer depends on the request's Origin: caches must keep one per origin.
			h.Add("Vary", "Origin")
		}
		if r.Method == http.MethodOptions && origin != "" && r.Header.Get("Access-Control-Request-Method") != "" {
			// A preflight: answered here, without an API key, whatever the path.
			if allow == "" {
				request.WriteJSON(w, http.StatusForbidden, map[string]any{"error": fmt.Sprintf("origin %s may not call this API from a browser (CORS)", origin)})
				return
			}
			h.Set("Access-Control-Allow-Origin", allow)
			h.Set("Access-Control-Allow-Methods", allowMethods)
			h.Set("Access-Control-Allow-Headers", allowHeaders)
			h.Set("Access-Control-Max-Age", maxAge)
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if allow != "" {
			h.Set("Access-Control-Allow-Origin", allow)
			h.Set("Access-Control-Expose-Headers", exposeHeaders)
		}
		next.ServeHTTP(w, r)
	})
}

// Off is the ParseOrigins value that turns CORS off.
const Off = "none"

// ParseOrigins reads a list of allowed origins as the command line gives it: "*" (every
// origin), "none" (CORS off: nil), or origins separated by commas, each scheme://host[:port]
// as a browser sends it in Origin ("https://app.example.com", "http://localhost:5173"). Spaces
// around entries are ignored; anything else is an error that says what is wrong.
func ParseOrigins(v string) ([]string, error) {
	v = strings.TrimSpace(v)
	switch v {
	case "":
		return nil, fmt.Errorf(`empty: give "*" (every origin), origins separated by commas (https://app.example.com,http://localhost:5173), or %q`, Off)
	case Off:
		return nil, nil
	case "*":
		return []string{"*"}, nil
	}
	var out []string
	seen := map[string]bool{}
	for _, o := range strings.Split(v, ",") {
		o = strings.TrimSpace(o)
		switch o {
		case "":
			return nil, fmt.Errorf("%q: an empty entry in the list of origins", v)
		case "*", Off:
			return nil, fmt.Errorf("%q: %q stands alone, not in a list of origins", v, o)
		}
		if err := checkOrigin(o); err != nil {
			return nil, fmt.Errorf("%q is not an origin: %w; want scheme://host[:port], e.g. https://app.example.com", o, err)
		}
		if o = strings.ToLower(o); !seen[o] {
			seen[o] = true
			out = append(out, o)
		}
	}
	return out, nil
}

// checkOrigin accepts what a browser sends in Origin for a page it may allow: a scheme and a
// host, maybe a port, and nothing else.
func checkOrigin(o string) error {
	u, err := url.Parse(o)
	switch {
	case err != nil:
		return errors.New("it does not parse as a URL")
	case u.Scheme == "" || u.Opaque != "" || u.Host == "":
		return errors.New("no scheme:// or no host")
	case u.User != nil:
		return errors.New("it has user information")
	case u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery || strings.HasSuffix(o, "#"):
		return errors.New("it has a path, query or fragment (an origin has none, not even a trailing /)")
	case strings.Contains(u.Host, "*"):
		return errors.New("wildcards are not supported; list each origin")
	case u.Port() == "" && strings.HasSuffix(u.Host, ":"):
		return errors.New("an empty port")
	}
	return nil
}
