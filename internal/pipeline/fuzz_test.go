package pipeline

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/baton-dev/baton/internal/pipeline/pipelinetest"
)

// FuzzParse parses fuzzed DAG documents as YAML or as JSON. Parse must not panic and must return
// either a document or its problems, each with a message. A document it returns must have a
// version, parse the same way twice, have cron schedules that ParseSchedule reads, survive
// CheckExternal, and parse back, equal, from its own JSON encoding; read as JSON, it must read
// the same as YAML too, where YAML reads that JSON text as JSON (yamlReadsAsJSON).
func FuzzParse(f *testing.F) {
	for _, name := range []string{
		filepath.Join("..", "..", "examples", "pipeline", "pipeline.yaml"),
		filepath.Join("testdata", "valid.yaml"),
		filepath.Join("testdata", "valid.json"),
	} {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, strings.HasSuffix(name, ".json"))
	}
	f.Add([]byte(pipelinetest.AlertsDoc), false)
	f.Add([]byte(doc(jobs(srcJob, reader(`, where: {k: [1, 2.5, true]}`)))), false)
	f.Add([]byte(doc(jobs(source("s", `, source: {kind: cron, schedule: "cron(0 12 ? * MON-FRI 2025/2)"}`)))), false)
	f.Add([]byte(doc(jobs(source("s", `, source: {kind: cron, schedule: "rate(5 minutes)"}`)))), false)
	f.Add([]byte(doc(jobs(source("w", `, source: {kind: webhook, webhook_path: /hooks/a}`)))), false)
	f.Add([]byte("base: &b {activation: source, runtime: lambda, operator: op, outputs: 1, source: {kind: manual}}\nname: d\njobs:\n  - {<<: *b, name: a}\n"), false)
	f.Add([]byte(`{"name": "d", "jobs": [{"name": "a", "activation": "source", "runtime": "lambda", "operator": "op", "outputs": 1, "source": {"kind": "manual"}, "config": {"n": 1e400}}]}`), true)
	f.Add([]byte("name: d\njobs: []\n---\nname: e\n"), false)
	f.Fuzz(func(t *testing.T, data []byte, asJSON bool) {
		ct := "application/yaml"
		if asJSON {
			ct = "application/json"
		}
		d, ps := Parse(data, ct)
		if (d == nil) == (len(ps) == 0) {
			t.Fatalf("document %v with problems %v", d != nil, ps)
		}
		for _, p := range ps {
			if p.Message == "" {
				t.Fatalf("a problem without a message: %+v", p)
			}
			_ = p.String()
		}
		if d == nil {
			_ = ps.Error()
			return
		}
		if d.Version == "" {
			t.Fatal("a document without a version")
		}
		again, _ := Parse(data, ct)
		if again == nil || !reflect.DeepEqual(again, d) {
			t.Fatal("parsing the same document twice differs")
		}
		for _, j := range d.Jobs {
			if s := j.Source; s != nil && s.Kind == SourceCron {
				if _, err := ParseSchedule(s.Schedule); err != nil {
					t.Fatalf("job %s has a schedule ParseSchedule refuses: %v", j.Name, err)
				}
			}
		}
		for _, ds := range d.ExternalDatasets() {
			_ = ds
		}
		_ = d.CheckExternal(func(ds string) (Allowlist, bool) {
			return Allowlist{Dataset: ds, Fields: map[string]string{"k": TypeInteger, "s": TypeString, "f": ""}}, len(ds)%2 == 0
		})
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		back, ps := Parse(b, "application/json")
		if ps != nil {
			t.Fatalf("the document's JSON does not parse back: %s\n%s", ps, b)
		}
		want := *d
		want.Version, back.Version = "", ""
		if !reflect.DeepEqual(*back, want) {
			t.Fatalf("the document's JSON parses back differently:\n%s", b)
		}
		if asJSON && yamlReadsAsJSON(data) {
			y, ps := Parse(data, "application/yaml")
			if ps != nil {
				t.Fatalf("a JSON document that YAML refuses: %s", ps)
			}
			if y.Version != d.Version {
				t.Fatalf("read as YAML, version %s; as JSON, %s", y.Version, d.Version)
			}
		}
	})
}

