package pipeline

import (
	"encoding/json"
	"slices"
	"testing"
)

// alertsPublish publishes src's output 1 as alert_events, filterable on chain_id and level.
const alertsPublish = `publish: {alert_events: {from: {job: src, output: 1}, filter_fields: [chain_id, level],` +
	` schema: {columns: [{name: chain_id, type: integer}, {name: level, type: string}]}}}`

// typedPublish publishes src's output 1 as t, with a column of each type (named by aliases), and
// src's output 0 as u, with a filter field but no schema.
const typedPublish = `publish: {t: {from: {job: src, output: 1}, schema: {columns: [` +
	`{name: n, type: bigint}, {name: x, type: double}, {name: s, type: text}, {name: b, type: bool},` +
	` {name: at, type: timestamptz}, {name: j, type: jsonb}]}}, u: {from: {job: src, output: 0}, filter_fields: [region]}}`

// whereOn is a document whose job r reads dataset t with the given where.
func whereOn(where string) string {
	return doc(jobs(srcJob, readerOf("r", `[{from: {dataset: t}, where: `+where+`}]`, "")), typedPublish)
}

func TestInputRules(t *testing.T) {
	t.Parallel()
	runRules(t, []ruleCase{
		{"inputs must be a list", doc(jobs(srcJob, readerOf("r", `{from: {job: src}}`, ""))),
			[]string{`jobs[1].inputs: must be a list`}},
		{"an input must be a map", doc(jobs(srcJob, readerOf("r", `[src]`, ""))),
			[]string{`jobs[1].inputs[0]: must be a map`}},
		{"an unknown key", doc(jobs(srcJob, readerOf("r", `[{from: {job: src, output: 0}, filter: x}]`, ""))),
			[]string{`jobs[1].inputs[0]: unknown key "filter"`}},
		{"from is required", doc(jobs(srcJob, readerOf("r", `[{where: {a: 1}}]`, ""))),
			[]string{`jobs[1].inputs[0].from: required`}},
		{"from.job must exist", doc(jobs(srcJob, readerOf("r", `[{from: {job: block_range_aggregate, output: 0}}]`, ""))),
			[]string{`jobs[1].inputs[0].from.job: unknown job "block_range_aggregate"`}},
		{"a job does not read itself", doc(jobs(srcJob, readerOf("r", `[{from: {job: r, output: 0}}]`, ""))),
			[]string{`jobs[1].inputs[0].from.job: a job cannot read its own output`}},
		{"from.output is required with job", doc(jobs(srcJob, readerOf("r", `[{from: {job: src}}]`, ""))),
			[]string{`jobs[1].inputs[0].from.output: required`}},
		{"from.output must be an integer", doc(jobs(srcJob, readerOf("r", `[{from: {job: src, output: first}}]`, ""))),
			[]string{`jobs[1].inputs[0].from.output: must be an integer`}},
		{"from.output is in range", doc(jobs(srcJob, readerOf("r", `[{from: {job: src, output: 2}}]`, ""))),
			[]string{`jobs[1].inputs[0].from.output: output 2 is out of range: job "src" has 2 outputs`}},
		{"a job without outputs has none to read", doc(jobs(
			`{name: s0, activation: source, runtime: lambda, operator: op, outputs: 0, source: {kind: manual}}`,
			readerOf("r", `[{from: {job: s0, output: 0}}]`, ""))),
			[]string{`jobs[1].inputs[0].from.output: output 0 is out of range: job "s0" has no outputs`}},
		{"from names a job or a dataset, not both", doc(jobs(srcJob, readerOf("r", `[{from: {job: src, output: 0, dataset: x}}]`, ""))),
			[]string{`jobs[1].inputs[0].from: must name a job (with its output) or a dataset, not both`}},
		{"from names a job or a dataset", doc(jobs(srcJob, readerOf("r", `[{from: {output: 0}}]`, ""))),
			[]string{`jobs[1].inputs[0].from: must name a job (with its output) or a dataset`}},
		{"from.output goes only with job", doc(jobs(srcJob, readerOf("r", `[{from: {dataset: prices, output: 0}}]`, ""))),
			[]string{`jobs[1].inputs[0].from.output: only allowed with job`}},
		{"from.dataset must match the pattern", doc(jobs(srcJob, readerOf("r", `[{from: {dataset: Prices}}]`, ""))),
			[]string{`jobs[1].inputs[0].from.dataset: "Prices" does not match ` + namePat}},
		{"from unknown key", doc(jobs(srcJob, readerOf("r", `[{from: {job: src, output: 0, version: 2}}]`, ""))),
			[]string{`jobs[1].inputs[0].from: unknown key "version"`}},
	})
}

