package pipeline

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"sort"
)

// readJSON decodes one JSON value into a tree, token by token, so that it keeps the order of
// keys, finds duplicate keys (encoding/json would keep the last silently) and knows the line of
// every value.
func readJSON(data []byte, ps *problems) *node {
	if len(bytes.TrimSpace(data)) == 0 {
		ps.at("", 0, "document is empty")
		return nil
	}
	r := &jsonReader{data: data, ps: ps, dec: json.NewDecoder(bytes.NewReader(data))}
	r.dec.UseNumber()
	r.lineStarts = []int{0}
	for i, c := range data {
		if c == '\n' {
			r.lineStarts = append(r.lineStarts, i+1)
		}
	}
	n, err := r.value("")
	if err == nil {
		off := r.next()
		if _, err = r.dec.Token(); err == nil {
			line, _ := r.position(off)
			ps.at("", line, "invalid JSON: unexpected data after the document")
			return nil
		}
		if errors.Is(err, io.EOF) {
			err = nil
		}
	}
	switch {
	case err == nil:
		return n
	case errors.Is(err, errStop):
	default:
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			line, col := r.position(int(syn.Offset))
			ps.at("", line, "invalid JSON at line %d, column %d: %s", line, col, syn.Error())
		} else {
			ps.at("", 0, "invalid JSON: unexpected end of input")
		}
	}
	return nil
}

// errStop ends a read after a limit was hit and reported.
var errStop = errors.New("stop")

type jsonReader struct {
	data       []byte
	dec        *json.Decoder
	ps         *problems
	lineStarts []int // offset of the first byte of each line
	depth      int
}

// next is the offset of the next token: the decoder stands after the previous one, before any
// white space, comma or colon.
func (r *jsonReader) next() int {
	off := int(r.dec.InputOffset())
	for off < len(r.data) {
		switch r.data[off] {
		case ' ', '\t', '\r', '\n', ',', ':':
			off++
			continue
		}
		break
	}
	return off
}

// position turns a byte offset into a 1-based line and column.
func (r *jsonReader) position(off int) (line, col int) {
	i := sort.Search(len(r.lineStarts), func(i int) bool { return r.lineStarts[i] > off }) - 1
	return i + 1, off - r.lineStarts[i] + 1
}

func (r *jsonReader) value(path string) (*node, error) {
	line, _ := r.position(r.next())
	tok, err := r.dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case nil:
		return &node{line: line}, nil
	case bool:
		return &node{kind: kindBool, line: line, b: t}, nil
	case string:
		return &node{kind: kindString, line: line, s: t}, nil
	case json.Number:
		s, ok := normalizeNumber(string(t))
		if !ok {
			r.ps.at(path, line, "number %s is out of range", t)
			return &node{kind: kindInvalid, line: line}, nil
		}
		return &node{kind: kindNumber, line: line, s: s}, nil
	}

	r.depth++
	defer func() { r.depth-- }()
	if r.depth > maxDepth {
		r.ps.at(path, line, "nested too deeply (more than %d levels)", maxDepth)
		return nil, errStop
	}
	if tok == json.Delim('[') {
		n := &node{kind: kindList, line: line}
		for r.dec.More() {
			c, err := r.value(index(path, len(n.list)))
			if err != nil {
				return nil, err
			}
			n.list = append(n.list, c)
		}
		_, err := r.dec.Token() // ]
		return n, err
	}

	n := &node{kind: kindMap, line: line}
	seen := make(map[string]int)
	for r.dec.More() {
		kline, _ := r.position(r.next())
		ktok, err := r.dec.Token()
		if err != nil {
			return nil, err
		}
		key := ktok.(string) // the decoder refuses anything else as an object key
		v, err := r.value(child(path, key))
		if err != nil {
			return nil, err
		}
		if first, dup := seen[key]; dup {
			r.ps.at(child(path, key), kline, "duplicate key %q (first at line %d)", key, first)
			continue
		}
		seen[key] = kline
		n.entries = append(n.entries, entry{key: key, line: kline, val: v})
	}
	_, err = r.dec.Token() // }
	return n, err
}
