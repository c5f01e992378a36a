package dataset

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/pipeline"
)

// everyType has a column of every type; id is the unique key, name is required.
func everyType() *pipeline.Schema {
	return &pipeline.Schema{
		Columns: []pipeline.Column{
			{Name: "id", Type: pipeline.TypeString},
			{Name: "name", Type: pipeline.TypeString, Required: true},
			{Name: "n", Type: pipeline.TypeInteger},
			{Name: "f", Type: pipeline.TypeNumber},
			{Name: "ok", Type: pipeline.TypeBoolean},
			{Name: "at", Type: pipeline.TypeTimestamp},
			{Name: "doc", Type: pipeline.TypeJSON},
		},
		Unique: []string{"id"},
	}
}

func TestParseBatch(t *testing.T) {
	t.Parallel()
	at := time.Date(2025, 3, 1, 10, 0, 0, 123456000, time.UTC)
	cases := []struct {
		name  string
		jsonl string
		want  []Row
		err   string // the *RowError's text, when the batch fails
	}{
		{"every type", `{"id": "a", "name": "x", "n": 42, "f": 1.5, "ok": true, "at": "2025-03-01T11:00:00.123456789+01:00", "doc": {"k": [1, 2]}}`,
			[]Row{{"id": "a", "name": "x", "n": int64(42), "f": 1.5, "ok": true, "at": at, "doc": json.RawMessage(`{"k":[1,2]}`)}}, ""},
		{"optional columns may be missing or null", `{"id": "a", "name": "x", "n": null}`,
			[]Row{{"id": "a", "name": "x", "n": nil}}, ""},
		{"empty lines are skipped, a last line needs no newline", "\n{\"id\": \"a\", \"name\": \"x\"}\n\n  \n{\"id\": \"b\", \"name\": \"y\"}",
			[]Row{{"id": "a", "name": "x"}, {"id": "b", "name": "y"}}, ""},
		{"CRLF line ends", "{\"id\": \"a\", \"name\": \"x\"}\r\n{\"id\": \"b\", \"name\": \"y\"}\r\n",
			[]Row{{"id": "a", "name": "x"}, {"id": "b", "name": "y"}}, ""},
		{"an empty batch", "", nil, ""},
		{"org_id is dropped, whatever it holds", `{"id": "a", "name": "x", "org_id": {"not": "a string"}}`,
			[]Row{{"id": "a", "name": "x"}}, ""},
		{"integral numbers are integers", `{"id": "a", "name": "x", "n": 2.0}` + "\n" + `{"id": "b", "name": "x", "n": -1.5e3}`,
			[]Row{{"id": "a", "name": "x", "n": int64(2)}, {"id": "b", "name": "x", "n": int64(-1500)}}, ""},
		{"the largest integer", `{"id": "a", "name": "x", "n": 9223372036854775807}`,
			[]Row{{"id": "a", "name": "x", "n": int64(9223372036854775807)}}, ""},
		{"a number may be integral", `{"id": "a", "name": "x", "f": 3}`, []Row{{"id": "a", "name": "x", "f": 3.0}}, ""},
		{"json keeps any value", `{"id": "a", "name": "x", "doc": "text"}`,
			[]Row{{"id": "a", "name": "x", "doc": json.RawMessage(`"text"`)}}, ""},
		{"json keeps surrogate pairs and escaped backslashes", `{"id": "a", "name": "x", "doc": ["\ud83d\ude00", "\\ud800"]}`,
			[]Row{{"id": "a", "name": "x", "doc": json.RawMessage(`["\ud83d\ude00","\\ud800"]`)}}, ""},

		{"a required column is missing", `{"id": "a"}`, nil, `row 1: column "name" is required`},
		{"a required column is null", `{"id": "a", "name": null}`, nil, `row 1: column "name" is required and must not be null`},
		{"the unique key is missing", `{"name": "x"}`, nil, `row 1: column "id" is required`},
		{"the unique key is null", `{"id": null, "name": "x"}`, nil, `row 1: column "id" is part of the unique key and must not be null`},
		{"an unknown column", `{"id": "a", "name": "x", "colour": "red"}`, nil, `row 1: unknown column "colour"`},
		{"a column twice", `{"id": "a", "name": "x", "id": "b"}`, nil, `row 1: column "id" appears twice`},
		{"a string", `{"id": "a", "name": 1}`, nil, `row 1: column "name" must be a string`},
		{"a string without U+0000", `{"id": "a", "name": "x\u0000y"}`, nil, `row 1: column "name" must not hold the character U+0000`},
		{"an integer, not a string of digits", `{"id": "a", "name": "x", "n": "42"}`, nil, `row 1: column "n" must be an integer`},
		{"an integer, not a fraction", `{"id": "a", "name": "x", "n": 1.5}`, nil, `row 1: column "n" must be an integer`},
		{"an integer in range", `{"id": "a", "name": "x", "n": 9223372036854775808}`, nil,
			`row 1: column "n" is out of range for a 64-bit integer`},
		{"a number", `{"id": "a", "name": "x", "f": "1.5"}`, nil, `row 1: column "f" must be a number`},
		{"a number in range", `{"id": "a", "name": "x", "f": 1e400}`, nil, `row 1: column "f" is out of range for a 64-bit floating point number`},
		{"a boolean", `{"id": "a", "name": "x", "ok": 1}`, nil, `row 1: column "ok" must be true or false`},
		{"a timestamp", `{"id": "a", "name": "x", "at": "2025-03-01 10:00:00"}`, nil, `row 1: column "at" must be an RFC 3339 timestamp string`},
		{"a timestamp is a string", `{"id": "a", "name": "x", "at": 1740823200}`, nil, `row 1: column "at" must be an RFC 3339 timestamp string`},
		{"json without U+0000", `{"id": "a", "name": "x", "doc": {"k": "\u0000"}}`, nil, `row 1: column "doc" must not hold the character U+0000`},
		{"json without an unpaired surrogate escape, which jsonb refuses", `{"id": "a", "name": "x", "doc": {"k": "\ud83d"}}`, nil,
			`row 1: column "doc" must not hold an unpaired UTF-16 surrogate escape (\ud83d)`},
		{"json without a lone low surrogate escape", `{"id": "a", "name": "x", "doc": ["\ud83d\u0041", "\ude00"]}`, nil,
			`row 1: column "doc" must not hold an unpaired UTF-16 surrogate escape (\ud83d)`},
		{"bad JSON", `{"id": "a", "name": x}`, nil, `row 1: invalid JSON: invalid character 'x' looking for beginning of value`},
		{"a row is an object", `["a", "x"]`, nil, `row 1: must be a JSON object`},
		{"one object a line", `{"id": "a", "name": "x"} {"id": "b", "name": "y"}`, nil, `row 1: must hold one JSON object, and nothing after it`},
		{"bad JSON, on its line", "{\"id\": \"a\", \"name\": \"x\"}\n\n{\"id\": \"b\", \"name\": \"y\"\n", nil,
			`row 3: invalid JSON: the line ends inside the object`},
		{"the first bad row fails the batch", "{\"id\": \"a\", \"name\": \"x\"}\n{\"id\": \"b\"}\n{\"id\": 3}\n", nil,
			`row 2: column "name" is required`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rows, err := ParseBatch(strings.NewReader(tc.jsonl), everyType(), 0)
			if tc.err != "" {
				var re *RowError
				if !errors.As(err, &re) || err.Error() != tc.err {
					t.Fatalf("error %v (%T), want the row error %q", err, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(rows, tc.want) {
				t.Fatalf("rows:\n got  %#v\n want %#v", rows, tc.want)
			}
		})
	}
}

func TestParseBatchLimitsItsSize(t *testing.T) {
	t.Parallel()
	line := `{"id": "a", "name": "x"}` + "\n" // 25 bytes
	if _, err := ParseBatch(strings.NewReader(line+line), everyType(), 50); err != nil {
		t.Fatalf("a batch of exactly the limit: %v", err)
	}
	_, err := ParseBatch(strings.NewReader(line+line+"\n"), everyType(), 50)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a batch over the limit: %v, want ErrTooLarge", err)
	}
	long := `{"id": "` + strings.Repeat("a", 200<<10) + `", "name": "x"}`
	if _, err := ParseBatch(strings.NewReader(long), everyType(), 100<<10); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("one line over the limit: %v, want ErrTooLarge", err)
	}
	if rows, err := ParseBatch(strings.NewReader(long), everyType(), 0); err != nil || len(rows[0]["id"].(string)) != 200<<10 {
		t.Fatalf("a line longer than the read buffer: %v", err)
	}
}

