package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/baton-dev/baton/client"
	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/ctl"
	"github.com/baton-dev/baton/internal/dataset"
	"github.com/baton-dev/baton/internal/demo"
	"github.com/baton-dev/baton/internal/pipeline"
	"github.com/baton-dev/baton/internal/store/sqlite"
)

// baton runs the whole command line in this process.
func baton(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// decodeAs decodes a command's -o json or -o yaml output into a value of the type of into. YAML
// goes through JSON, so the field names must be the JSON ones for the decode to fill anything.
func decodeAs(t *testing.T, format, out string, into any) {
	t.Helper()
	data := []byte(out)
	if format == ctl.OutputYAML {
		var v any
		if err := yaml.Unmarshal(data, &v); err != nil {
			t.Fatalf("yaml: %v\n%s", err, out)
		}
		var err error
		if data, err = json.Marshal(v); err != nil {
			t.Fatalf("yaml to json: %v\n%s", err, out)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		t.Fatalf("decode %s into %T: %v\n%s", format, into, err, out)
	}
}

// generic is out decoded as plain JSON or YAML data, with numbers as float64 either way.
func generic(t *testing.T, format, out string) any {
	t.Helper()
	var v any
	decodeAs(t, format, out, &v)
	b, _ := json.Marshal(v)
	var w any
	if err := json.Unmarshal(b, &w); err != nil {
		t.Fatal(err)
	}
	return w
}

// loadAlerts deploys the demo pipeline and loads two rows into its buffered dataset alert_events,
// as a sink would.
func (s *jobTestServer) loadAlerts() {
	s.t.Helper()
	if code, _, errOut := s.cli("pipeline", "deploy", "-f", jobWriteFile(s.t, demo.PipelineYAML)); code != 0 {
		s.t.Fatalf("deploy: %s", errOut)
	}
	code, out, errOut := s.cli("dataset", "get", "alert_events", "-o", "json")
	if code != 0 {
		s.t.Fatalf("dataset get: %s", errOut)
	}
	var d client.Dataset
	decodeAs(s.t, ctl.OutputJSON, out, &d)
	var schema pipeline.Schema
	if err := json.Unmarshal(d.Schema, &schema); err != nil {
		s.t.Fatalf("schema %s: %v", d.Schema, err)
	}
	_, err := s.data.Load(context.Background(), dataset.Batch{ID: "b1", Tenant: "acme", DatasetUUID: d.DatasetUUID, Schema: &schema,
		Rows: []dataset.Row{
			{"dedupe_key": "k1", "chain": "mainnet", "block": 1, "severity": "high", "message": "two\nlines"},
			{"dedupe_key": "k2", "chain": "mainnet", "block": 2, "severity": "low"},
		}})
	if err != nil {
		s.t.Fatal(err)
	}
}

// Every read command prints, with -o json and with -o yaml, the API's object: it decodes into the
// client's type with no unknown field, and both formats hold the same data.
func TestReadCommands_PrintTheAPIObjectAsJSONAndYAML(t *testing.T) {
	t.Parallel()
	s := newJobTestServer(t)
	jobID := s.submitExample()
	s.loadAlerts()
	for _, tc := range []struct {
		args  []string
		into  func() any
		check func(v any) bool
	}{
		{[]string{"job", "list"}, func() any { return new(client.JobPage) },
			func(v any) bool {
				return len(v.(*client.JobPage).Jobs) == 1 && v.(*client.JobPage).Jobs[0].JobID == jobID
			}},
		{[]string{"job", "get", jobID}, func() any { return new(client.Job) },
			func(v any) bool { return v.(*client.Job).JobID == jobID && len(v.(*client.Job).Tasks) == 5 }},
		{[]string{"pipeline", "list"}, func() any { return new(ctl.PipelineListing) },
			func(v any) bool {
				p := v.(*ctl.PipelineListing).Pipelines
				return len(p) == 1 && p[0].Name == "blocks_demo"
			}},
		{[]string{"pipeline", "get", "blocks_demo"}, func() any { return new(client.Pipeline) },
			func(v any) bool {
				return v.(*client.Pipeline).Name == "blocks_demo" && len(v.(*client.Pipeline).Jobs) == 7
			}},
		{[]string{"pipeline", "versions", "blocks_demo"}, func() any { return new(ctl.PipelineVersionListing) },
			func(v any) bool {
				l := v.(*ctl.PipelineVersionListing)
				return len(l.Versions) == 1 && l.Versions[0].Active && l.ActiveVersion == l.Versions[0].Version
			}},
		{[]string{"dataset", "list"}, func() any { return new(ctl.DatasetListing) },
			func(v any) bool {
				for _, d := range v.(*ctl.DatasetListing).Datasets {
					if d.Name != nil && *d.Name == "alert_events" && d.WriteMode != nil && *d.WriteMode == "buffered" {
						return true
					}
				}
				return false
			}},
		{[]string{"dataset", "get", "alert_events"}, func() any { return new(client.Dataset) },
			func(v any) bool { return *v.(*client.Dataset).Name == "alert_events" }},
		{[]string{"dataset", "rows", "alert_events", "--where", `{"severity":"high"}`}, func() any { return new(client.RowsPage) },
			func(v any) bool {
				r := v.(*client.RowsPage).Rows
				return len(r) == 1 && r[0]["dedupe_key"] == "k1" && r[0]["message"] == "two\nlines" && r[0]["block"] == 1.0
			}},
		{[]string{"dataset", "dead-letters", "alert_events"}, func() any { return new(ctl.DeadLetterListing) },
			func(v any) bool {
				return v.(*ctl.DeadLetterListing).DeadLetters != nil && len(v.(*ctl.DeadLetterListing).DeadLetters) == 0
			}},
	} {
		var outs [2]any
		for i, format := range []string{ctl.OutputJSON, ctl.OutputYAML} {
			code, out, errOut := s.cli(tc.args[0], tc.args[1], append(tc.args[2:], "-o", format)...)
			if code != 0 {
				t.Fatalf("%v -o %s: exit %d: %s", tc.args, format, code, errOut)
			}
			v := tc.into()
			decodeAs(t, format, out, v)
			if !tc.check(v) {
				t.Errorf("%v -o %s: unexpected content %+v\n%s", tc.args, format, v, out)
			}
			outs[i] = generic(t, format, out)
		}
		if !reflect.DeepEqual(outs[0], outs[1]) {
			t.Errorf("%v: json and yaml differ:\n%v\n%v", tc.args, outs[0], outs[1])
		}
		// --output is -o, and --json is -o json.
		_, long, _ := s.cli(tc.args[0], tc.args[1], append(tc.args[2:], "--output", "json")...)
		_, alias, _ := s.cli(tc.args[0], tc.args[1], append(tc.args[2:], "--json")...)
		if !reflect.DeepEqual(generic(t, ctl.OutputJSON, long), outs[0]) || !reflect.DeepEqual(generic(t, ctl.OutputJSON, alias), outs[0]) {
			t.Errorf("%v: --output json or --json differ from -o json", tc.args)
		}
	}
}

func TestAPIKeyCommands_CreatePrintsTheSecretAloneAndListPrintsJSONAndYAML(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	code, secret, errOut := baton("apikey", "create", "--name", "ci", "--tenant", "acme", "--data-dir", dir)
	if code != 0 || !strings.Contains(errOut, "shown only this once") {
		t.Fatalf("create: exit %d: %s", code, errOut)
	}
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, dbFile))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	k, err := auth.NewAuthenticator(st, auth.Limits{}, nil).Authenticate(context.Background(), strings.TrimSuffix(secret, "\n"))
	if err != nil || strings.Count(secret, "\n") != 1 {
		t.Fatalf("stdout %q is not a working key alone: %v", secret, err)
	}
	if !strings.Contains(errOut, k.ID) {
		t.Errorf("stderr %q does not name the key %s", errOut, k.ID)
	}
	code, out, errOut := baton("apikey", "create", "--name", "ci2", "--data-dir", dir, "-o", "json")
	var created apiKeyView
	if decodeAs(t, ctl.OutputJSON, out, &created); code != 0 || created.Secret == "" || created.Name != "ci2" || created.Tenant != auth.DefaultTenant {
		t.Fatalf("create -o json: exit %d %+v %s", code, created, errOut)
	}
	if code, _, _ := baton("apikey", "revoke", created.ID, "--data-dir", dir); code != 0 {
		t.Fatal("revoke")
	}
	for _, format := range []string{ctl.OutputJSON, ctl.OutputYAML} {
		code, out, errOut := baton("apikey", "list", "--data-dir", dir, "-o", format)
		var l struct {
			APIKeys []apiKeyView `json:"api_keys"`
		}
		decodeAs(t, format, out, &l)
		if code != 0 || len(l.APIKeys) != 2 || l.APIKeys[0].Secret != "" || l.APIKeys[1].Secret != "" {
			t.Fatalf("list -o %s: exit %d %+v %s", format, code, l, errOut)
		}
		for _, v := range l.APIKeys {
			if (v.ID == created.ID) != (v.RevokedAt != nil) {
				t.Errorf("list -o %s: %+v: only %s is revoked", format, v, created.ID)
			}
		}
	}
}

