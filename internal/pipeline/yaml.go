package pipeline

import (
	"bytes"
	"errors"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// readYAML decodes one YAML document into a tree. It reports syntax errors, a second document,
// duplicate keys, unsupported tags and oversized alias expansions; it returns nil when the
// document cannot be read at all.
func readYAML(data []byte, ps *problems) *node {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			ps.at("", 0, "document is empty")
		} else {
			yamlSyntax(err, ps)
		}
		return nil
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		yamlSyntax(err, ps)
		return nil
	default:
		ps.at("", next.Line, "only one YAML document is allowed")
		return nil
	}
	r := yamlReader{ps: ps}
	n := r.value(&doc, "")
	if r.stopped {
		return nil
	}
	return n
}

// yamlLine finds the line in yaml.v3's error messages ("yaml: line 3: ...").
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): `)

func yamlSyntax(err error, ps *problems) {
	msg := err.Error()
	line := 0
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = msg[len(m[0]):]
	}
	ps.at("", line, "invalid YAML: %s", strings.TrimPrefix(msg, "yaml: "))
}

type yamlReader struct {
	ps      *problems
	nodes   int
	depth   int
	stopped bool // a limit was hit and reported; the tree is incomplete
}

func (r *yamlReader) value(y *yaml.Node, path string) *node {
	if r.stopped {
		return &node{}
	}
	r.nodes++
	if r.nodes > maxNodes {
		r.ps.at("", 0, "document is too large: more than %d values once its aliases are expanded", maxNodes)
		r.stopped = true
		return &node{}
	}
	if y.Kind == yaml.SequenceNode || y.Kind == yaml.MappingNode {
		r.depth++
		defer func() { r.depth-- }()
		if r.depth > maxDepth {
			r.ps.at(path, y.Line, "nested too deeply (more than %d levels)", maxDepth)
			r.stopped = true
			return &node{}
		}
	}

	switch y.Kind {
	case yaml.DocumentNode:
		if len(y.Content) == 0 {
			return &node{line: y.Line}
		}
		return r.value(y.Content[0], path)
	case yaml.AliasNode:
		n := *r.value(y.Alias, path)
		n.line = y.Line
		return &n
	case yaml.SequenceNode:
		n := &node{kind: kindList, line: y.Line, list: make([]*node, len(y.Content))}
		for i, c := range y.Content {
			n.list[i] = r.value(c, index(path, i))
		}
		return n
	case yaml.MappingNode:
		return r.mapping(y, path)
	case yaml.ScalarNode:
		return r.scalar(y, path)
	}
	r.ps.at(path, y.Line, "unsupported YAML node")
	return &node{kind: kindInvalid, line: y.Line}
}

func (r *yamlReader) mapping(y *yaml.Node, path string) *node {
	n := &node{kind: kindMap, line: y.Line}
	seen := make(map[string]int) // key → its line
	var merges []*yaml.Node
	for i := 0; i+1 < len(y.Content); i += 2 {
		k, v := y.Content[i], y.Content[i+1]
		if k.Kind == yaml.AliasNode {
			k = k.Alias
		}
		if k.Kind != yaml.ScalarNode {
			r.ps.at(path, k.Line, "map keys must be strings")
			continue
		}
		if k.ShortTag() == "!!merge" {
			merges = append(merges, v)
			continue
		}
		if first, dup := seen[k.Value]; dup {
			r.ps.at(child(path, k.Value), k.Line, "duplicate key %q (first at line %d)", k.Value, first)
			continue
		}
		seen[k.Value] = k.Line
		val := r.value(v, child(path, k.Value))
		if val.kind == kindMap || val.kind == kindList {
			// A block map or list starts on the line after its key; the key's line is where a
			// reader looks for a problem with the whole value ("schema: unique is required").
			val.line = k.Line
		}
		n.entries = append(n.entries, entry{key: k.Value, line: k.Line, val: val})
	}
	// A merge key (<<: *base) adds the keys of the maps it names that the map does not set
	// itself; among several merged maps, the first one listed wins.
	for _, m := range merges {
		srcs := []*yaml.Node{m}
		if m.Kind == yaml.SequenceNode {
			srcs = m.Content
		}
		for _, src := range srcs {
			mn := r.value(src, path)
			if mn.kind != kindMap {
				r.ps.at(path, src.Line, "a merge key (<<) must name a map or a list of maps")
				continue
			}
			for _, e := range mn.entries {
				if _, set := seen[e.key]; !set {
					seen[e.key] = e.line
					n.entries = append(n.entries, e)
				}
			}
		}
	}
	return n
}

func (r *yamlReader) scalar(y *yaml.Node, path string) *node {
	n := &node{line: y.Line}
	switch tag := y.ShortTag(); tag {
	case "!!null":
	case "!!bool":
		n.kind = kindBool
		if err := y.Decode(&n.b); err != nil {
			r.ps.at(path, y.Line, "invalid boolean %q", y.Value)
			n.kind = kindInvalid
		}
	case "!!int":
		n.kind = kindNumber
		var v any
		if err := y.Decode(&v); err != nil {
			r.ps.at(path, y.Line, "invalid integer %q", y.Value)
			n.kind = kindInvalid
			break
		}
		switch v := v.(type) {
		case int:
			n.s = strconv.Itoa(v)
		case int64:
			n.s = strconv.FormatInt(v, 10)
		case uint64:
			n.s = strconv.FormatUint(v, 10)
		default:
			r.ps.at(path, y.Line, "invalid integer %q", y.Value)
			n.kind = kindInvalid
		}
	case "!!float":
		n.kind = kindNumber
		// yaml.v3 reads a decimal integer too long for 64 bits as a float; keep all its digits,
		// as JSON does.
		if plain := strings.ReplaceAll(y.Value, "_", ""); isDecimalInt(plain) {
			n.s = normalizeInt(plain)
			break
		}
		var f float64
		if err := y.Decode(&f); err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			r.ps.at(path, y.Line, "must be a finite number, not %q", y.Value)
			n.kind = kindInvalid
			break
		}
		n.s = normalizeFloat(f)
	case "!!str", "!!timestamp", "!!binary":
		// A timestamp stays the text the user wrote; fields that hold times parse it themselves.
		n.kind, n.s = kindString, y.Value
	default:
		r.ps.at(path, y.Line, "unsupported YAML tag %s", tag)
		n.kind = kindInvalid
	}
	return n
}
