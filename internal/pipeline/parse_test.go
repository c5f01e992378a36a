package pipeline

import (
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func parseValid(t *testing.T) *Document {
	t.Helper()
	d, ps := Parse(readFile(t, "testdata/valid.yaml"), "application/yaml")
	if len(ps) > 0 {
		t.Fatalf("Parse(valid.yaml): %s", ps)
	}
	return d
}

func TestParseValidDocumentAppliesDefaults(t *testing.T) {
	t.Parallel()
	d := parseValid(t)
	if d.Name != "eth_mainnet" || len(d.Jobs) != 9 || len(d.Publish) != 4 {
		t.Fatalf("name %q, %d jobs, %d publish entries", d.Name, len(d.Jobs), len(d.Publish))
	}
	minutes := func(n int) Duration { return Duration(time.Duration(n) * time.Minute) }
	tests := []struct {
		job                   string
		queue, execution      string
		priority, maxAttempts int
		heartbeat, queueDepth int
		queueAge              Duration
		idle                  string // "never" for nil
		backpressure, config  string
	}{
		{"block_follower", "eth.block_follower", "", 0, 5, 60, 0, 0, "10m0s", "", `{"chain_id":1,"confirmations":12}`},
		{"block_decoder", "eth.decode_blocks", PerUpdate, 100, 5, 60, 10000, minutes(15), "never", "pause", `{}`},
		{"block_range_aggregate", "aggregates", PerPartition, 0, 10, 60, 10000, minutes(15), "never", "pause", `{}`},
		{"price_snapshot", "prices.snapshot", "", -100, 5, 60, 0, 0, "never", "", `{}`},
		{"pager", "notify.pager", PerUpdate, 0, 5, 60, 10000, minutes(15), "never", "pause", `{}`},
	}
	for _, tt := range tests {
		j := d.Job(tt.job)
		if j == nil {
			t.Fatalf("no job %q", tt.job)
		}
		got := []any{j.Queue, j.ExecutionStrategy, j.Priority, j.MaxAttempts, j.HeartbeatTimeoutSeconds,
			j.MaxQueueDepth, j.MaxQueueAge, idleText(j.IdleTimeout), j.BackpressureMode, string(j.Config)}
		want := []any{tt.queue, tt.execution, tt.priority, tt.maxAttempts, tt.heartbeat,
			tt.queueDepth, tt.queueAge, tt.idle, tt.backpressure, tt.config}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("job %s: got %v, want %v", tt.job, got, want)
		}
	}
	if p := d.Defaults.Priority; p == nil || *p != PriorityNormal {
		t.Errorf("defaults.priority = %v, want normal (0)", p)
	}
}

