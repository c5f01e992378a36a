package bench

import (
	"fmt"
	"strings"
	"time"
)

// SteadyResult is what a steady run measured.
type SteadyResult struct {
	Store           string  `json:"store"` // sqlite or postgres (set by SteadyServer), or external (by the caller)
	Via             string  `json:"via"`
	Workers         int     `json:"workers"`
	Batch           int     `json:"batch"`
	JobSize         int     `json:"job_size"`
	RateTasksPerSec float64 `json:"rate_tasks_per_second"`
	DurationSeconds float64 `json:"duration_seconds"` // the offered load's
	AfterSeconds    float64 `json:"after_seconds"`    // observed after it, at least
	WindowSeconds   float64 `json:"window_seconds"`
	Tasks           int     `json:"tasks"` // submitted, all completed
	Jobs            int     `json:"jobs"`
	// HotTables are the tables whose dead tuples and size the windows sum (PostgreSQL only).
	HotTables []string `json:"hot_tables"`
	// Autovacuum is the database server's setting, nil without a database. Off, nothing
	// reclaims a dead tuple during the run, pin or not.
	Autovacuum *bool `json:"autovacuum"`
	// Pin is the session that held the xmin horizon, nil without one.
	Pin *PinReport `json:"pin"`
	// Pacing is how the submission kept to the rate.
	Pacing *Pacing `json:"pacing"`
	// Windows are the run's windows in order, from the schedule's start to the first window end
	// at which the observation after the schedule was over and every task had completed.
	Windows []SteadyWindow `json:"windows"`
	Summary SteadySummary  `json:"summary"`
	Checks  []GoalCheck    `json:"checks"`

	ServerCPUSeconds   *float64 `json:"server_cpu_seconds"` // over the run, nil when unknown
	ServerPeakRSSBytes *int64   `json:"server_peak_rss_bytes"`
}

// PinReport is the session that held the xmin horizon: when it was asked for, and when it held
// it, in seconds from the schedule's start.
type PinReport struct {
	AtSeconds  float64 `json:"at_seconds"`
	ForSeconds float64 `json:"for_seconds"`
	// HeldFromSeconds is when txid_current() answered in the open transaction; HeldToSeconds
	// when the ROLLBACK was sent.
	HeldFromSeconds float64 `json:"held_from_seconds"`
	HeldToSeconds   float64 `json:"held_to_seconds"`
	XID             int64   `json:"xid"` // the transaction id it held
	// The hot tables just before the pin's BEGIN and just after its ROLLBACK.
	TablesBefore *TableStats `json:"tables_before"`
	TablesAtEnd  *TableStats `json:"tables_at_end"`
}

// SteadyWindow is one window of a steady run. The database's figures (nil without one) are read
// as it closes.
type SteadyWindow struct {
	StartSeconds float64 `json:"start_seconds"`
	EndSeconds   float64 `json:"end_seconds"`
	// PinHeld says that the window overlaps the pin's scheduled span.
	PinHeld         bool    `json:"pin_held"`
	OfferedTasks    int     `json:"offered_tasks"`   // their POST /jobs went out in the window
	CompletedTasks  int     `json:"completed_tasks"` // their completion acknowledged in the window
	OfferedPerSec   float64 `json:"offered_tasks_per_second"`
	CompletedPerSec float64 `json:"completed_tasks_per_second"`
	// Pickup is, for each task a worker's handler started in the window, the time from its job's
	// POST /jobs answer to that start (0 when the start came first).
	Pickup *Latency `json:"pickup_latency"`
	// Submit is the POST /jobs round trip of the jobs sent in the window.
	Submit *Latency `json:"submit_latency"`
	// QueueDepth is how many of the run's tasks were ready and not claimed at the window's end.
	QueueDepth *int        `json:"queue_depth"`
	Tables     *TableStats `json:"tables"`
}

// TableStats are the hot tables' figures at one moment: their sums and each table's.
type TableStats struct {
	AtSeconds  float64     `json:"at_seconds"` // from the schedule's start
	LiveTuples int64       `json:"live_tuples"`
	DeadTuples int64       `json:"dead_tuples"`
	SizeBytes  int64       `json:"size_bytes"` // pg_total_relation_size: heap, indexes and TOAST
	PerTable   []TableStat `json:"per_table"`
}

// TableStat is one table's figures, from pg_stat_user_tables and pg_total_relation_size.
type TableStat struct {
	Table      string `json:"table"`
	LiveTuples int64  `json:"live_tuples"`
	DeadTuples int64  `json:"dead_tuples"`
	SizeBytes  int64  `json:"size_bytes"`
	Vacuums    int64  `json:"vacuums"` // autovacuum_count + vacuum_count so far
}

