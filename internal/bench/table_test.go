package bench

import (
	"regexp"
	"strings"
	"testing"
)

// The table has a row for every figure, n/a where a phase has none, and the rate's rows only at a
// rate.
func TestWriteTable(t *testing.T) {
	cpu, rss := 1.5, int64(3<<20)
	phase := Phase{SubmitSeconds: 0.25, Seconds: 1.5, TasksPerSec: 200,
		ClaimLatency: &Latency{P50: 1, P95: 2, P99: 3}, Errors: 0}
	r := &Result{Store: "sqlite", Via: ViaSDK, Batch: 8, DAG: Flat, Tasks: 300, Jobs: 3, Workers: 16,
		WorkOnly: &phase, SubmitToDone: phase, ServerCPUSeconds: &cpu, ServerPeakRSSBytes: &rss}
	var b strings.Builder
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{
		`store +sqlite`, `via +sdk \(batch 8\)`, `dag +flat`, `tasks +300 per phase, in 3 jobs`, `workers +16`,
		` +work-only +submit-to-done`, `tasks/s +200 +200`, `seconds +1.500 +1.500`, `submit seconds +0.250 +0.250`,
		`claim ms p50 / p95 / p99 +1.00 / 2.00 / 3.00 +1.00 / 2.00 / 3.00`, `hand-off ms p50 / p95 / p99 +n/a +n/a`,
		`failed requests +0 +0`, `server CPU seconds +1.50`, `server peak RSS +3.0 MiB`, `bench CPU seconds +unknown`,
	} {
		if !regexp.MustCompile(`(?m)^` + row + ` *$`).MatchString(b.String()) {
			t.Errorf("no row %q in\n%s", row, b.String())
		}
	}
	for _, row := range []string{`rate`, `submitted tasks/s`} {
		if regexp.MustCompile(`(?m)^` + row + ` `).MatchString(b.String()) {
			t.Errorf("a row %q without a rate in\n%s", row, b.String())
		}
	}

	rate := 500.0
	r.RateTasksPerSec, r.WorkOnly = &rate, nil
	r.SubmitToDone.Pacing = &Pacing{RateTasksPerSec: rate, SubmitTasksPerSec: 480, MaxLagMs: 2.5}
	b.Reset()
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{
		`rate +500 tasks/s asked`, `tasks/s +skipped \(--rate\) +200`, `seconds +n/a +1.500`,
		`submitted tasks/s +n/a +480, on schedule \(max lag 2.5 ms\)`, `failed requests +n/a +0`,
	} {
		if !regexp.MustCompile(`(?m)^` + row + ` *$`).MatchString(b.String()) {
			t.Errorf("no row %q in\n%s", row, b.String())
		}
	}
	r.SubmitToDone.Pacing.Behind, r.SubmitToDone.Pacing.LateJobs = true, 2
	b.Reset()
	r.WriteTable(&b)
	if !strings.Contains(b.String(), "480, BEHIND schedule: 2 jobs late, up to 2.5 ms") {
		t.Errorf("a late submission:\n%s", b.String())
	}
}

// Worker rows go side by side, n/a where a figure does not apply.
func TestWriteWorkerRows(t *testing.T) {
	cpu, ready, srv, rss := 0.5, 0.125, 1.25, int64(40<<20)
	phase := Phase{SubmitSeconds: 0.25, Seconds: 1.5, TasksPerSec: 200}
	r := &Result{Store: "sqlite", Via: ViaSDK, Batch: 8, DAG: Flat, Tasks: 300, Jobs: 3, Workers: 16, WorkOnly: &phase, SubmitToDone: phase,
		WorkOnlyByWorker: []WorkerRow{{Worker: "go sdk", Seconds: 1.5, TasksPerSec: 200, CPUSeconds: &cpu, ServerCPUSeconds: &srv}}}
	var b strings.Builder
	r.WriteTable(&b)
	if strings.Contains(b.String(), "work-only by worker") {
		t.Errorf("a table of one worker:\n%s", b.String())
	}
	r.WorkOnlyByWorker = append(r.WorkOnlyByWorker, WorkerRow{Worker: "python", Command: "python3 w.py", Seconds: 3, TasksPerSec: 100,
		ReadySeconds: &ready, CPUSeconds: &cpu, PeakRSSBytes: &rss, Stop: "exit 0"})
	b.Reset()
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{
		`work-only by worker +tasks/s +seconds +ready after s +worker CPU s +worker peak RSS +server CPU s +stop`,
		`go sdk +200 +1.500 +n/a +0.50 +n/a +1.25 +n/a`,
		`python +100 +3.000 +0.125 +0.50 +40.0 MiB +n/a +exit 0`,
	} {
		if !regexp.MustCompile(`(?m)^` + row + ` *$`).MatchString(b.String()) {
			t.Errorf("no row %q in\n%s", row, b.String())
		}
	}
}
