package pipeline

import (
	"slices"
	"strings"
	"testing"
)

// Documents for the rule tables are written in YAML flow style, one job a line.

// srcJob is jobs[0] of most cases: a manual source job with two outputs.
const srcJob = `{name: src, activation: source, runtime: lambda, operator: op, outputs: 2, source: {kind: manual}}`

// source is a valid source job named name (outputs 1, manual) with extra keys appended.
func source(name, extra string) string {
	return `{name: ` + name + `, activation: source, runtime: lambda, operator: op, outputs: 1` + extra + `}`
}

// reader is a valid reactive job named r, reading src's output 0, with extra keys appended.
func reader(extra string) string {
	return `{name: r, activation: reactive, runtime: lambda, operator: op, outputs: 1, inputs: [{from: {job: src, output: 0}}]` + extra + `}`
}

// readerOf is a reactive job named name with the given inputs (a flow list) and extra keys.
func readerOf(name, inputs, extra string) string {
	return `{name: ` + name + `, activation: reactive, runtime: lambda, operator: op, outputs: 1, inputs: ` + inputs + extra + `}`
}

// doc is a document named d holding jobs, then any further top-level lines.
func doc(jobs []string, more ...string) string {
	var b strings.Builder
	b.WriteString("name: d\njobs:\n")
	for _, j := range jobs {
		b.WriteString("  - " + j + "\n")
	}
	for _, m := range more {
		b.WriteString(m + "\n")
	}
	return b.String()
}

func jobs(js ...string) []string { return js }

// messages renders problems as "path: message", without lines.
func messages(ps Problems) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = Problem{Path: p.Path, Message: p.Message}.String()
	}
	return out
}

type ruleCase struct {
	name string
	doc  string
	want []string // "path: message", in order
}

// runRules parses each case's document as YAML and compares its problems, all of them, in order.
func runRules(t *testing.T, cases []ruleCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, ps := Parse([]byte(tc.doc), "application/yaml")
			got := messages(ps)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("problems:\n got  %q\n want %q\ndocument:\n%s", got, tc.want, tc.doc)
			}
			if d != nil && len(tc.want) > 0 {
				t.Fatalf("a document with problems was returned")
			}
		})
	}
}
