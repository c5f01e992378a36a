package request

import (
	"net/http"
	"net/url"
	"strconv"
	"unicode/utf8"
)

// BadBytes says what is wrong with the request's path, query or headers, or "": PostgreSQL
// refuses a NUL byte and invalid UTF-8 in text, so such input must be refused where it arrives,
// never reach a query and come back as a 500. SQLite would store it, but a request must mean the
// same on both.
func BadBytes(r *http.Request) string {
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

// AllowedMethods lists the methods mux serves the request's path with, other than through its
// catch-all "/".
func AllowedMethods(mux *http.ServeMux, r *http.Request) []string {
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
