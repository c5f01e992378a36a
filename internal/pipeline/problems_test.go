package pipeline

import (
	"reflect"
	"testing"
)

// One document with many problems: all are listed, in document order, each with its line.
func TestParseListsEveryProblem(t *testing.T) {
	t.Parallel()
	const text = `name: Bad Name
defaults:
  priority: urgent
jobs:
  - name: follower
    activation: source
    runtime: k8s
    operator: eth.follow
    outputs: 1
    source: {kind: cron, schedule: "rate(5 fortnights)"}
  - name: decoder
    activation: reactive
    runtime: lambda
    operator: eth.decode
    outputs: 1
    retries: 3
    inputs:
      - from: {job: follower, output: 1}
        where: "level = 'high'"
      - from: {job: block_range_aggregate, output: 0}
  - name: decoder
    activation: reactive
    runtime: lambda
    outputs: one
    inputs:
      - from: {dataset: alerts}
        where: {severity: critical}
publish:
  alerts:
    from: {job: decoder, output: 0}
    write_mode: buffered
    schema:
      columns:
        - {name: level, type: string}
        - {name: at, type: datetime}
    filter_fields: [level]
`
	want := Problems{
		{"name", `"Bad Name" does not match ^[a-z][a-z0-9_]{0,127}$`, 1},
		{"defaults.priority", "must be low, normal, high or an integer from -1000 to 1000", 3},
		{"jobs[0].runtime", `must be lambda, ecs_platform, dispatcher or ecs_udf, not "k8s"`, 7},
		{"jobs[0].source.schedule", `bad schedule "rate(5 fortnights)": unknown unit "fortnights": must be minute(s), hour(s) or day(s)`, 10},
		{"jobs[1]", `unknown key "retries"`, 16},
		{"jobs[1].inputs[0].from.output", `output 1 is out of range: job "follower" has 1 output`, 18},
		{"jobs[1].inputs[0].where", "where must be a map of field: value; SQL strings are not accepted", 19},
		{"jobs[1].inputs[1].from.job", `unknown job "block_range_aggregate"`, 20},
		{"jobs[2].name", `duplicate job name "decoder"`, 21},
		{"jobs[2].operator", "required", 21},
		{"jobs[2].outputs", "must be an integer", 24},
		{"jobs[2].inputs[0].where.severity", `"severity" is not a filter field of dataset "alerts" (allowed: at, level)`, 27},
		{"publish.alerts.schema.columns[1].type", `unknown type "datetime": must be string, integer, number, boolean, timestamp or json`, 35},
		{"publish.alerts.schema.unique", "required when write_mode is buffered", 32},
	}
	d, got := Parse([]byte(text), "")
	if d != nil {
		t.Fatal("a document with problems was returned")
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("problems:\n%s\nwant:\n%s", render(got), render(want))
	}
}

func render(ps Problems) string {
	s := ""
	for _, p := range ps {
		s += "  " + p.String() + "\n"
	}
	return s
}

func TestJSONProblemsCarryLines(t *testing.T) {
	t.Parallel()
	const text = `{
  "name": "d",
  "jobs": [
    {
      "name": "a",
      "activation": "source",
      "runtime": "lambda",
      "operator": "op",
      "outputs": 1.5,
      "source": {"kind": "manual"},
      "retries": 3
    }
  ]
}`
	want := Problems{
		{"jobs[0]", `unknown key "retries"`, 11},
		{"jobs[0].outputs", "must be an integer", 9},
	}
	if _, got := Parse([]byte(text), "application/json"); !reflect.DeepEqual(got, want) {
		t.Fatalf("problems:\n%s\nwant:\n%s", render(got), render(want))
	}
}

func TestIntegralNumbersAreIntegers(t *testing.T) {
	t.Parallel()
	d, ps := Parse([]byte(doc(jobs(`{name: a, activation: source, runtime: lambda, operator: op, outputs: 2.0, source: {kind: manual}, priority: -5}`))), "")
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	if j := d.Jobs[0]; j.Outputs != 2 || j.Priority != -5 {
		t.Fatalf("outputs %d, priority %d", j.Outputs, j.Priority)
	}
}
