// Package pipelinetest holds pipeline documents that tests of several packages deploy.
package pipelinetest

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
