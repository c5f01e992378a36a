package bench

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
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
	fmt.Fprintf(tw, "server peak RSS\t%s\n", fmtOpt(r.ServerPeakRSSBytes, fmtMiB))
	fmt.Fprintf(tw, "bench CPU seconds\t%s\n", fmtOpt(r.BenchCPUSeconds, func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }))
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.WorkOnlyByWorker) < 2 {
		return nil // the in-process workers alone: the table above has their figures
	}
	fmt.Fprintln(w)
	return writeWorkerRows(w, r.WorkOnlyByWorker)
}

// writeWorkerRows writes the work-only phase of each kind of worker side by side, one row each.
func writeWorkerRows(w io.Writer, rows []WorkerRow) error {
	tw := tabwriter.NewWriter(w, 2, 4, 3, ' ', 0)
	fmt.Fprintf(tw, "work-only by worker\ttasks/s\tseconds\tready after s\tworker CPU s\tworker peak RSS\tserver CPU s\tstop\n")
	secs := func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }
	for _, row := range rows {
		fmt.Fprintf(tw, "%s\t%.0f\t%.3f\t%s\t%s\t%s\t%s\t%s\n", row.Worker, row.TasksPerSec, row.Seconds,
			fmtOptNA(row.ReadySeconds, func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }),
			fmtOptNA(row.CPUSeconds, secs), fmtOptNA(row.PeakRSSBytes, fmtMiB), fmtOptNA(row.ServerCPUSeconds, secs),
			cmpStr(row.Stop, "n/a"))
	}
	return tw.Flush()
}

func fmtMiB(v int64) string { return fmt.Sprintf("%.1f MiB", float64(v)/(1<<20)) }

// fmtOptNA is fmtOpt with n/a for a missing value.
func fmtOptNA[T any](v *T, f func(T) string) string {
	if v == nil {
		return "n/a"
	}
	return f(*v)
}

func cmpStr(s, def string) string {
	if s == "" {
		return def
	}
	return s
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

// WriteTable writes the soak's result as one table.
func (r *SoakResult) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 2, 4, 3, ' ', 0)
	secs := func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }
	fmt.Fprintf(tw, "store\t%s\n", r.Store)
	fmt.Fprintf(tw, "soak\t%s: %s\n", r.Worker, r.Command)
	fmt.Fprintf(tw, "dag\t%s, at most %d tasks a job\n", r.DAG, r.JobSize)
	fmt.Fprintf(tw, "workers\t%d\n", r.Workers)
	fmt.Fprintf(tw, "schedule\t%s tasks/s for %s: %d tasks in %d jobs\n", fmtRate(r.RateTasksPerSec),
		time.Duration(r.DurationSeconds*float64(time.Second)), r.Tasks, r.Jobs)
	fmt.Fprintf(tw, "submitted tasks/s\t%s\n", fmtPacing(r.Pacing))
	fmt.Fprintf(tw, "drain seconds\t%.3f (from the last submission to every job finished)\n", r.DrainSeconds)
	fmt.Fprintf(tw, "RSS after %s\t%s\n", time.Duration(r.BaselineSeconds*float64(time.Second)), fmtMiB(r.BaselineRSSBytes))
	fmt.Fprintf(tw, "RSS at the end\t%s\n", fmtMiB(r.EndRSSBytes))
	verdict := "within"
	if r.Grew() {
		verdict = "ABOVE"
	}
	fmt.Fprintf(tw, "end / baseline\t%.3f (%+.1f%%, %s the --soak-max-growth of %s%%)\n", float64(r.EndRSSBytes)/float64(r.BaselineRSSBytes),
		r.GrowthPercent, verdict, fmtRate(r.MaxGrowthPercent))
	fmt.Fprintf(tw, "peak RSS\t%s (the highest of %d samples)\n", fmtMiB(r.PeakRSSBytes), len(r.Samples))
	fmt.Fprintf(tw, "worker CPU seconds\t%s\n", fmtOpt(r.WorkerCPUSeconds, secs))
	fmt.Fprintf(tw, "server CPU seconds\t%s\n", fmtOpt(r.ServerCPUSeconds, secs))
	fmt.Fprintf(tw, "server peak RSS\t%s\n", fmtOpt(r.ServerPeakRSSBytes, fmtMiB))
	fmt.Fprintf(tw, "stop\t%s\n", r.Stop)
	return tw.Flush()
}

// WriteTable writes a steady run's result: its header, a row per window, and its summary.
func (r *SteadyResult) WriteTable(w io.Writer) error {
	if err := r.writeHeader(w); err != nil {
		return err
	}
	for _, win := range r.Windows {
		if err := writeWindowRow(w, win); err != nil {
			return err
		}
	}
	return r.WriteSummary(w)
}

