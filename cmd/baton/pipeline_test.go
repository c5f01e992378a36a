package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/baton-dev/baton/internal/demo"
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