// SteadySummary sums a steady run up.
type SteadySummary struct {
	// Over the schedule: the tasks offered and those whose completion was acknowledged before
	// its end, per second of it.
	OfferedPerSec   float64 `json:"offered_tasks_per_second"`
	CompletedPerSec float64 `json:"completed_tasks_per_second"`
	// ScheduleCompletedTasks is how many tasks' completions were acknowledged before the
	// schedule's end (every task's was by the run's end).
	ScheduleCompletedTasks int `json:"schedule_completed_tasks"`
	// Pickup is over the whole run; PickupPinned over the windows the pin overlaps (nil without
	// a pin).
	Pickup       *Latency `json:"pickup_latency"`
	PickupPinned *Latency `json:"pickup_latency_pinned"`
	// The tasks offered in the windows the pin overlaps, and those completed in them.
	PinnedOfferedTasks   int `json:"pinned_offered_tasks"`
	PinnedCompletedTasks int `json:"pinned_completed_tasks"`
	// The hot tables' total size and dead tuples before the pin, at its end and at the run's end
	// (nil without a database; the pin's without a pin).
	SizeBeforePinBytes *int64 `json:"size_before_pin_bytes"`
	SizeAtPinEndBytes  *int64 `json:"size_at_pin_end_bytes"`
	SizeAtEndBytes     *int64 `json:"size_at_end_bytes"`
	DeadBeforePin      *int64 `json:"dead_tuples_before_pin"`
	DeadAtPinEnd       *int64 `json:"dead_tuples_at_pin_end"`
	DeadAtEnd          *int64 `json:"dead_tuples_at_end"`
	// SizeBackSeconds is the time from the pin's end to the first look (its end, then each window's
	// end) at which the hot tables' size was within 10% of their size before the pin; nil when
	// none was (or without a pin).
	SizeBackSeconds *float64 `json:"size_back_within_10_percent_seconds"`
	// ObservedAfterPinSeconds is how long the run went on after the pin ended.
	ObservedAfterPinSeconds *float64 `json:"observed_after_pin_seconds"`
}

// GoalCheck is one of the goals a steady run is read against, and how it went.
type GoalCheck struct {
	Goal   string `json:"goal"`
	Status string `json:"status"` // met, missed or n/a
	Detail string `json:"detail"`
}

// The goals: at half the maximum rate, a 5-minute pin keeps the pickup p99 under 100 ms and the
// completions at the offered rate, and the tables return to their size before the pin within 5
// minutes of its end.
const (
	goalPickupP99   = 100 * time.Millisecond
	goalKeepUp      = 0.99 // completed ÷ offered, in the windows compared
	goalSizeSlack   = 0.10 // "back to its size": within 10%
	goalSizeBackIn  = 5 * time.Minute
	checkMet        = "met"
	checkMissed     = "missed"
	checkNotApplied = "n/a"
)

// summarize sums the run up from its log and its windows (the database's figures in place).
func summarize(l *steadyLog, res *SteadyResult) SteadySummary {
	s := SteadySummary{
		OfferedPerSec: round(float64(res.Tasks)/res.DurationSeconds, 1),
		Pickup:        l.pickupOver(func(int) bool { return true }),
	}
	l.mu.Lock()
	s.ScheduleCompletedTasks = l.ackedInSchedule
	l.mu.Unlock()
	s.CompletedPerSec = round(float64(s.ScheduleCompletedTasks)/res.DurationSeconds, 1)
	if res.Pin != nil {
		s.PickupPinned = l.pickupOver(func(i int) bool { return i < len(res.Windows) && res.Windows[i].PinHeld })
		for _, w := range res.Windows {
			if w.PinHeld {
				s.PinnedOfferedTasks += w.OfferedTasks
				s.PinnedCompletedTasks += w.CompletedTasks
			}
		}
	}
	if n := len(res.Windows); n > 0 && res.Windows[n-1].Tables != nil {
		end := res.Windows[n-1].Tables
		s.SizeAtEndBytes, s.DeadAtEnd = &end.SizeBytes, &end.DeadTuples
	}
	if p := res.Pin; p != nil && p.TablesBefore != nil && p.TablesAtEnd != nil {
		s.SizeBeforePinBytes, s.DeadBeforePin = &p.TablesBefore.SizeBytes, &p.TablesBefore.DeadTuples
		s.SizeAtPinEndBytes, s.DeadAtPinEnd = &p.TablesAtEnd.SizeBytes, &p.TablesAtEnd.DeadTuples
		s.SizeBackSeconds = sizeBack(p, res.Windows)
		if n := len(res.Windows); n > 0 {
			after := round(max(res.Windows[n-1].EndSeconds-p.HeldToSeconds, 0), 3)
			s.ObservedAfterPinSeconds = &after
		}
	}
	return s
}