func TestParseValidDocumentShape(t *testing.T) {
	t.Parallel()
	d := parseValid(t)

	follower := d.Job("block_follower")
	if follower.Source == nil || follower.Source.Kind != SourceAlwaysOn || follower.Inputs != nil ||
		follower.Bootstrap == nil || follower.Bootstrap.ResetOutputs || !slices.Equal(follower.Secrets, []string{"eth_mainnet_rpc_url"}) {
		t.Errorf("block_follower = %+v", follower)
	}
	if s := d.Job("price_snapshot").Source; s == nil || s.Kind != SourceCron || s.Schedule != "rate(5 minutes)" {
		t.Errorf("price_snapshot source = %+v", s)
	}
	if s := d.Job("reorg_hook").Source; s == nil || s.WebhookPath != "/hooks/eth/reorg" {
		t.Errorf("reorg_hook source = %+v", s)
	}
	if u := d.Job("whale_alerts").UDF; u == nil || *u != (UDF{BundleID: "bndl_7f3a", Entrypoint: "handler.run"}) {
		t.Errorf("whale_alerts udf = %+v", u)
	}
	if d.Job("nope") != nil {
		t.Errorf("Job(nope) found a job")
	}

	whale := d.Job("whale_alerts").Inputs[0]
	wantWhere := map[string]any{"level": []any{"high", "critical"}, "chain_id": json.Number("1")}
	if whale.From != (From{Dataset: "alert_events"}) || !reflect.DeepEqual(whale.Where, wantWhere) {
		t.Errorf("whale_alerts input = %+v", whale)
	}
	agg := d.Job("block_range_aggregate").Inputs[0]
	if agg.From.Job != "block_decoder" || agg.From.Output == nil || *agg.From.Output != 1 {
		t.Errorf("block_range_aggregate input = %+v", agg)
	}

	blocks := d.Publish["decoded_blocks"]
	wantCols := []Column{
		{Name: "chain_id", Type: TypeInteger, Required: true},
		{Name: "block_number", Type: TypeInteger, Required: true},
		{Name: "block_time", Type: TypeTimestamp},
		{Name: "miner", Type: TypeString},
	}
	if blocks.Dataset != "decoded_blocks" || blocks.Storage != StoragePostgres || blocks.WriteMode != WriteDirect ||
		blocks.Schema == nil || !slices.Equal(blocks.Schema.Columns, wantCols) {
		t.Errorf("decoded_blocks = %+v", blocks)
	}
	alerts := d.Publish["alert_events"]
	if alerts.WriteMode != WriteBuffered || !slices.Equal(alerts.Schema.Unique, []string{"dedupe_key"}) ||
		len(alerts.Schema.Indexes) != 1 || alerts.Schema.Columns[3].Type != TypeJSON {
		t.Errorf("alert_events = %+v", alerts)
	}
	wantAllow := Allowlist{Dataset: "alert_events", Fields: map[string]string{
		"dedupe_key": TypeString, "chain_id": TypeInteger, "level": TypeString, "payload": TypeJSON}}
	if got := alerts.Allowlist(); !reflect.DeepEqual(got, wantAllow) {
		t.Errorf("alert_events allowlist = %+v", got)
	}
	if got := d.Publish["decoded_transfers"].Allowlist(); !reflect.DeepEqual(got.Fields, map[string]string{"chain_id": "", "token": ""}) {
		t.Errorf("decoded_transfers allowlist = %+v", got)
	}

	if p := d.PublishedAs("block_decoder", 0); p == nil || p.Dataset != "decoded_blocks" {
		t.Errorf("PublishedAs(block_decoder, 0) = %+v", p)
	}
	if p := d.PublishedAs("alert_scanner", 0); p != nil {
		t.Errorf("PublishedAs(alert_scanner, 0) = %+v, want nil: alert_events is buffered", p)
	}
	if p := d.PublishedAs("block_follower", 0); p != nil {
		t.Errorf("PublishedAs(block_follower, 0) = %+v, want nil", p)
	}
	if got := d.ExternalDatasets(); !slices.Equal(got, []string{"token_metadata"}) {
		t.Errorf("ExternalDatasets = %q", got)
	}
	if len(d.Version) != 16 || strings.Trim(d.Version, "0123456789abcdef") != "" {
		t.Errorf("Version = %q, want 16 hex digits", d.Version)
	}
}

