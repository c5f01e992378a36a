package ctl

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/client"
)

// printBuild shows each part of a build, and says what to do about a task that failed for good.
func TestPrintBuild(t *testing.T) {
	t.Parallel()
	ready := time.Date(2026, 1, 6, 9, 41, 12, 0, time.UTC)
	counts := func(failed int) map[string]int {
		return map[string]int{"routed": 3, "waiting": 0, "pending": 0, "running": 0, "completed": 3 - failed, "failed": failed, "canceled": 0}
	}
	for _, tc := range []struct {
		name  string
		build client.PipelineBuild
		want  []string
		not   []string
	}{
		{name: "building", build: client.PipelineBuild{Version: "v2", State: client.BuildBuilding, BaseVersion: "v1", Activate: client.ActivateManual,
			Jobs:     []client.PipelineBuildJob{{Name: "ranges", Reason: "config changed", Counts: counts(0)}},
			Switched: map[string]string{"alerts": "config changed; it writes a buffered dataset"},
			Datasets: []client.PipelineBuildDataset{{DatasetUUID: "u1", DatasetName: "ranges", CurrentVersion: "a", CandidateVersion: "b"}, {DatasetUUID: "u2", CurrentVersion: "c", CandidateVersion: "d"}},
			Backfill: client.PipelineBuildBackfill{ThroughEvent: 42}},
			want: []string{"build of version v2: building (base version v1, activate manual)", "backfill: under way, through event 42",
				"ranges config changed 3 0 0 0 3 0 0", "ranges (u1) a -> b", "u2 c -> d", "changes at activation, not rebuilt: alerts: config changed; it writes a buffered dataset"},
			not: []string{"failed for good"}},
		{name: "ready", build: client.PipelineBuild{Version: "v2", State: client.BuildReady, BaseVersion: "v1", Activate: client.ActivateWhenReady,
			Jobs: []client.PipelineBuildJob{{Name: "totals", Reason: "reads ranges, which is rebuilt", Counts: counts(0)}}, ReadyAt: &ready,
			Backfill: client.PipelineBuildBackfill{ThroughEvent: 42, Scanned: true}},
			want: []string{"build of version v2: ready since " + ready.Local().Format("2006-01-02 15:04:05") + " (base version v1, activate when_ready)",
				"backfill: done, through event 42"},
			not: []string{"REBUILT DATASET", "changes at activation"}},
		{name: "a failed task", build: client.PipelineBuild{Version: "v2", State: client.BuildBuilding, BaseVersion: "v1", Activate: client.ActivateManual,
			Jobs: []client.PipelineBuildJob{{Name: "ranges", Reason: "config changed", Counts: counts(1)}}, Backfill: client.PipelineBuildBackfill{ThroughEvent: 1, Scanned: true}},
			want: []string{"a task of the build failed for good: it stays building; deploy a fix, abandon it (baton pipeline abandon), or activate it as it is with --force"}},
		{name: "not begun", build: client.PipelineBuild{Version: "v2", State: client.BuildBuilding, BaseVersion: "v1", Activate: client.ActivateManual},
			want: []string{"backfill: not begun", "REBUILT JOB REASON ROUTED WAITING PENDING RUNNING COMPLETED FAILED CANCELED"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			c := newJobCmd(context.Background(), "pipeline", "get", &out, &errOut)
			if code := printBuild(c, &out, &tc.build); code != 0 {
				t.Fatalf("exit %d: %s", code, errOut.String())
			}
			lines := strings.Split(out.String(), "\n")
			for i, l := range lines {
				lines[i] = strings.Join(strings.Fields(l), " ")
			}
			got := strings.Join(lines, "\n")
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("lacks %q:\n%s", w, out.String())
				}
			}
			for _, w := range tc.not {
				if strings.Contains(got, w) {
					t.Errorf("has %q:\n%s", w, out.String())
				}
			}
		})
	}
}