func TestInteger(t *testing.T) {
	t.Parallel()
	cases := []struct {
		lit    string
		want   int64
		reason string
	}{
		{"0", 0, ""},
		{"-0", 0, ""},
		{"17", 17, ""},
		{"-17", -17, ""},
		{"1.0", 1, ""},
		{"1.50e1", 15, ""},
		{"15E-1", 0, "must be an integer"},
		{"1500e-2", 15, ""},
		{"0.5", 0, "must be an integer"},
		{"9007199254740993", 9007199254740993, ""}, // 2^53 + 1, which a float64 would round
		{"9223372036854775807", 9223372036854775807, ""},
		{"-9223372036854775808", -9223372036854775808, ""},
		{"9223372036854775808", 0, "is out of range for a 64-bit integer"},
		{"1e19", 0, "is out of range for a 64-bit integer"},
		{"1e18", 1e18, ""},
		{"0e999999999999", 0, ""},
		{"0.0e-999999999999", 0, ""},
		{"1e999999999999", 0, "is out of range for a 64-bit integer"},
		{"1e-999999999999", 0, "must be an integer"},
		{"100000000000000000000e-2", 1e18, ""},
	}
	for _, tc := range cases {
		v, reason := integer(tc.lit)
		if reason != tc.reason || (reason == "" && v != tc.want) {
			t.Errorf("integer(%s) = %v, %q; want %d, %q", tc.lit, v, reason, tc.want, tc.reason)
		}
	}
}
