package bench

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
)

// WriteTable writes the result as one table. With a rate, the work-only column says it was
// skipped, and a row tells how the submission kept to the rate.
func (r *Result) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 2, 4, 3, ' ', 0)
	via := r.Via
	if r.Via == ViaSDK {
		via += fmt.Sprintf(" (batch %d)", r.Batch)
	}
	fmt.Fprintf(tw, "store\t%s\n", r.Store)
	fmt.Fprintf(tw, "via\t%s\n", via)
	fmt.Fprintf(tw, "dag\t%s\n", r.DAG)
	fmt.Fprintf(tw, "tasks\t%d per phase, in %d jobs\n", r.Tasks, r.Jobs)
	fmt.Fprintf(tw, "workers\t%d\n", r.Workers)
	if r.RateTasksPerSec != nil {
		fmt.Fprintf(tw, "rate\t%s tasks/s asked\n", fmtRate(*r.RateTasksPerSec))
	}
	fmt.Fprintf(tw, "\twork-only\tsubmit-to-done\n")
	for i, row := range tableRows(r.SubmitToDone.Pacing != nil) {
		a := "n/a"
		switch {
		case r.WorkOnly != nil:
			a = row.cell(*r.WorkOnly)
		case i == 0:
			a = "skipped (--rate)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", row.name, a, row.cell(r.SubmitToDone))
	}
	fmt.Fprintf(tw, "server CPU seconds\t%s\n", fmtOpt(r.ServerCPUSeconds, func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }))
	fmt.Fprintf(tw, "server peak RSS\t%s\n", fmtOpt(r.ServerPeakRSSBytes, func(v int64) string { return fmt.Sprintf("%.1f MiB", float64(v)/(1<<20)) }))
	fmt.Fprintf(tw, "bench CPU seconds\t%s\n", fmtOpt(r.BenchCPUSeconds, func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }))
	return tw.Flush()
}

// tableRow is a row of the table's phase columns: its name and a phase's cell.
type tableRow struct {
	name string
	cell func(Phase) string
}

// tableRows are the rows of the phase columns, with the submission's pacing if paced.
func tableRows(paced bool) []tableRow {
	rows := []tableRow{
		{"tasks/s", func(p Phase) string { return fmt.Sprintf("%.0f", p.TasksPerSec) }},
		{"seconds", func(p Phase) string { return fmt.Sprintf("%.3f", p.Seconds) }},
		{"submit seconds", func(p Phase) string { return fmt.Sprintf("%.3f", p.SubmitSeconds) }},
	}
	if paced {
		rows = append(rows, tableRow{"submitted tasks/s", func(p Phase) string { return fmtPacing(p.Pacing) }})
	}
	return append(rows,
		tableRow{"claim ms p50 / p95 / p99", func(p Phase) string { return fmtLatency(p.ClaimLatency) }},
		tableRow{"hand-off ms p50 / p95 / p99", func(p Phase) string { return fmtLatency(p.HandoffLatency) }},
		tableRow{"failed requests", func(p Phase) string { return strconv.Itoa(p.Errors) }},
	)
}

// fmtPacing is the achieved submission rate and whether the submitters kept the schedule.
func fmtPacing(p *Pacing) string {
	if p == nil {
		return "n/a"
	}
	kept := fmt.Sprintf("on schedule (max lag %.1f ms)", p.MaxLagMs)
	if p.Behind {
		kept = fmt.Sprintf("BEHIND schedule: %d jobs late, up to %.1f ms", p.LateJobs, p.MaxLagMs)
	}
	return fmt.Sprintf("%.0f, %s", p.SubmitTasksPerSec, kept)
}

func fmtRate(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func fmtLatency(l *Latency) string {
	if l == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.2f / %.2f / %.2f", l.P50, l.P95, l.P99)
}

func fmtOpt[T any](v *T, f func(T) string) string {
	if v == nil {
		return "unknown"
	}
	return f(*v)
}
