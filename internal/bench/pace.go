package bench

import (
	"context"
	"math"
	"sync"
	"time"
)

// minLate is the least delay past its due time for which a job counts late: below it, the
// delay is the timer's and the scheduler's, not the submitters'.
const minLate = 5 * time.Millisecond

// pacer holds a phase's submissions to Config.Rate. Each job is due when the tasks of the jobs up
// to and including it are due at the rate, that is at start + (those tasks)/rate: a job of k tasks
// is due k/rate after the one before it, the first k/rate after the start. Every due time is
// computed from the start and the cumulative count, never by adding intervals, so that rounding
// does not drift. A nil pacer lets every job go at once.
type pacer struct {
	start time.Time
	due   []time.Duration // job i's due time, from start
	slack []time.Duration // how late job i may start and still count on schedule

	mu       sync.Mutex
	lateJobs int
	maxLag   time.Duration
}

// newPacer schedules jobs of the given sizes at rate tasks per second from start; nil when rate
// is 0 (no limit).
func newPacer(sizes []int, rate float64, start time.Time) *pacer {
	if rate <= 0 {
		return nil
	}
	p := &pacer{start: start, due: make([]time.Duration, len(sizes)), slack: make([]time.Duration, len(sizes))}
	cum := 0
	for i, k := range sizes {
		cum += k
		p.due[i] = seconds(float64(cum) / rate)
		p.slack[i] = max(seconds(float64(k)/rate), minLate)
	}
	return p
}

// seconds converts s seconds to a Duration, saturating where a Duration ends (a rate so low that
// a job is due in centuries).
func seconds(s float64) time.Duration {
	if ns := s * float64(time.Second); ns < math.MaxInt64 {
		return time.Duration(ns)
	}
	return math.MaxInt64
}

// wait blocks until job i is due and records how late it goes if it was due already. A job goes
// late when the submitters were all busy at its due time; it counts late when it goes more than
// its own share of the schedule (k/rate) after its due time, or minLate if that is longer: the
// submitters were then a whole job behind. It returns false if ctx ended first.
func (p *pacer) wait(ctx context.Context, i int) bool {
	if p == nil {
		return ctx.Err() == nil
	}
	due := p.start.Add(p.due[i])
	if d := time.Until(due); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return false
		}
	}
	lag := time.Since(due)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.maxLag = max(p.maxLag, lag)
	if lag > p.slack[i] {
		p.lateJobs++
	}
	return ctx.Err() == nil
}

// report sums up how the submission of tasks kept to the schedule, the last submission answered
// submit after the start; nil for a nil pacer.
func (p *pacer) report(rate float64, tasks int, submit time.Duration) *Pacing {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return &Pacing{
		RateTasksPerSec:   rate,
		SubmitTasksPerSec: round(float64(tasks)/submit.Seconds(), 1),
		LateJobs:          p.lateJobs,
		MaxLagMs:          round(float64(p.maxLag)/float64(time.Millisecond), 3),
		Behind:            p.lateJobs > 0,
	}
}

// Pacing is how a phase's submission kept to Config.Rate.
type Pacing struct {
	// RateTasksPerSec is the rate asked for.
	RateTasksPerSec float64 `json:"rate_tasks_per_second"`
	// SubmitTasksPerSec is the rate achieved: the phase's tasks over the span from its start to
	// the last submission answered. On schedule, it falls short of the rate asked for only by
	// the last submission's answer time; the submitters never go ahead of the schedule.
	SubmitTasksPerSec float64 `json:"submit_tasks_per_second"`
	// LateJobs counts the jobs that went more than their own share of the schedule (k/rate for
	// k tasks, at least 5 ms) after their due time, because every submitter was still waiting
	// for an earlier answer: the load came in bursts there, not at the steady rate.
	LateJobs int `json:"late_jobs"`
	// MaxLagMs is the longest any job went after its due time, timer delays included.
	MaxLagMs float64 `json:"max_lag_ms"`
	// Behind is true when any job was late: the submitters could not keep the rate.
	Behind bool `json:"behind_schedule"`
}