// writeHeader writes what the steady run does, then the windows' column heads.
func (r *SteadyResult) writeHeader(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 2, 4, 3, ' ', 0)
	fmt.Fprintf(tw, "store\t%s\n", r.Store)
	fmt.Fprintf(tw, "workers\t%d, via %s (batch %d)\n", r.Workers, r.Via, r.Batch)
	fmt.Fprintf(tw, "schedule\t%s tasks/s for %s, jobs of %d: %d tasks in %d jobs\n", fmtRate(r.RateTasksPerSec),
		fmtSeconds(r.DurationSeconds), r.JobSize, r.Tasks, r.Jobs)
	if r.AfterSeconds > 0 {
		fmt.Fprintf(tw, "after\t%s more, no load offered\n", fmtSeconds(r.AfterSeconds))
	}
	if r.Pin != nil {
		fmt.Fprintf(tw, "pin\tat %s for %s: an idle transaction holds the xmin horizon\n", fmtSeconds(r.Pin.AtSeconds), fmtSeconds(r.Pin.ForSeconds))
	}
	if r.HotTables != nil {
		fmt.Fprintf(tw, "hot tables\t%s\n", strings.Join(r.HotTables, ", "))
	}
	if r.Autovacuum != nil && !*r.Autovacuum {
		fmt.Fprintf(tw, "autovacuum\toff on the database server: nothing reclaims dead tuples, pin or not\n")
	}
	fmt.Fprintf(tw, "window\t%s\n\n", fmtSeconds(r.WindowSeconds))
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, windowFormat, "window", "pin", "offered/s", "completed/s", "pickup ms p50 / p99", "submit ms p99",
		"queue depth", "dead tuples", "hot tables")
	return err
}

// windowFormat lays a window's row out in fixed columns, so that each can be printed as its
// window closes.
const windowFormat = "%-13s %-4s %10s %12s %20s %14s %12s %12s %11s\n"

// writeWindowRow writes one window's row; "-" where the store gives no figure.
func writeWindowRow(w io.Writer, win SteadyWindow) error {
	pin := ""
	if win.PinHeld {
		pin = "held"
	}
	pickup, submit := "-", "-"
	if l := win.Pickup; l != nil {
		pickup = fmt.Sprintf("%.2f / %.2f", l.P50, l.P99)
	}
	if l := win.Submit; l != nil {
		submit = fmt.Sprintf("%.2f", l.P99)
	}
	depth, dead, size := "-", "-", "-"
	if win.QueueDepth != nil {
		depth = strconv.Itoa(*win.QueueDepth)
	}
	if t := win.Tables; t != nil {
		dead, size = strconv.FormatInt(t.DeadTuples, 10), fmtMiB(t.SizeBytes)
	}
	_, err := fmt.Fprintf(w, windowFormat, fmtSeconds(win.StartSeconds)+"-"+fmtSeconds(win.EndSeconds), pin,
		fmt.Sprintf("%.0f", win.OfferedPerSec), fmt.Sprintf("%.0f", win.CompletedPerSec), pickup, submit, depth, dead, size)
	return err
}

// WriteSummary writes the steady run's summary and the goals' checks, after its windows.
func (r *SteadyResult) WriteSummary(w io.Writer) error {
	s := r.Summary
	tw := tabwriter.NewWriter(w, 2, 4, 3, ' ', 0)
	fmt.Fprintln(tw)
	fmt.Fprintf(tw, "offered\t%.1f tasks/s over the schedule: %d tasks\n", s.OfferedPerSec, r.Tasks)
	fmt.Fprintf(tw, "completed\t%.1f tasks/s over the schedule (%d tasks in it), every task by the run's end (%s)\n",
		s.CompletedPerSec, s.ScheduleCompletedTasks, fmtSeconds(r.lastEnd()))
	pickup := "over the run " + fmtLatency(s.Pickup)
	if r.Pin != nil {
		pickup += "; during the pin " + fmtLatency(s.PickupPinned)
	}
	fmt.Fprintf(tw, "pickup ms p50 / p95 / p99\t%s\n", pickup)
	fmt.Fprintf(tw, "submitted tasks/s\t%s\n", fmtPacing(r.Pacing))
	if p := r.Pin; p != nil {
		fmt.Fprintf(tw, "pin held\tfrom %s to %s (xid %d)\n", fmtSeconds(p.HeldFromSeconds), fmtSeconds(p.HeldToSeconds), p.XID)
	}
	if s.SizeAtEndBytes != nil {
		var parts []string
		if s.SizeBeforePinBytes != nil {
			parts = append(parts, fmt.Sprintf("before the pin %s (%d dead tuples)", fmtMiB(*s.SizeBeforePinBytes), *s.DeadBeforePin),
				fmt.Sprintf("at its end %s (%d)", fmtMiB(*s.SizeAtPinEndBytes), *s.DeadAtPinEnd))
		}
		parts = append(parts, fmt.Sprintf("at the run's end %s (%d)", fmtMiB(*s.SizeAtEndBytes), *s.DeadAtEnd))
		fmt.Fprintf(tw, "hot tables\t%s\n", strings.Join(parts, ", "))
	}
	if s.SizeBeforePinBytes != nil {
		back := "not within the run"
		if s.SizeBackSeconds != nil {
			back = fmtSeconds(*s.SizeBackSeconds) + " after the pin ended"
		}
		fmt.Fprintf(tw, "size back within 10%%\t%s\n", back)
	}
	secs := func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }
	fmt.Fprintf(tw, "server CPU seconds\t%s\n", fmtOpt(r.ServerCPUSeconds, secs))
	fmt.Fprintf(tw, "server peak RSS\t%s\n", fmtOpt(r.ServerPeakRSSBytes, fmtMiB))
	fmt.Fprintln(tw)
	for _, c := range r.Checks {
		fmt.Fprintf(tw, "%s\t%s: %s\n", c.Status, c.Goal, c.Detail)
	}
	return tw.Flush()
}

// lastEnd is when the last window ended, in seconds from the start.
func (r *SteadyResult) lastEnd() float64 {
	if len(r.Windows) == 0 {
		return 0
	}
	return r.Windows[len(r.Windows)-1].EndSeconds
}