// Create commands print what they created alone on stdout, and it is what the server knows.
func TestCreateCommands_PrintOnlyTheNewIDOnStdout(t *testing.T) {
	t.Parallel()
	s := newJobTestServer(t)
	code, out, errOut := s.cli("job", "submit", "-f", jobWriteFile(t, jobExample))
	if code != 0 || !regexp.MustCompile(`^job-\S+\n$`).MatchString(out) || !strings.Contains(errOut, "5 tasks") {
		t.Fatalf("job submit: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if _, _, err := s.d.GetJob(context.Background(), "", strings.TrimSpace(out)); err != nil {
		t.Errorf("job submit printed %q: %v", out, err)
	}

	code, out, errOut = s.cli("pipeline", "deploy", "-f", jobWriteFile(t, demo.PipelineYAML))
	if code != 0 || strings.Count(out, "\n") != 1 || !strings.Contains(errOut, "range_totals") {
		t.Fatalf("pipeline deploy: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	_, got, _ := s.cli("pipeline", "get", "blocks_demo", "-o", "json")
	var p client.Pipeline
	decodeAs(t, ctl.OutputJSON, got, &p)
	if p.ActiveVersion != strings.TrimSpace(out) {
		t.Errorf("pipeline deploy printed %q; the active version is %q", out, p.ActiveVersion)
	}

	// With -o json they print the created object instead, and nothing else.
	code, out, _ = s.cli("job", "submit", "-f", jobWriteFile(t, jobExample), "-o", "json")
	var res client.SubmitJobResponse
	if decodeAs(t, ctl.OutputJSON, out, &res); code != 0 || res.TotalTasks != 5 || !strings.HasPrefix(res.JobID, "job-") {
		t.Errorf("job submit -o json: exit %d, %q", code, out)
	}
	code, out, _ = s.cli("pipeline", "deploy", "-f", jobWriteFile(t, demo.PipelineYAML), "-o", "yaml")
	var again client.Pipeline
	if decodeAs(t, ctl.OutputYAML, out, &again); code != 0 || again.Version != p.ActiveVersion || again.Created {
		t.Errorf("pipeline deploy -o yaml: exit %d, %q", code, out)
	}
}

// 0 success, 1 failure (the server's answer, the network), 2 usage: every command path.
func TestExitCodes(t *testing.T) {
	t.Parallel()
	s := newJobTestServer(t)
	jobID := s.submitExample()
	conn := []string{"--url", s.url, "--api-key", s.key}
	dead := []string{"--url", "http://127.0.0.1:1", "--api-key", s.key}
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		code int
	}{
		{nil, 2},
		{[]string{"frobnicate"}, 2},
		{[]string{"help"}, 0},
		{[]string{"--help"}, 0},
		{[]string{"version"}, 0},
		{[]string{"version", "extra"}, 2},
		{[]string{"version", "-o", "toml"}, 2},
		{[]string{"completion"}, 2},
		{[]string{"completion", "tcsh"}, 2},
		{[]string{"completion", "bash", "zsh"}, 2},
		{[]string{"completion", "bash"}, 0},
		{[]string{"job"}, 2},
		{[]string{"job", "help"}, 0},
		{[]string{"job", "frobnicate"}, 2},
		{append([]string{"job", "get", jobID}, conn...), 0},
		{append([]string{"job", "get", "-h"}, conn...), 0},
		{append([]string{"job", "get"}, conn...), 2},
		{append([]string{"job", "get", jobID, "-o", "xml"}, conn...), 2},
		{append([]string{"job", "list", "--frobnicate"}, conn...), 2},
		{append([]string{"job", "get", "job-nope"}, conn...), 1},
		{append([]string{"job", "list"}, dead...), 1},
		{append([]string{"job", "submit", "-f", filepath.Join(dir, "missing.json")}, conn...), 1},
		{append([]string{"job", "cancel", "job-nope"}, conn...), 1},
		{append([]string{"pipeline", "get", "nope"}, conn...), 1},
		{append([]string{"pipeline", "versions"}, conn...), 2},
		{append([]string{"pipeline", "deploy"}, conn...), 2},
		{append([]string{"dataset", "rows", "nope", "--where", "[1]"}, conn...), 2},
		{append([]string{"dataset", "retry", "nope", "x"}, conn...), 2},
		{append([]string{"dataset", "get", "nope"}, conn...), 1},
		{[]string{"pipeline"}, 2},
		{[]string{"query"}, 2},
		{[]string{"query", "help"}, 0},
		{[]string{"query", "-h"}, 0},
		{[]string{"query", "audit", "-h"}, 0},
		{append([]string{"query", "SELECT 1", "-o", "yaml"}, conn...), 2},
		{append([]string{"query", "SELECT 1"}, dead...), 1},
		{[]string{"dataset", "frobnicate"}, 2},
		{[]string{"apikey"}, 2},
		{[]string{"apikey", "frobnicate"}, 2},
		{[]string{"apikey", "list", "extra", "--data-dir", dir}, 2},
		{[]string{"apikey", "list", "-o", "xml", "--data-dir", dir}, 2},
		{[]string{"apikey", "create", "--data-dir", dir}, 2},
		{[]string{"apikey", "revoke", "--data-dir", dir}, 2},
		{[]string{"apikey", "revoke", "nope", "--data-dir", dir}, 1},
		{[]string{"apikey", "list", "--data-dir", dir}, 0},
		{[]string{"signing-key"}, 2},
		{[]string{"signing-key", "help"}, 0},
		{[]string{"signing-key", "frobnicate"}, 2},
		{[]string{"signing-key", "list", "extra", "--data-dir", dir}, 2},
		{[]string{"signing-key", "list", "-o", "xml", "--data-dir", dir}, 2},
		{[]string{"signing-key", "rotate", "-h"}, 0},
		{[]string{"signing-key", "retire", "--data-dir", dir}, 2},
		{[]string{"signing-key", "retire", "--frobnicate", "k-nope", "--data-dir", dir}, 2},
		{[]string{"signing-key", "retire", "k-nope", "--data-dir", dir}, 1},
		{[]string{"signing-key", "list", "--data-dir", dir}, 0},
		{[]string{"migrate"}, 2},
		{[]string{"migrate", "extra", "--sqlite", filepath.Join(dir, "m.db")}, 2},
		{[]string{"migrate", "--sqlite", filepath.Join(dir, "m.db")}, 0},
		{[]string{"migrate", "--sqlite", filepath.Join(dir, "m.db", "m.db")}, 1}, // a file is no directory
		{[]string{"certs"}, 2},
		{[]string{"certs", "dev"}, 2},
		{[]string{"certs", "dev", "-h"}, 0},
		{[]string{"dev", "--frobnicate"}, 2},
		{[]string{"dev", "-h"}, 0},
		{[]string{"dev", "extra"}, 2},
		{[]string{"server", "--frobnicate"}, 2},
		{[]string{"server", "--internal-insecure"}, 2}, // no database URL
		{[]string{"worker"}, 2},
		{[]string{"worker", "-h"}, 0},
		{[]string{"sink", "extra"}, 2},
		{[]string{"bench", "--frobnicate"}, 2},
		{[]string{"bench", "-h"}, 0},
	} {
		if tc.args != nil && tc.args[0] == "server" {
			// A BATON_DATABASE_URL in the environment must not make the case start a server.
			tc.args = append(tc.args, "--database-url=")
		}
		code, _, errOut := baton(tc.args...)
		if code != tc.code {
			t.Errorf("baton %q: exit %d, want %d; stderr:\n%s", tc.args, code, tc.code, errOut)
		}
		if code == 2 && errOut == "" {
			t.Errorf("baton %q: a usage error says nothing on stderr", tc.args)
		}
	}
}

func TestVersion_PrintsTheBuildInfo(t *testing.T) {
	t.Parallel()
	code, out, _ := baton("version")
	if code != 0 || !strings.HasPrefix(out, "baton ") || !strings.Contains(out, runtime.Version()) {
		t.Errorf("version: exit %d\n%s", code, out)
	}
	for _, format := range []string{ctl.OutputJSON, ctl.OutputYAML} {
		code, out, _ = baton("version", "-o", format)
		var b buildInfo
		if decodeAs(t, format, out, &b); code != 0 || b.Go != runtime.Version() || b.Version == "" || b.Platform != runtime.GOOS+"/"+runtime.GOARCH {
			t.Errorf("version -o %s: exit %d %+v", format, code, b)
		}
	}
}

// The VCS settings `go build` records become the commit (with -dirty) and its time; -ldflags'
// main.version wins over the module version.
func TestBuildInfoFrom_VCSSettingsAndTheLdflagsVersion(t *testing.T) {
	t.Parallel()
	info := &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
		{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "0123abcd"},
		{Key: "vcs.time", Value: "2026-11-24T20:00:00Z"}, {Key: "vcs.modified", Value: "true"},
	}}
	b := buildInfoFrom(info, "dev")
	if b.Version != "v1.2.3" || b.Commit != "0123abcd-dirty" || b.CommitTime != "2026-11-24T20:00:00Z" {
		t.Errorf("%+v", b)
	}
	info.Settings[3].Value = "false"
	if b = buildInfoFrom(info, "v9.0.0"); b.Version != "v9.0.0" || b.Commit != "0123abcd" {
		t.Errorf("with -ldflags: %+v", b)
	}
	if b = buildInfoFrom(nil, "dev"); b.Version != "dev" || b.Commit != "" || b.Go == "" {
		t.Errorf("no build info: %+v", b)
	}
}