func TestVersionDependsOnContentOnly(t *testing.T) {
	t.Parallel()
	const base = "name: d\njobs:\n  - {name: a, activation: source, runtime: lambda, operator: op, outputs: 1, source: {kind: manual}, config: {x: 1.0, y: [1, 2]}}\n"
	want, ps := Parse([]byte(base), "")
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	same := []struct{ name, doc, contentType string }{
		{"as JSON", `{"jobs": [{"config": {"y": [1, 2], "x": 1}, "name": "a", "activation": "source", "runtime": "lambda",
			"operator": "op", "outputs": 1, "source": {"kind": "manual"}}], "name": "d"}`, "application/json"},
		{"as JSON read as YAML", `{"name": "d", "jobs": [{"name": "a", "activation": "source", "runtime": "lambda",
			"operator": "op", "outputs": 1, "source": {"kind": "manual"}, "config": {"x": 1, "y": [1, 2]}}]}`, ""},
		{"keys reordered, comments, block style", `# the DAG
jobs:
  - outputs: 1      # one output
    operator: op
    name: a
    config:
      y:
        - 1
        - 2
      x: 1.00
    source:
      kind: manual
    activation: source
    runtime: lambda
name: d
`, "text/yaml"},
		{"numbers spelled differently", strings.Replace(base, "x: 1.0", "x: 1e0", 1), ""},
	}
	for _, tt := range same {
		d, ps := Parse([]byte(tt.doc), tt.contentType)
		if len(ps) > 0 {
			t.Fatalf("%s: %s", tt.name, ps)
		}
		if d.Version != want.Version {
			t.Errorf("%s: version %s, want %s", tt.name, d.Version, want.Version)
		}
	}
	changed := []struct{ name, doc string }{
		{"a value", strings.Replace(base, "x: 1.0", "x: 2", 1)},
		{"a list's order", strings.Replace(base, "[1, 2]", "[2, 1]", 1)},
		{"a default made explicit", strings.Replace(base, "outputs: 1,", "outputs: 1, queue: op,", 1)},
	}
	for _, tt := range changed {
		d, ps := Parse([]byte(tt.doc), "")
		if len(ps) > 0 {
			t.Fatalf("%s: %s", tt.name, ps)
		}
		if d.Version == want.Version {
			t.Errorf("%s: the version did not change", tt.name)
		}
	}
}

func TestVersionOfValidYAMLAndJSON(t *testing.T) {
	t.Parallel()
	y := parseValid(t)
	j, ps := Parse(readFile(t, "testdata/valid.json"), "application/json")
	if len(ps) > 0 {
		t.Fatalf("Parse(valid.json): %s", ps)
	}
	if j.Version != y.Version {
		t.Errorf("JSON version %s, YAML version %s", j.Version, y.Version)
	}
	y.Version, j.Version = "", ""
	if !reflect.DeepEqual(j, y) {
		t.Errorf("the JSON and YAML documents differ")
	}
}

func TestMarshalledDocumentParsesBack(t *testing.T) {
	t.Parallel()
	d := parseValid(t)
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	again, ps := Parse(b, "application/json")
	if len(ps) > 0 {
		t.Fatalf("Parse(marshalled): %s\n%s", ps, b)
	}
	d.Version, again.Version = "", ""
	if !reflect.DeepEqual(again, d) {
		t.Errorf("round trip changed the document:\n%s", b)
	}
}

func TestDurationText(t *testing.T) {
	t.Parallel()
	var got struct{ D Duration }
	if err := json.Unmarshal([]byte(`{"D": "1h30m"}`), &got); err != nil || got.D != Duration(90*time.Minute) {
		t.Fatalf("Unmarshal: %v, %v", got.D, err)
	}
	if b, _ := json.Marshal(got); string(b) != `{"D":"1h30m0s"}` {
		t.Errorf("Marshal = %s", b)
	}
	if err := json.Unmarshal([]byte(`{"D": "soon"}`), &got); err == nil {
		t.Errorf("Unmarshal accepted %q", "soon")
	}
}

func TestParseReadsEachSyntax(t *testing.T) {
	t.Parallel()
	const jsonDoc = `{"name": "d", "jobs": [{"name": "a", "activation": "source", "runtime": "lambda", "operator": "op", "outputs": 0, "source": {"kind": "manual"}}]}`
	for _, ct := range []string{"application/json", "application/json; charset=utf-8", "application/vnd.baton+json",
		"application/yaml", "application/x-yaml", "text/yaml", ""} {
		if _, ps := Parse([]byte(jsonDoc), ct); len(ps) > 0 {
			t.Errorf("content type %q: %s", ct, ps)
		}
	}
	if _, ps := Parse([]byte("name: d\n"), "application/json"); len(ps) != 1 || !strings.HasPrefix(ps[0].Message, "invalid JSON") {
		t.Errorf("YAML sent as JSON: %v", ps)
	}
}