// FuzzParseSchedule parses fuzzed schedules. It must not panic; a schedule it reads must print
// as text that reads back as the same schedule, and its next tick after a time from 1970 to 2199
// must be later than that time (or zero: no tick left), in UTC, and the same for the reparsed
// schedule.
func FuzzParseSchedule(f *testing.F) {
	for _, s := range []string{
		"rate(5 minutes)", "rate(1 hour)", "rate(30 days)", "rate(0 minutes)", "rate(9223372036854775807 days)",
		"cron(0 12 ? * MON-FRI *)", "cron(15 10 ? * 6L 2025)", "cron(0/15 * * * ? 2025-2030,2100/7)",
		"cron(0 0 1 1 ? 1970/5)", "cron(0 0 ? * 1-7/2 *)", "*/5 * * * *", "30 2 * * 1-5", "0 0 29 2 *",
		"@daily", " rate( 5 minutes ) ", "cron(0 0 30 2 ? *)",
	} {
		f.Add(s, int64(1_736_935_200))
	}
	start, end := time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC).Unix(), time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	f.Fuzz(func(t *testing.T, s string, at int64) {
		sched, err := ParseSchedule(s)
		if err != nil {
			if sched != nil || !strings.HasPrefix(err.Error(), "bad schedule") {
				t.Fatalf("%q: %v, %v", s, sched, err)
			}
			return
		}
		text := sched.String()
		again, err := ParseSchedule(text)
		if err != nil || again.String() != text {
			t.Fatalf("%q prints as %q, which reads back as %v, %v", s, text, again, err)
		}
		after := time.Unix(start+int64(math.Abs(float64(at%(end-start)))), int64(at%1e9+1e9)%1e9).UTC()
		next := sched.Next(after)
		if !next.IsZero() && (!next.After(after) || next.Location() != time.UTC) {
			t.Fatalf("%q: next tick after %s is %s", s, after, next)
		}
		if n2 := again.Next(after); !n2.Equal(next) {
			t.Fatalf("%q: next tick after %s is %s, but %s for %q", s, after, next, n2, text)
		}
	})
}

// FuzzCheckWhere checks fuzzed where clauses (JSON, numbers kept exact) against fuzzed allowlists
// ("name:type,..."; a type "" makes a filter field). It must not panic, must name paths under
// "where", must answer the same twice, and a clause it accepts must use allowed fields only and
// be one that a row holding exactly its values may match.
func FuzzCheckWhere(f *testing.F) {
	f.Add([]byte(`{"severity":"high"}`), "severity:string,chain:")
	f.Add([]byte(`{"severity":["low","medium"],"block":1000001}`), "severity:string,block:integer")
	f.Add([]byte(`{"block":2.0,"f":1e400,"ok":true,"at":"2025-01-15T10:00:00+01:00"}`), "block:integer,f:number,ok:boolean,at:timestamp")
	f.Add([]byte(`{"doc":{"nested":1},"list":[],"bad":[{"x":1}],"n":null}`), "doc:json,list:string,bad:string,n:")
	f.Add([]byte(`{"k":"v"}`), "")
	f.Fuzz(func(t *testing.T, where []byte, fields string) {
		dec := json.NewDecoder(bytes.NewReader(where))
		dec.UseNumber()
		var w map[string]any
		if dec.Decode(&w) != nil || w == nil {
			return
		}
		allow := Allowlist{Dataset: "ds", Fields: map[string]string{}}
		if fields == "" {
			allow.Dataset = ""
		}
		for _, item := range strings.Split(fields, ",") {
			if name, typ, ok := strings.Cut(item, ":"); ok {
				allow.Fields[name] = typ
			}
		}
		ps := CheckWhere("where", w, allow)
		if again := CheckWhere("where", w, allow); !slices.Equal(again.Strings(), ps.Strings()) {
			t.Fatalf("two checks differ: %q, %q", ps.Strings(), again.Strings())
		}
		for _, p := range ps {
			if !strings.HasPrefix(p.Path, "where") || p.Message == "" {
				t.Fatalf("problem %+v", p)
			}
		}
		if len(ps) > 0 {
			return
		}
		values := map[string][]any{}
		for k, v := range w {
			if _, ok := allow.Fields[k]; !ok {
				t.Fatalf("field %q is not allowed, yet the clause passed", k)
			}
			if list, ok := v.([]any); ok {
				values[k] = list
			} else {
				values[k] = []any{v}
			}
		}
		if !MayMatch(w, values) {
			t.Fatalf("a row of the clause's own values may not match it: %v", w)
		}
		if !MayMatch(w, nil) {
			t.Fatal("a row about which nothing is known may not match")
		}
	})
}

