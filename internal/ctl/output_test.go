package ctl

import (
	"bytes"
	"flag"
	"io"
	"slices"
	"testing"
)

func TestWriteOutput_YAMLKeepsTheJSONKeysOrderAndDigits(t *testing.T) {
	t.Parallel()
	v := struct {
		Name      string   `json:"name"`
		CreatedAt int64    `json:"created_at"`
		Tags      []string `json:"tags"`
		Note      string   `json:"note"`
	}{"a", 1700000000123, []string{}, "two\nlines"}
	var b bytes.Buffer
	if err := WriteOutput(&b, OutputYAML, v, nil); err != nil {
		t.Fatal(err)
	}
	want := "name: a\ncreated_at: 1700000000123\ntags: []\nnote: |-\n  two\n  lines\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestRegisterOutput_JSONIsAnAliasAndAnUnknownFormatIsAFlagError(t *testing.T) {
	t.Parallel()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o := RegisterOutput(fs)
	if err := fs.Parse([]string{"--json"}); err != nil || *o != OutputJSON {
		t.Errorf("--json: %v, %q", err, *o)
	}
	if err := fs.Parse([]string{"-o", "xml"}); err == nil {
		t.Errorf("-o xml: no error")
	}
}

func TestRowColumns_SortedWithTheCursorLast(t *testing.T) {
	t.Parallel()
	got := rowColumns([]map[string]any{{"b": 1, "_cursor": 2}, {"a": "x", "b": 2, "_cursor": 3}})
	if want := []string{"a", "b", "_cursor"}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}
