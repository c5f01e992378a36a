package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/demo"
	"github.com/baton-dev/baton/internal/pipeline/pipelinetest"
)

// cli runs "baton GROUP CMD --url ... --api-key ... ARGS..." and returns its exit status and output.
func (s *jobTestServer) cli(group, cmd string, args ...string) (int, string, string) {
	s.t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), append([]string{group, cmd, "--url", s.url, "--api-key", s.key}, args...), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestPipelineAndDatasetCommands(t *testing.T) {
	t.Parallel()
	s := newJobTestServer(t)
	file := jobWriteFile(t, demo.PipelineYAML)
	code, out, errOut := s.cli("pipeline", "deploy", "-f", file)
	if code != 0 || !strings.Contains(errOut, "deployed blocks_demo version "+strings.TrimSpace(out)) || !strings.Contains(errOut, "(new, active)") ||
		!strings.Contains(errOut, "range_totals") {
		t.Fatalf("deploy: exit %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut = s.cli("pipeline", "deploy", "-f", file); code != 0 || !strings.Contains(errOut, "already active; nothing changed") {
		t.Errorf("deploy again: exit %d\n%s", code, errOut)
	}
	bad := jobWriteFile(t, strings.Replace(demo.PipelineYAML, "operator: range_totals", "operator: 9bad", 1)+"extra: 1\n")
	code, _, errOut = s.cli("pipeline", "deploy", "-f", bad)
	if code != 1 || !strings.Contains(errOut, "refused the request (HTTP 400)") || !strings.Contains(errOut, `unknown key "extra"`) ||
		!strings.Contains(errOut, "jobs[2].operator") {
		t.Errorf("deploy a bad document: exit %d\n%s", code, errOut)
	}
	if code, out, _ = s.cli("pipeline", "list"); code != 0 || !strings.Contains(out, "blocks_demo") {
		t.Errorf("list: exit %d\n%s", code, out)
	}
	if code, out, _ = s.cli("pipeline", "get", "blocks_demo"); code != 0 || !strings.Contains(out, "(blocks)") || !strings.Contains(out, "always_on") {
		t.Errorf("get: exit %d\n%s", code, out)
	}
	if code, out, _ = s.cli("pipeline", "get", "blocks_demo", "--json"); code != 0 || !strings.Contains(out, `"active_version"`) {
		t.Errorf("get --json: exit %d\n%s", code, out)
	}
	if code, out, _ = s.cli("pipeline", "versions", "blocks_demo"); code != 0 || strings.Count(out, "\n") != 2 {
		t.Errorf("versions: exit %d\n%s", code, out)
	}
	if code, _, errOut = s.cli("pipeline", "rollback", "blocks_demo"); code != 1 || !strings.Contains(errOut, "no version deployed before") {
		t.Errorf("rollback with one version: exit %d\n%s", code, errOut)
	}
	if code, _, errOut = s.cli("pipeline", "get", "nope"); code != 1 || !strings.Contains(errOut, "Pipeline not found (HTTP 404)") {
		t.Errorf("get an unknown pipeline: exit %d\n%s", code, errOut)
	}
	if code, out, _ = s.cli("dataset", "list"); code != 0 || !strings.Contains(out, "block_stats") || !strings.Contains(out, "blocks_demo/range_stats output 0") {
		t.Errorf("dataset list: exit %d\n%s", code, out)
	}
	if code, out, _ = s.cli("dataset", "get", "blocks"); code != 0 || !strings.Contains(out, "filter fields: chain") {
		t.Errorf("dataset get: exit %d\n%s", code, out)
	}
	if code, _, errOut = s.cli("dataset", "cutover", "blocks"); code != 2 || !strings.Contains(errOut, "--version V is required") {
		t.Errorf("cutover without a version: exit %d\n%s", code, errOut)
	}
	if code, _, errOut = s.cli("dataset", "cutover", "blocks", "--version", "v9"); code != 1 || !strings.Contains(errOut, "no registered version") {
		t.Errorf("cutover to an unregistered version: exit %d\n%s", code, errOut)
	}
	if code, _, errOut = s.cli("pipeline", "frobnicate"); code != 2 || !strings.Contains(errOut, `unknown command "frobnicate"`) {
		t.Errorf("unknown command: exit %d\n%s", code, errOut)
	}
}

// cliBuildPipelineWidth is pipelinetest.BuildDoc with ranges' config set to {width: n}, in a file.
func cliBuildPipelineWidth(t *testing.T, n int) string {
	return jobWriteFile(t, pipelinetest.BuildDocWidth(n))
}

// runBuilds runs the builds service until the build of pipeline chain is ready.
func (s *jobTestServer) runBuilds() {
	s.t.Helper()
	ctx := context.Background()
	b := s.dp.NewBuilds(dataplane.BuildConfig{})
	for range 10 {
		if _, err := b.RunOnce(ctx); err != nil {
			s.t.Fatalf("builds: %v", err)
		}
		v, err := s.dp.GetPipeline(ctx, "acme", "chain")
		if err != nil {
			s.t.Fatal(err)
		}
		if v.Build == nil || v.Build.State == dataplane.BuildReady {
			return
		}
	}
	s.t.Fatal("the build never got ready")
}

// The commands of builds, in the order an operator runs them: a changed deploy is built beside
// the active version, get and versions show the build, activate refuses a build that is not
// ready unless forced, abandon stops one, and --activate chooses when a build takes over.
func TestPipelineBuildCommands(t *testing.T) {
	t.Parallel()
	s := newJobTestServer(t)
	vars := map[string]string{} // the versions deployed, by the name a step saved them under
	expand := func(v string) string {
		for k, x := range vars {
			v = strings.ReplaceAll(v, "$"+k, x)
		}
		return v
	}
	width := func(n int) string { return cliBuildPipelineWidth(t, n) }
	steps := []struct {
		name   string
		before func()
		args   []string // after "baton pipeline"; $V1 ... stand for saved versions
		code   int
		stdout []string // each must be in the output, with runs of spaces made one
		stderr []string
		save   string // save stdout, trimmed, as this variable
	}{
		{name: "first deploy", args: []string{"deploy", "-f", jobWriteFile(t, pipelinetest.BuildDoc)}, stderr: []string{"(new, active)"}, save: "V1"},
		{name: "unknown activate mode", args: []string{"deploy", "-f", width(2), "--activate", "later"}, code: 2,
			stderr: []string{`invalid value "later" for flag -activate: want manual, when_ready or immediate`}},
		{name: "changed deploy builds", args: []string{"deploy", "-f", width(2), "--activate", "manual"}, save: "V2", stderr: []string{
			"(new, building beside active version $V1)", "build of version $V2: building (base version $V1, activate manual)",
			"REBUILT JOB REASON ROUTED WAITING PENDING RUNNING COMPLETED FAILED CANCELED", "ranges config changed 0 0 0 0 0 0 0",
			"totals reads ranges, which is rebuilt", "REBUILT DATASET CURRENT VERSION -> CANDIDATE VERSION", "ranges (",
			"follow the build with 'baton pipeline get chain'; once it is ready: baton pipeline activate chain $V2"}},
		{name: "deployed again", args: []string{"deploy", "-f", width(2), "-o", "json"}, stderr: []string{"chain version $V2 is already being built (building); nothing changed"},
			stdout: []string{`"building_version": "$V2"`, `"state": "building"`, `"base_version": "$V1"`, `"candidate_version": "`, `"reason": "config changed"`}},
		{name: "get shows the build", args: []string{"get", "chain"}, stdout: []string{"chain: active version $V1",
			"build of version $V2: building (base version $V1, activate manual)", "backfill: not begun", "ranges config changed", " -> "}},
		{name: "get -o json", args: []string{"get", "chain", "-o", "json"}, stdout: []string{`"building_version": "$V2"`, `"build": {`, `"current_version": "`}},
		{name: "versions", args: []string{"versions", "chain"}, stdout: []string{"VERSION ACTIVE STATE DEPLOYED", "$V2 building", "$V1 * active"}},
		{name: "versions -o json", args: []string{"versions", "chain", "-o", "json"}, stdout: []string{`"state": "building"`}},
		{name: "list", args: []string{"list"}, stdout: []string{"NAME ACTIVE VERSION BUILDING VERSION UPDATED", "chain $V1 $V2"}},
		{name: "activate before ready", args: []string{"activate", "chain", "$V2"}, code: 1, stderr: []string{
			`baton pipeline activate: pipeline "chain" version $V2 is still building: activate it when its build is ready, or with force (HTTP 409)`,
			"Its build is not ready yet: follow it with 'baton pipeline get chain', or activate it now with --force."}},
		{name: "activate without a version", args: []string{"activate", "chain"}, code: 2, stderr: []string{`expected NAME VERSION, got ["chain"]`}},
		{name: "activate an empty version", args: []string{"activate", "chain", " "}, code: 2, stderr: []string{"NAME and VERSION must not be empty"}},
		{name: "activate an unknown pipeline", args: []string{"activate", "nope", "$V2"}, code: 1, stderr: []string{"Pipeline not found (HTTP 404)"}},
		{name: "activate with force", args: []string{"activate", "chain", "$V2", "--force"}, stdout: []string{"chain: version $V2 is active; 0 jobs of the version it replaced were canceled"}},
		{name: "activate the active version", args: []string{"activate", "chain", "$V2"}, code: 1, stderr: []string{"version $V2 is the active version (HTTP 409)"}},
		{name: "when_ready", args: []string{"deploy", "-f", width(3), "--activate", "when_ready"}, save: "V3",
			stderr: []string{"activate when_ready", "it becomes active by itself once its build is ready"}},
		{name: "abandon", args: []string{"abandon", "chain", "$V3"}, stdout: []string{"chain: the build of version $V3 is abandoned; 0 of its jobs were canceled"}},
		{name: "abandon again", args: []string{"abandon", "chain", "$V3"}, code: 1, stderr: []string{"version $V3 was abandoned (deploy it again to build it again) (HTTP 409)"}},
		{name: "abandon without a version", args: []string{"abandon"}, code: 2, stderr: []string{"expected NAME VERSION, got []"}},
		{name: "rollback to an abandoned version", args: []string{"rollback", "chain", "--version", "$V3"}, code: 1, stderr: []string{"was never active (its build is abandoned)", "(HTTP 409)"}},
		{name: "deploy a build to activate once ready", args: []string{"deploy", "-f", width(4)}, save: "V4", stderr: []string{"building beside active version $V2"}},
		{name: "get shows it ready", before: s.runBuilds, args: []string{"get", "chain"}, stdout: []string{"build of version $V4: ready since", "backfill: done, through event"}},
		{name: "activate a ready build", args: []string{"activate", "chain", "$V4", "-o", "json"}, stdout: []string{`"active_version": "$V4"`, `"activated": true`}},
		{name: "get after activation", args: []string{"get", "chain", "-o", "json"}, stdout: []string{`"active_version": "$V4"`, `"building_version": null`}},
		{name: "versions after all that", args: []string{"versions", "chain"}, stdout: []string{"$V4 * active", "$V3 abandoned", "$V2 inactive", "$V1 inactive"}},
		{name: "immediate", args: []string{"deploy", "-f", width(5), "--activate", "immediate"}, stderr: []string{"(new, active)"}},
	}
	squeeze := func(s string) string {
		lines := strings.Split(s, "\n")
		for i, l := range lines {
			lines[i] = strings.Join(strings.Fields(l), " ")
		}
		return strings.Join(lines, "\n")
	}
	for _, st := range steps {
		if st.before != nil {
			st.before()
		}
		args := make([]string, len(st.args))
		for i, a := range st.args {
			args[i] = expand(a)
		}
		code, out, errOut := s.cli("pipeline", args[0], args[1:]...)
		if code != st.code {
			t.Fatalf("%s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", st.name, code, st.code, out, errOut)
		}
		if st.save != "" {
			if vars[st.save] = strings.TrimSpace(out); len(vars[st.save]) != 16 {
				t.Fatalf("%s: stdout %q is not a version", st.name, out)
			}
		}
		for _, c := range []struct {
			what, got string
			want      []string
		}{{"stdout", out, st.stdout}, {"stderr", errOut, st.stderr}} {
			for _, w := range c.want {
				if w = expand(w); !strings.Contains(squeeze(c.got), w) {
					t.Errorf("%s: %s lacks %q:\n%s", st.name, c.what, w, c.got)
				}
			}
		}
	}
}
