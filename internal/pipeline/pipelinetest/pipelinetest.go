// Package pipelinetest holds pipeline documents that tests of several packages deploy.
package pipelinetest

import (
	"fmt"
	"strings"
)

// IdleDoc is a pipeline whose one job, ingest (a manual source, operator ingest), gives its
// workers' capacity up as soon as its queue is empty (idle_timeout: 0).
const IdleDoc = `
name: idle
jobs:
  - name: ingest
    activation: source
    runtime: ecs_platform
    operator: ingest
    outputs: 1
    idle_timeout: 0
    source: {kind: manual}
`

// AlertsDoc is a pipeline with the buffered dataset alert_events (written by the manual source
// job scan, output 0) and two jobs that read it with different filters: pager (severity high)
// and digest (severity low or medium).
const AlertsDoc = `
name: alerts
jobs:
  - name: scan
    activation: source
    runtime: ecs_platform
    operator: scan
    outputs: 1
    source: {kind: manual}
  - name: pager
    activation: reactive
    runtime: ecs_platform
    operator: page
    outputs: 0
    inputs:
      - from: {dataset: alert_events}
        where: {severity: high}
  - name: digest
    activation: reactive
    runtime: ecs_platform
    operator: digest
    outputs: 0
    inputs:
      - from: {dataset: alert_events}
        where: {severity: [low, medium]}
publish:
  alert_events:
    from: {job: scan, output: 0}
    write_mode: buffered
    schema:
      columns:
        - {name: dedupe_key, type: string, required: true}
        - {name: severity, type: string, required: true}
        - {name: block, type: integer}
        - {name: seen_at, type: timestamp}
      unique: [dedupe_key]
    filter_fields: [severity]
`

// BuildDoc is a pipeline, chain, whose ranges job writes the published dataset ranges that totals
// reads: a change of ranges' config (BuildDocWidth) rebuilds ranges and totals beside the active
// version.
const BuildDoc = `
name: chain
jobs:
  - name: follower
    activation: source
    runtime: ecs_platform
    operator: block_follower
    outputs: 1
    source: {kind: always_on}
  - name: ranges
    activation: reactive
    runtime: ecs_platform
    operator: range_builder
    outputs: 1
    inputs:
      - from: {job: follower, output: 0}
  - name: totals
    activation: reactive
    runtime: ecs_platform
    operator: totals
    outputs: 0
    inputs:
      - from: {dataset: ranges}
publish:
  ranges:
    from: {job: ranges, output: 0}
`

// BuildDocWidth is BuildDoc with ranges' config set to {width: n}.
func BuildDocWidth(n int) string {
	return strings.Replace(BuildDoc, "    operator: range_builder\n", fmt.Sprintf("    operator: range_builder\n    config: {width: %d}\n", n), 1)
}

// Size is how large SizedDoc makes a document.
type Size struct {
	Buffered   int // buffered datasets, all of output 0 of the first job
	Columns    int // columns of each buffered dataset's schema (c0, c1, ...; unique key c0)
	Indexes    int // indexes of each schema
	KeyColumns int // columns of each index
	Outputs    int // outputs of each source job but the last
	Datasets   int // job outputs and buffered datasets in all
}

// SizedDoc is a document named name of source jobs s0, s1, ... with size.Outputs outputs each
// (the last one fewer, so that the document has size.Datasets datasets in all) and size.Buffered
// buffered datasets b0, b1, ... of the same schema. Given the limits of internal/pipeline, it is
// the largest document a deploy accepts.
func SizedDoc(name string, size Size) string {
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\njobs:\n", name)
	outputs := size.Datasets - size.Buffered
	for i := 0; outputs > 0 || i == 0; i++ {
		n := min(outputs, size.Outputs)
		outputs -= n
		fmt.Fprintf(&b, "  - {name: s%d, activation: source, runtime: ecs_platform, operator: op, outputs: %d, source: {kind: manual}}\n", i, n)
	}
	if size.Buffered == 0 {
		return b.String()
	}
	var schema strings.Builder
	schema.WriteString("{columns: [")
	for i := range size.Columns {
		if i > 0 {
			schema.WriteString(", ")
		}
		fmt.Fprintf(&schema, "{name: c%d, type: string}", i)
	}
	schema.WriteString("], unique: [c0], indexes: [")
	for i := range size.Indexes {
		if i > 0 {
			schema.WriteString(", ")
		}
		schema.WriteString("[")
		for j := range size.KeyColumns {
			if j > 0 {
				schema.WriteString(", ")
			}
			// Index i starts at column i: every index is on other columns.
			fmt.Fprintf(&schema, "c%d", (i+j)%size.Columns)
		}
		schema.WriteString("]")
	}
	schema.WriteString("]}")
	b.WriteString("publish:\n")
	for i := range size.Buffered {
		fmt.Fprintf(&b, "  b%d: {from: {job: s0, output: 0}, write_mode: buffered, schema: %s}\n", i, schema.String())
	}
	return b.String()
}