func TestParseSyntaxProblems(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, doc, contentType string
		want                   []Problem
	}{
		{"empty YAML", "# nothing\n", "", []Problem{{Message: "document is empty"}}},
		{"empty JSON", " \n", "application/json", []Problem{{Message: "document is empty"}}},
		{"bad YAML", "name: d\n\tjobs: x\n", "", []Problem{{Message: "invalid YAML: found a tab character that violates indentation", Line: 2}}},
		{"bad JSON", "{\n  \"name\": \"d\",\n  \"jobs\": [}\n}", "application/json",
			[]Problem{{Message: "invalid JSON at line 3, column 12: invalid character '}' looking for beginning of value", Line: 3}}},
		{"truncated JSON", `{"name": "d"`, "application/json", []Problem{{Message: "invalid JSON: unexpected end of input"}}},
		{"data after JSON", `{"name": "d"} {}`, "application/json",
			[]Problem{{Message: "invalid JSON: unexpected data after the document", Line: 1}}},
		{"two YAML documents", "name: d\n---\nname: e\n", "", []Problem{{Message: "only one YAML document is allowed", Line: 2}}},
		{"duplicate YAML keys", "name: d\njobs:\n  - name: a\n    outputs: 0\n    name: b\n", "",
			[]Problem{{Path: "jobs[0].name", Message: `duplicate key "name" (first at line 3)`, Line: 5},
				{Path: "jobs[0].activation", Message: "required", Line: 3},
				{Path: "jobs[0].runtime", Message: "required", Line: 3},
				{Path: "jobs[0].operator", Message: "required", Line: 3}}},
		{"duplicate JSON keys", "{\"name\": \"d\",\n \"name\": \"e\", \"jobs\": []}", "application/json",
			[]Problem{{Path: "name", Message: `duplicate key "name" (first at line 1)`, Line: 2},
				{Path: "jobs", Message: "must list at least one job", Line: 2}}},
		{"unsupported YAML tag", "name: !secret d\njobs: []\n", "",
			[]Problem{{Path: "name", Message: "unsupported YAML tag !secret", Line: 1},
				{Path: "jobs", Message: "must list at least one job", Line: 2}}},
		{"infinite number", "name: d\njobs: []\ndefaults: {max_attempts: .inf}\n", "",
			[]Problem{{Path: "defaults.max_attempts", Message: `must be a finite number, not ".inf"`, Line: 3},
				{Path: "jobs", Message: "must list at least one job", Line: 2}}},
		{"too large", strings.Repeat("#", MaxDocumentSize+1), "",
			[]Problem{{Message: "document is larger than 1048576 bytes"}}},
		{"too deep", "name: d\njobs: []\nx: " + strings.Repeat("[", 70) + strings.Repeat("]", 70) + "\n", "",
			[]Problem{{Path: "x" + strings.Repeat("[0]", 63), Message: "nested too deeply (more than 64 levels)", Line: 3}}},
		{"too deep JSON", `{"name": "d", "x": ` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + "}", "application/json",
			[]Problem{{Path: "x" + strings.Repeat("[0]", 63), Message: "nested too deeply (more than 64 levels)", Line: 1}}},
		{"a JSON number out of range", `{"name": "d", "jobs": [], "defaults": {"max_attempts": 1e999}}`, "application/json",
			[]Problem{{Path: "defaults.max_attempts", Message: "number 1e999 is out of range", Line: 1},
				{Path: "jobs", Message: "must list at least one job", Line: 1}}},
		{"too many aliases", `name: d
jobs: []
a: &a [x, x, x, x, x, x, x, x, x, x]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]
`, "", []Problem{{Message: "document is too large: more than 200000 values once its aliases are expanded"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d, ps := Parse([]byte(tt.doc), tt.contentType)
			if d != nil || !reflect.DeepEqual(ps, Problems(tt.want)) {
				t.Fatalf("problems:\n got  %#v\n want %#v", ps, tt.want)
			}
		})
	}
}