// TestYAMLReadsAsJSON checks FuzzParse's precondition both ways: JSON it passes reads the same
// as YAML, and each kind of JSON it excludes does not read as YAML or reads differently.
func TestYAMLReadsAsJSON(t *testing.T) {
	t.Parallel()
	jsonDoc := func(config string) []byte {
		return []byte(`{"name":"d","jobs":[{"name":"a","activation":"source","runtime":"lambda","operator":"op",` +
			`"outputs":1,"source":{"kind":"manual"},"config":{` + config + `}}]}`)
	}
	long := strings.Repeat("k", 1100)
	for _, tc := range []struct {
		name, config string
		reads        bool
	}{
		{"plain", `"k": "v", "l": [1, {"m": null}], "n": {}`, true},
		{"tab before the colon", "\"k\"\t: 1", true},
		{"non-ASCII and a byte order mark", `"é": "\ufeff☃"`, true},
		{"DEL in a string", "\"k\": \"a\x7fb\"", false},
		{"a C1 control in a string", "\"k\": \"a\u0080b\"", false},
		{"U+FFFE in a string", "\"k\": \"a\ufffeb\"", false},
		{"NEL in a string", "\"k\": \"a\u0085b\"", false},
		{"line separator in a key", "\"a\u2028b\": 1", false},
		{"a line break before the colon", "\"k\"\n: 1", false},
		{"a 1,100-character key", `"` + long + `": 1`, false},
	} {
		data := jsonDoc(tc.config)
		j, ps := Parse(data, "application/json")
		if ps != nil {
			t.Fatalf("%s: JSON refused: %s", tc.name, ps)
		}
		if got := yamlReadsAsJSON(data); got != tc.reads {
			t.Errorf("%s: yamlReadsAsJSON = %v, want %v", tc.name, got, tc.reads)
		}
		y, _ := Parse(data, "application/yaml")
		if same := y != nil && y.Version == j.Version; same != tc.reads {
			t.Errorf("%s: read as YAML the same as JSON: %v, want %v", tc.name, same, tc.reads)
		}
	}
}

// yamlReadsAsJSON reports whether YAML reads this JSON text as JSON does. YAML reads most JSON,
// but not all: it refuses characters outside its printable set (DEL, the C1 controls, U+FFFE)
// and yaml.v3 takes U+0085, U+2028 and U+2029 for line breaks, which fold inside a string; and an
// object's key must end on its own line and at most 1024 characters before its colon.
func yamlReadsAsJSON(data []byte) bool {
	if !utf8.Valid(data) {
		return false
	}
	for _, r := range string(data) {
		switch {
		case r == '\t' || r == '\n' || r == '\r' || r >= 0x20 && r <= 0x7e:
		case r >= 0xa0 && r <= 0xd7ff && r != 0x2028 && r != 0x2029:
		case r >= 0xe000 && r <= 0xfffd || r >= 0x10000:
		default:
			return false
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	var inObject []bool // per open container: an object whose next string is a key
	keyNext := false
	for {
		start := int(dec.InputOffset())
		tok, err := dec.Token()
		if err != nil {
			return true
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			inObject = append(inObject, tok == json.Delim('{'))
			keyNext = tok == json.Delim('{')
			continue
		case json.Delim('}'), json.Delim(']'):
			inObject = inObject[:len(inObject)-1]
		default:
			if keyNext {
				end := int(dec.InputOffset())
				colon := end + bytes.IndexByte(data[end:], ':')
				key := bytes.TrimLeft(data[start:colon], " \t\r\n,")
				if bytes.ContainsAny(key, "\r\n") || utf8.RuneCount(key) > 1000 {
					return false
				}
				keyNext = false
				continue
			}
		}
		keyNext = len(inObject) > 0 && inObject[len(inObject)-1]
	}
}
