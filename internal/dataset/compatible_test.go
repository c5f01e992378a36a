package dataset

import (
	"errors"
	"testing"

	"github.com/baton-dev/baton/internal/pipeline"
)

// alerts is the schema most tests start from.
func alerts() *pipeline.Schema {
	return &pipeline.Schema{
		Columns: []pipeline.Column{
			{Name: "dedupe_key", Type: pipeline.TypeString, Required: true},
			{Name: "severity", Type: pipeline.TypeString},
			{Name: "host", Type: pipeline.TypeString},
			{Name: "count", Type: pipeline.TypeInteger},
		},
		Unique:  []string{"dedupe_key"},
		Indexes: [][]string{{"severity"}},
	}
}

// edit is alerts changed by fn.
func edit(fn func(s *pipeline.Schema)) *pipeline.Schema {
	s := alerts()
	fn(s)
	return s
}

func TestCompatible(t *testing.T) {
	t.Parallel()
	const tail = "; a buffered dataset's table only gains optional columns"
	cases := []struct {
		name string
		next *pipeline.Schema
		want string // "" when compatible
	}{
		{"the same schema", alerts(), ""},
		{"an optional column is added", edit(func(s *pipeline.Schema) {
			s.Columns = append(s.Columns, pipeline.Column{Name: "region", Type: pipeline.TypeString})
		}), ""},
		{"an index is added", edit(func(s *pipeline.Schema) { s.Indexes = append(s.Indexes, []string{"host", "severity"}) }), ""},
		{"an index is dropped: the table keeps it", edit(func(s *pipeline.Schema) { s.Indexes = nil }), ""},
		{"columns are reordered", edit(func(s *pipeline.Schema) { s.Columns[0], s.Columns[3] = s.Columns[3], s.Columns[0] }), ""},
		{"a required column is added", edit(func(s *pipeline.Schema) {
			s.Columns = append(s.Columns, pipeline.Column{Name: "region", Type: pipeline.TypeString, Required: true})
		}), `new column "region" is required` + tail},
		{"a column changes type", edit(func(s *pipeline.Schema) { s.Columns[1].Type = pipeline.TypeInteger }),
			`column "severity" changes type from string to integer` + tail},
		{"a column is removed", edit(func(s *pipeline.Schema) { s.Columns = s.Columns[:2] }),
			`column "host" was removed; column "count" was removed` + tail},
		{"a column becomes required", edit(func(s *pipeline.Schema) { s.Columns[2].Required = true }),
			`column "host" becomes required` + tail},
		{"a column becomes optional", edit(func(s *pipeline.Schema) { s.Columns[0].Required = false }),
			`column "dedupe_key" becomes optional` + tail},
		{"the unique key changes", edit(func(s *pipeline.Schema) {
			s.Columns = append(s.Columns, pipeline.Column{Name: "id", Type: pipeline.TypeString})
			s.Unique = []string{"id"}
		}), `unique key changes from [dedupe_key] to [id]` + tail},
		{"a column joins the unique key", edit(func(s *pipeline.Schema) { s.Unique = []string{"host", "dedupe_key"} }),
			`unique key changes from [dedupe_key] to [host, dedupe_key]` + tail},
		{"every incompatibility in one message", edit(func(s *pipeline.Schema) {
			s.Columns = []pipeline.Column{
				{Name: "dedupe_key", Type: pipeline.TypeString, Required: true},
				{Name: "severity", Type: pipeline.TypeInteger},
				{Name: "count", Type: pipeline.TypeInteger},
				{Name: "id", Type: pipeline.TypeString},
				{Name: "x", Type: pipeline.TypeJSON, Required: true},
			}
			s.Unique = []string{"id"}
		}), `column "severity" changes type from string to integer; column "host" was removed; new column "x" is required; ` +
			`unique key changes from [dedupe_key] to [id]` + tail},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := Compatible(alerts(), tc.next)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want == "":
			case err == nil:
				t.Fatalf("accepted; want %q", tc.want)
			case err.Error() != tc.want:
				t.Fatalf("error:\n got  %q\n want %q", err, tc.want)
			case !errors.Is(err, ErrIncompatible):
				t.Fatalf("%v does not wrap ErrIncompatible", err)
			}
		})
	}
}

func TestUniqueKeyOrderIsCompatible(t *testing.T) {
	t.Parallel()
	old := edit(func(s *pipeline.Schema) { s.Unique = []string{"dedupe_key", "host"} })
	next := edit(func(s *pipeline.Schema) { s.Unique = []string{"host", "dedupe_key"} })
	if err := Compatible(old, next); err != nil {
		t.Fatal(err)
	}
}