func TestUsage_NamesEveryCommand(t *testing.T) {
	t.Parallel()
	for _, c := range commandTable() {
		// A long name stands on its own line, its description under it (as completion's).
		if !c.hidden && !strings.Contains(usage, "\n  "+c.name+" ") && !strings.Contains(usage, "\n  "+c.name+"\n") {
			t.Errorf("the usage does not list %s", c.name)
		}
	}
	if !strings.Contains(usage, "\n  completion\n") {
		t.Error("the usage does not list completion")
	}
}

// The banner of `baton dev` is a two-column table: every value, the API key's continuation line
// too, starts in one column. Not parallel: it clears BATON_API_KEY.
func TestDevBanner_ValuesStartInOneColumn(t *testing.T) {
	t.Setenv("BATON_API_KEY", "")
	var stdout, stderr syncBuffer
	exited := runUntilCleanup(t, []string{"dev", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--internal-listen", "127.0.0.1:0",
		"--metrics-listen=", "--sink=false"}, &stdout, &stderr)
	waitForLine(t, &stdout, regexp.MustCompile("Press Ctrl-C"), exited, &stderr)
	banner := stdout.String()
	// The listeners are bound before the banner: this request waits until the server serves, so
	// that the cleanup's stop finds it started rather than starting.
	resp, err := http.Get("http://" + bannerProducer.FindStringSubmatch(banner)[1] + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	body, _, _ := strings.Cut(banner, "Press Ctrl-C")
	lines := strings.Split(strings.TrimSpace(body), "\n")[1:] // after "Baton dev server"
	value := regexp.MustCompile(`^(  [A-Za-z][A-Za-z ]*?  +| +)\S`)
	cols := map[int]bool{}
	for _, l := range lines {
		m := value.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("banner line %q is not label and value", l)
		}
		cols[len(m[1])] = true
	}
	if len(cols) != 1 || len(lines) < 8 || !strings.Contains(banner, "API key       bk_") {
		t.Errorf("the banner's values start in columns %v:\n%s", cols, banner)
	}
}