func TestWhereRules(t *testing.T) {
	t.Parallel()
	runRules(t, []ruleCase{
		{"SQL strings are refused", doc(jobs(srcJob, readerOf("r", `[{from: {dataset: alert_events}, where: "severity = 'critical'"}]`, "")), alertsPublish),
			[]string{`jobs[1].inputs[0].where: where must be a map of field: value; SQL strings are not accepted`}},
		{"where must be a map", whereOn(`[n, 1]`),
			[]string{`jobs[1].inputs[0].where: where must be a map of field: value`}},
		{"a nested map is refused", whereOn(`{n: {gt: 5}}`),
			[]string{`jobs[1].inputs[0].where.n: must be a string, number or boolean, or a non-empty list of them`}},
		{"null is refused", whereOn(`{n: null}`),
			[]string{`jobs[1].inputs[0].where.n: must be a string, number or boolean, or a non-empty list of them`}},
		{"an empty list is refused", whereOn(`{n: []}`),
			[]string{`jobs[1].inputs[0].where.n: must not be an empty list`}},
		{"a list holds scalars", whereOn(`{n: [1, [2, 3]]}`),
			[]string{`jobs[1].inputs[0].where.n[1]: must be a string, number or boolean`}},
		{"keys must be filter fields of a dataset of the document",
			doc(jobs(srcJob, readerOf("r", `[{from: {dataset: alert_events}, where: {severity: critical}}]`, "")), alertsPublish),
			[]string{`jobs[1].inputs[0].where.severity: "severity" is not a filter field of dataset "alert_events" (allowed: chain_id, level)`}},
		{"keys must be filter fields of the dataset a job output is published as",
			doc(jobs(srcJob, readerOf("r", `[{from: {job: src, output: 1}, where: {severity: critical}}]`, "")), alertsPublish),
			[]string{`jobs[1].inputs[0].where.severity: "severity" is not a filter field of dataset "alert_events" (allowed: chain_id, level)`}},
		{"an unpublished output has no filter fields",
			doc(jobs(srcJob, readerOf("r", `[{from: {job: src, output: 0}, where: {chain_id: 1}}]`, "")), alertsPublish),
			[]string{`jobs[1].inputs[0].where.chain_id: "chain_id" is not a filter field: the input's output is not published, so it has none`}},
		{"a dataset without filter fields or schema has none",
			doc(jobs(srcJob, readerOf("r", `[{from: {dataset: raw}, where: {a: 1}}]`, "")), `publish: {raw: {from: {job: src, output: 1}}}`),
			[]string{`jobs[1].inputs[0].where.a: "a" is not a filter field of dataset "raw" (it has none)`}},
		{"an integer column takes integers, not strings", whereOn(`{n: "1"}`),
			[]string{`jobs[1].inputs[0].where.n: must be an integer: column "n" is integer`}},
		{"an integer column takes integers, not fractions", whereOn(`{n: [1, 1.5]}`),
			[]string{`jobs[1].inputs[0].where.n[1]: must be an integer: column "n" is integer`}},
		{"a number column takes numbers", whereOn(`{x: "1.5"}`),
			[]string{`jobs[1].inputs[0].where.x: must be a number: column "x" is number`}},
		{"a string column takes strings", whereOn(`{s: 5}`),
			[]string{`jobs[1].inputs[0].where.s: must be a string: column "s" is string`}},
		{"a boolean column takes booleans", whereOn(`{b: "true"}`),
			[]string{`jobs[1].inputs[0].where.b: must be a boolean: column "b" is boolean`}},
		{"a timestamp column takes RFC 3339 text", whereOn(`{at: yesterday}`),
			[]string{`jobs[1].inputs[0].where.at: must be an RFC 3339 timestamp: column "at" is timestamp`}},
		{"values of the right types pass",
			whereOn(`{n: [1, 2], x: 1.5, s: eth, b: false, at: 2024-05-01T12:00:00Z, j: [1, a, true]}`), nil},
		{"a filter field without a column takes any scalar",
			doc(jobs(srcJob, readerOf("r", `[{from: {dataset: u}, where: {region: [eu, 1, true]}}]`, "")), typedPublish), nil},
		{"another DAG's dataset is left to the caller",
			doc(jobs(srcJob, readerOf("r", `[{from: {dataset: token_metadata}, where: {anything: 1}}]`, ""))), nil},
	})
}

