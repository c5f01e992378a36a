package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/baton-dev/baton/client"
	"go.yaml.in/yaml/v3"
)

// The formats of -o: table is the human text; json and yaml are the API's object, the same one
// the HTTP API answers (a list is the API's envelope, e.g. {"pipelines": [...]}, so that a page's
// next cursor is part of it).
const (
	OutputTable = "table"
	OutputJSON  = "json"
	OutputYAML  = "yaml"
	// OutputCSV is baton query's: a header of the column names, then one record per row.
	OutputCSV = "csv"
)

// Output is the value of -o / --output.
type Output string

func (o *Output) String() string { return string(*o) }

func (o *Output) Set(v string) error {
	return (&formatValue{o, o.Formats()}).Set(v)
}

// Formats is the formats -o takes, for completion.
func (o *Output) Formats() []string { return []string{OutputTable, OutputJSON, OutputYAML} }

// formatValue is -o of a command whose formats are not Output's (baton query: table, json, csv).
type formatValue struct {
	o       *Output
	formats []string
}

func (f *formatValue) String() string {
	if f == nil || f.o == nil {
		return ""
	}
	return string(*f.o)
}

func (f *formatValue) Set(v string) error {
	if slices.Contains(f.formats, v) {
		*f.o = Output(v)
		return nil
	}
	return fmt.Errorf("want %s or %s", strings.Join(f.formats[:len(f.formats)-1], ", "), f.formats[len(f.formats)-1])
}

// Formats is the formats -o takes, for completion.
func (f *formatValue) Formats() []string { return f.formats }

// jsonAlias is --json, the older spelling of -o json.
type jsonAlias struct{ o *Output }

func (a jsonAlias) String() string   { return "false" }
func (a jsonAlias) IsBoolFlag() bool { return true }

func (a jsonAlias) Set(v string) error {
	b, err := strconv.ParseBool(v)
	switch {
	case err != nil:
		return err
	case b:
		*a.o = OutputJSON
	case *a.o == OutputJSON:
		*a.o = OutputTable
	}
	return nil
}

// RegisterOutput defines -o, --output and --json on fs; an unknown format is a flag error, so a
// usage error (exit 2).
func RegisterOutput(fs *flag.FlagSet) *Output {
	o := Output(OutputTable)
	fs.Var(&o, "o", "output `FORMAT`: table, json or yaml")
	fs.Var(&o, "output", "output `FORMAT`: table, json or yaml (as -o)")
	fs.Var(jsonAlias{&o}, "json", "as -o json")
	return &o
}

// registerFormats is RegisterOutput for a command with formats of its own, the first the default.
func registerFormats(fs *flag.FlagSet, formats ...string) *Output {
	o := Output(formats[0])
	list := strings.Join(formats[:len(formats)-1], ", ") + " or " + formats[len(formats)-1]
	fs.Var(&formatValue{&o, formats}, "o", "output `FORMAT`: "+list)
	fs.Var(&formatValue{&o, formats}, "output", "output `FORMAT`: "+list+" (as -o)")
	fs.Var(jsonAlias{&o}, "json", "as -o json")
	return &o
}

// WriteOutput writes v in format: table calls text, json and yaml encode v. YAML is made from
// v's JSON, so that its field names, numbers and order are the JSON ones.
func WriteOutput(w io.Writer, format Output, v any, text func() error) error {
	switch format {
	case OutputJSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(v)
	case OutputYAML:
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		n, err := jsonToYAML(b)
		if err != nil {
			return err
		}
		enc := yaml.NewEncoder(w)
		enc.SetIndent(2)
		if err := enc.Encode(n); err != nil {
			return err
		}
		return enc.Close()
	}
	return text()
}

// jsonToYAML turns one JSON value into a YAML node with the same keys in the same order; a number
// keeps its digits (a Unix-millisecond time must not become 1.7e+12).
func jsonToYAML(data []byte) (*yaml.Node, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	n, err := yamlValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("more than one JSON value")
	}
	return n, nil
}

func yamlValue(dec *json.Decoder) (*yaml.Node, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	scalar := func(tag, value string) *yaml.Node {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: value}
	}
	switch t := tok.(type) {
	case json.Delim:
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		if t == '{' {
			n.Kind, n.Tag = yaml.MappingNode, "!!map"
		}
		for dec.More() {
			if n.Kind == yaml.MappingNode {
				key, err := dec.Token()
				if err != nil {
					return nil, err
				}
				n.Content = append(n.Content, scalar("!!str", key.(string)))
			}
			v, err := yamlValue(dec)
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, v)
		}
		if len(n.Content) == 0 {
			n.Style = yaml.FlowStyle // {} and [], not an empty block
		}
		_, err := dec.Token() // the closing delimiter
		return n, err
	case string:
		n := scalar("!!str", t)
		if strings.Contains(t, "\n") {
			n.Style = yaml.LiteralStyle
		}
		return n, nil
	case json.Number:
		if strings.ContainsAny(string(t), ".eE") {
			return scalar("!!float", string(t)), nil
		}
		return scalar("!!int", string(t)), nil
	case bool:
		return scalar("!!bool", strconv.FormatBool(t)), nil
	case nil:
		return scalar("!!null", "null"), nil
	}
	return nil, fmt.Errorf("unexpected JSON token %v", tok)
}

// show runs a read command: its positional arguments (names), -o, one call of the API, and
// the answer as -o asks (text prints the table).
func show[T any](ctx context.Context, c *jobCmd, args, names []string, call func(*client.Client, []string) (T, error), text func(T) int) int {
	c.outputFlag()
	pos, code, ok := c.parse(args, names...)
	if !ok {
		return code
	}
	cl, code, ok := c.client()
	if !ok {
		return code
	}
	v, err := call(cl, pos)
	if err != nil {
		return c.fail(err)
	}
	return c.print(v, func() int { return text(v) })
}

func orDash(s *string) string {
	if s == nil || *s == "" {
		return "-"
	}
	return *s
}

func flushTable(c *jobCmd, tw *tabwriter.Writer) int {
	if err := tw.Flush(); err != nil {
		fmt.Fprintf(c.stderr, "%s: %v\n", c.cmd, err)
		return 1
	}
	return 0
}
