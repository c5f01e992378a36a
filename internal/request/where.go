package request

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
)

// ParseWhere reads a query filter: exactly one JSON object, with no key twice in any object
// (encoding/json would keep the last silently), no NUL in any string (PostgreSQL's text cannot
// hold one), and at most maxValues values in all (a list counts each of its values). Numbers are
// kept exact (json.Number). What the filter may filter on is the caller's to check. Its errors
// name the where query parameter.
func ParseWhere(raw string, maxValues int) (map[string]any, error) {
	shape := Errorf(http.StatusBadRequest, `where must be a JSON object such as {"severity":"high"}`)
	nul := Errorf(http.StatusBadRequest, `where must not contain \u0000 (a NUL character) in a string`)
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, shape
	}
	// The open objects and arrays, innermost last; an object knows its keys so far and whether
	// a key comes next.
	type frame struct {
		keys      map[string]bool // nil for an array
		expectKey bool
	}
	stack := []*frame{{keys: map[string]bool{}, expectKey: true}}
	values := 0
	for len(stack) > 0 {
		tok, err := dec.Token()
		if err != nil {
			return nil, shape
		}
		top := stack[len(stack)-1]
		if top.keys != nil && top.expectKey {
			if tok == json.Delim('}') {
				stack = stack[:len(stack)-1]
				if len(stack) > 0 {
					stack[len(stack)-1].expectKey = true // the container was a value of its parent
				}
				continue
			}
			key, _ := tok.(string)
			switch {
			case strings.ContainsRune(key, 0):
				return nil, nul
			case top.keys[key]:
				return nil, Errorf(http.StatusBadRequest, "where: duplicate key %q", key)
			}
			top.keys[key], top.expectKey = true, false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{keys: map[string]bool{}, expectKey: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
			stack[len(stack)-1].expectKey = true
			continue
		}
		if s, ok := tok.(string); ok && strings.ContainsRune(s, 0) {
			return nil, nul
		}
		if values++; values > maxValues {
			return nil, Errorf(http.StatusBadRequest, "where holds more than %d values; at most %d in all (a list counts each of its values)",
				maxValues, maxValues)
		}
		top.expectKey = true
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, Errorf(http.StatusBadRequest, "where must be exactly one JSON object, with nothing after it")
	}
	var where map[string]any
	full := json.NewDecoder(bytes.NewReader([]byte(raw)))
	full.UseNumber()
	if err := full.Decode(&where); err != nil || where == nil {
		return nil, shape
	}
	return where, nil
}