func TestCheckWhere(t *testing.T) {
	t.Parallel()
	alerts := Allowlist{Dataset: "alert_events", Fields: map[string]string{"chain_id": TypeInteger, "level": ""}}
	tests := []struct {
		name  string
		where map[string]any
		allow Allowlist
		want  []string
	}{
		{"allowed keys and types", map[string]any{"chain_id": json.Number("1"), "level": []any{"high", "critical"}}, alerts, nil},
		{"Go numbers count as numbers", map[string]any{"chain_id": 1.0, "level": 3}, alerts, nil},
		{"a key not allowed", map[string]any{"severity": "critical"}, alerts,
			[]string{`jobs[4].inputs[0].where.severity: "severity" is not a filter field of dataset "alert_events" (allowed: chain_id, level)`}},
		{"a wrong type", map[string]any{"chain_id": "one"}, alerts,
			[]string{`jobs[4].inputs[0].where.chain_id: must be an integer: column "chain_id" is integer`}},
		{"keys in sorted order", map[string]any{"zeta": 1, "alpha": map[string]any{}}, alerts, []string{
			`jobs[4].inputs[0].where.alpha: must be a string, number or boolean, or a non-empty list of them`,
			`jobs[4].inputs[0].where.zeta: "zeta" is not a filter field of dataset "alert_events" (allowed: chain_id, level)`,
		}},
		{"an empty list", map[string]any{"level": []any{}}, alerts,
			[]string{`jobs[4].inputs[0].where.level: must not be an empty list`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := CheckWhere("jobs[4].inputs[0].where", tt.where, tt.allow).Strings()
			if !slices.Equal(got, tt.want) {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestCheckExternal(t *testing.T) {
	t.Parallel()
	text := doc(jobs(srcJob,
		readerOf("a", `[{from: {dataset: token_metadata}, where: {symbol: ETH}}]`, ""),
		readerOf("b", `[{from: {dataset: token_metadata}, where: {decimals: "18"}}, {from: {dataset: gone}}]`, ""),
		readerOf("c", `[{from: {dataset: own}}]`, "")),
		`publish: {own: {from: {job: src, output: 0}}}`)
	d, ps := Parse([]byte(text), "")
	if len(ps) > 0 {
		t.Fatalf("Parse: %v", ps)
	}
	if got, want := d.ExternalDatasets(), []string{"gone", "token_metadata"}; !slices.Equal(got, want) {
		t.Fatalf("ExternalDatasets = %q, want %q", got, want)
	}
	lookup := func(name string) (Allowlist, bool) {
		if name == "token_metadata" {
			return Allowlist{Dataset: name, Fields: map[string]string{"symbol": TypeString, "decimals": TypeInteger}}, true
		}
		return Allowlist{}, false
	}
	got := d.CheckExternal(lookup).Strings()
	want := []string{
		`jobs[2].inputs[0].where.decimals: must be an integer: column "decimals" is integer`,
		`jobs[2].inputs[1].from.dataset: unknown dataset "gone"`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("CheckExternal:\n got  %q\n want %q", got, want)
	}
}