func TestYAMLAnchorsAndMergeKeys(t *testing.T) {
	t.Parallel()
	const text = `name: d
x-common: &common {activation: source, runtime: lambda, operator: op, outputs: 1, source: {kind: manual}}
jobs:
  - {<<: *common, name: a}
  - {<<: *common, name: b, outputs: 2}
`
	_, ps := Parse([]byte(text), "")
	// The anchor's home is an unknown key, as any other; the merges themselves work.
	if got := messages(ps); !slices.Equal(got, []string{`unknown key "x-common"`}) {
		t.Fatalf("problems: %q", got)
	}
	const valid = `name: d
jobs:
  - &a {name: a, activation: source, runtime: lambda, operator: op, outputs: 1, source: {kind: manual}}
  - {<<: *a, name: b, outputs: 2}
`
	d, ps := Parse([]byte(valid), "")
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	if b := d.Job("b"); b == nil || b.Outputs != 2 || b.Operator != "op" || b.Source.Kind != SourceManual {
		t.Fatalf("merged job b = %+v", b)
	}
}

func TestProblemsRender(t *testing.T) {
	t.Parallel()
	ps := Problems{
		{Path: "jobs[0].operator", Message: "required", Line: 4},
		{Message: "document is empty"},
		{Path: "name", Message: "required"},
	}
	want := []string{"jobs[0].operator: required (line 4)", "document is empty", "name: required"}
	if got := ps.Strings(); !slices.Equal(got, want) {
		t.Errorf("Strings = %q", got)
	}
	if got := ps.Error(); got != strings.Join(want, "; ") {
		t.Errorf("Error = %q", got)
	}
	var err error = ps
	if err.Error() == "" {
		t.Errorf("Problems is an error")
	}
}

func TestPathsOfOddKeys(t *testing.T) {
	t.Parallel()
	_, ps := Parse([]byte("name: d\njobs: []\n\"a.b\": 1\n"), "")
	if got := messages(ps); !slices.Equal(got, []string{`unknown key "a.b"`, `jobs: must list at least one job`}) {
		t.Errorf("problems: %q", got)
	}
	d := doc(jobs(srcJob, readerOf("r", `[{from: {dataset: t}, where: {"a.b": 1}}]`, "")), `publish: {t: {from: {job: src, output: 0}}}`)
	_, ps = Parse([]byte(d), "")
	if got := messages(ps); !slices.Equal(got, []string{`jobs[1].inputs[0].where["a.b"]: "a.b" is not a filter field of dataset "t" (it has none)`}) {
		t.Errorf("problems: %q", got)
	}
}

// idleText is an idle_timeout as a test writes it: "never" for nil.
func idleText(d *Duration) string {
	if d == nil {
		return "never"
	}
	return d.String()
}

// TestIdleTimeoutValues: 0 in every spelling is a batch worker's 0, never and an absent field are
// nil, a duration is itself.
func TestIdleTimeoutValues(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ value, want string }{
		{"0", "0s"}, {`"0"`, "0s"}, {"0s", "0s"}, {"never", "never"}, {"5m", "5m0s"}, {"1h30m", "1h30m0s"}, {"", "never"},
	} {
		extra := `, source: {kind: manual}`
		if tt.value != "" {
			extra += `, idle_timeout: ` + tt.value
		}
		d, ps := Parse([]byte(doc(jobs(source("a", extra)))), "")
		if len(ps) > 0 {
			t.Errorf("idle_timeout %s: %v", tt.value, ps)
			continue
		}
		if got := idleText(d.Jobs[0].IdleTimeout); got != tt.want {
			t.Errorf("idle_timeout %s = %s, want %s", tt.value, got, tt.want)
		}
	}
}
