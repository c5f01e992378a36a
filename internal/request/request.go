// Package request reads and checks HTTP requests strictly (JSON bodies, typed members, query
// filters, the bytes a store can keep) and answers what it refuses with a status code and a
// JSON error.
package request

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// Error is an error with its status code, its JSON body (which always has an "error" member) and
// the headers to answer it with.
type Error struct {
	Status int
	Body   map[string]any
	Header http.Header
}

func (e *Error) Error() string { return fmt.Sprintf("%d %v", e.Status, e.Body["error"]) }

// Errorf is an Error of status whose body is {"error": the formatted text}.
func Errorf(status int, format string, args ...any) *Error {
	return &Error{Status: status, Body: map[string]any{"error": fmt.Sprintf(format, args...)}}
}

// WriteJSON answers with status and v as JSON (HTML characters are not escaped).
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}