// sizeBack is how long after the pin's end the hot tables' size was first seen within
// goalSizeSlack of their size before the pin: at the pin's end, or at a window's end after it.
func sizeBack(p *PinReport, wins []SteadyWindow) *float64 {
	limit := float64(p.TablesBefore.SizeBytes) * (1 + goalSizeSlack)
	looks := []*TableStats{p.TablesAtEnd}
	for _, w := range wins {
		if w.Tables != nil && w.Tables.AtSeconds >= p.TablesAtEnd.AtSeconds {
			looks = append(looks, w.Tables)
		}
	}
	for _, t := range looks {
		if float64(t.SizeBytes) <= limit {
			d := round(max(t.AtSeconds-p.HeldToSeconds, 0), 3)
			return &d
		}
	}
	return nil
}

// checks reads the run against the goals: during the pin, or over the run without one.
func checks(res *SteadyResult) []GoalCheck {
	s := res.Summary
	part, pickup := "over the run", s.Pickup
	offered, completed := res.Tasks, s.ScheduleCompletedTasks
	if res.Pin != nil {
		part, pickup = "during the pin", s.PickupPinned
		offered, completed = s.PinnedOfferedTasks, s.PinnedCompletedTasks
	}
	var out []GoalCheck

	c := GoalCheck{Goal: fmt.Sprintf("pickup p99 < %d ms %s", goalPickupP99.Milliseconds(), part)}
	switch {
	case pickup == nil:
		c.Status, c.Detail = checkNotApplied, "no task was picked up"
	default:
		c.Status, c.Detail = verdict(pickup.P99 < float64(goalPickupP99.Milliseconds())), fmt.Sprintf("p99 %.2f ms", pickup.P99)
		if res.Pin != nil && s.Pickup != nil {
			c.Detail += fmt.Sprintf(" (over the run %.2f ms)", s.Pickup.P99)
		}
	}
	out = append(out, c)

	c = GoalCheck{Goal: "completions keep up with the offered rate " + part}
	switch {
	case offered == 0:
		c.Status, c.Detail = checkNotApplied, "no task was offered"
	default:
		ratio := float64(completed) / float64(offered)
		c.Status = verdict(ratio >= goalKeepUp)
		c.Detail = fmt.Sprintf("%d of %d offered tasks completed (%.1f%%, at least %.0f%% wanted)", completed, offered, 100*ratio, 100*goalKeepUp)
	}
	out = append(out, c)

	c = GoalCheck{Goal: fmt.Sprintf("hot tables back to their size before the pin (within %.0f%%) within %s of its end", 100*goalSizeSlack, fmtDur(goalSizeBackIn))}
	switch {
	case res.Pin == nil || s.SizeBeforePinBytes == nil:
		c.Status, c.Detail = checkNotApplied, "no pin"
	case res.Autovacuum != nil && !*res.Autovacuum:
		c.Status, c.Detail = checkNotApplied, "autovacuum is off on the database server: nothing reclaims dead tuples, pin or not"
	case s.SizeBackSeconds != nil:
		c.Status = verdict(*s.SizeBackSeconds <= goalSizeBackIn.Seconds())
		c.Detail = fmt.Sprintf("back %s after the pin ended", fmtSeconds(*s.SizeBackSeconds))
	case s.ObservedAfterPinSeconds != nil && *s.ObservedAfterPinSeconds >= goalSizeBackIn.Seconds():
		c.Status, c.Detail = checkMissed, fmt.Sprintf("not within the run, which went on %s after the pin", fmtSeconds(*s.ObservedAfterPinSeconds))
	default:
		observed := 0.0
		if s.ObservedAfterPinSeconds != nil {
			observed = *s.ObservedAfterPinSeconds
		}
		c.Status = checkNotApplied
		c.Detail = fmt.Sprintf("not back by the run's end, %s after the pin: observe at least %s after it (a longer --steady, or --steady-after)",
			fmtSeconds(observed), fmtDur(goalSizeBackIn))
	}
	return append(out, c)
}

func verdict(met bool) string {
	if met {
		return checkMet
	}
	return checkMissed
}

// fmtSeconds writes a number of seconds as a duration, to the millisecond.
func fmtSeconds(s float64) string {
	return fmtDur(time.Duration(s * float64(time.Second)).Round(time.Millisecond))
}

// fmtDur writes d without the zero units time.Duration's String adds (5m, not 5m0s).
func fmtDur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
