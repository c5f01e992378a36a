package bench

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/client"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// A job is due when its tasks and all before them are due at the rate; a job counts late only
// past its own share of the schedule, and never less than minLate.
func TestBenchPacerSchedule(t *testing.T) {
	t.Parallel()
	if newPacer([]int{10}, 0, time.Now()) != nil {
		t.Error("a pacer without a rate")
	}
	p := newPacer(jobSizes(25, 10), 100, time.Now())
	ms := func(ds []time.Duration) []time.Duration {
		out := make([]time.Duration, len(ds))
		for i, d := range ds {
			out[i] = d / time.Millisecond
		}
		return out
	}
	if got := ms(p.due); !slices.Equal(got, []time.Duration{100, 200, 250}) {
		t.Errorf("due at %v ms, want 100, 200, 250", got)
	}
	if got := ms(p.slack); !slices.Equal(got, []time.Duration{100, 100, 50}) {
		t.Errorf("late after %v ms, want 100, 100, 50", got)
	}
	// 3 tasks a second: every due time is its own third of a second, not a sum of rounded ones.
	p = newPacer(jobSizes(3000, 1), 3, time.Now())
	if p.due[0] != 333333333 || p.due[2999] != 1000*time.Second {
		t.Errorf("at 3 tasks/s, the 1st task is due at %v, the 3000th at %v; want 333.333333ms and 16m40s", p.due[0], p.due[2999])
	}
	if got := newPacer([]int{1}, 1000, time.Now()).slack[0]; got != minLate {
		t.Errorf("a 1 ms job counts late after %v, want %v", got, minLate)
	}
	if got := newPacer([]int{1}, 1e-12, time.Now()).due[0]; got <= 0 {
		t.Errorf("a job due in millennia is due at %v", got)
	}
}

// Submitters that wait on the pacer never go before a job's due time, whichever of them takes
// which job.
func TestBenchPacerNeverGoesEarly(t *testing.T) {
	t.Parallel()
	start := time.Now()
	p := newPacer(jobSizes(12, 1), 200, start)
	went := make([]time.Duration, 12)
	var next sync.Mutex
	i := 0
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				next.Lock()
				j := i
				i++
				next.Unlock()
				if j >= len(went) || !p.wait(context.Background(), j) {
					return
				}
				went[j] = time.Since(start)
			}
		})
	}
	wg.Wait()
	for j, at := range went {
		if due := time.Duration(j+1) * 5 * time.Millisecond; at < due {
			t.Errorf("job %d went at %v, before it was due at %v", j, at, due)
		}
	}
}

// A job that goes past its slack counts late; one due already by less does not; a wait ends
// with its context.
func TestBenchPacerCountsLateJobs(t *testing.T) {
	t.Parallel()
	p := newPacer([]int{10, 10, 1000}, 100, time.Now().Add(-250*time.Millisecond))
	ctx := context.Background()
	if !p.wait(ctx, 0) || !p.wait(ctx, 1) { // due 150 ms and 50 ms ago; slack 100 ms
		t.Fatal("wait refused a job with its context alive")
	}
	got := p.report(100, 20, 250*time.Millisecond)
	if got.LateJobs != 1 || !got.Behind || got.MaxLagMs < 150 || got.RateTasksPerSec != 100 || got.SubmitTasksPerSec != 80 {
		t.Errorf("%+v, want 1 late job, behind, lag ≥ 150 ms, 80 of 100 tasks/s", got)
	}
	ctx, cancel := context.WithCancel(ctx)
	ended := make(chan bool)
	go func() { ended <- p.wait(ctx, 2) }() // due in 10 s
	cancel()
	if <-ended {
		t.Error("wait let a job go after its context ended")
	}
	if (*pacer)(nil).report(100, 20, time.Second) != nil {
		t.Error("a report without a pacer")
	}
}

// With a rate, the work-only phase is skipped and the submit-to-done phase submits on schedule:
// the server creates no job before it is due, the submission lasts at least the schedule's span,
// and every job completes.
func TestBenchRatePacesSubmission(t *testing.T) {
	t.Parallel()
	producer, internal, key := serveInProcess(t, storetest.OpenSQLite(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := Config{ProducerURL: producer, InternalURL: internal, APIKey: key, TaskName: "bench-rate",
		Tasks: 200, DAG: Chain, JobSize: 10, Workers: 8, Via: ViaSDK, Batch: 8, Rate: 400}
	before := time.Now()
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.WorkOnly != nil {
		t.Errorf("work-only phase %+v with a rate", res.WorkOnly)
	}
	if res.RateTasksPerSec == nil || *res.RateTasksPerSec != 400 || res.Jobs != 20 {
		t.Errorf("rate %v, %d jobs; want 400 tasks/s, 20 jobs", res.RateTasksPerSec, res.Jobs)
	}
	p := res.SubmitToDone
	// The last job is due when all 200 tasks are at 400/s: 0.5 s after the start.
	if p.SubmitSeconds < 0.5 || p.Seconds < p.SubmitSeconds || p.TasksPerSec > 400 {
		t.Errorf("submitted in %.4f s, done in %.4f s at %.1f tasks/s; want at least 0.5 s and at most 400 tasks/s",
			p.SubmitSeconds, p.Seconds, p.TasksPerSec)
	}
	if pc := p.Pacing; pc == nil || pc.RateTasksPerSec != 400 || pc.SubmitTasksPerSec > 400 || pc.SubmitTasksPerSec <= 0 ||
		pc.LateJobs < 0 || pc.LateJobs > res.Jobs || pc.Behind != (pc.LateJobs > 0) || pc.MaxLagMs < 0 {
		t.Errorf("pacing %+v", pc)
	} else if pc.Behind {
		t.Logf("the submitters fell behind on this machine: %+v", pc)
	}
	if l := p.HandoffLatency; l == nil || l.Samples != 200-20 {
		t.Errorf("hand-off latency %+v, want one sample per task with a parent", l)
	}
	if l := p.ClaimLatency; l == nil || l.Samples != 200 {
		t.Errorf("claim latency %+v, want one sample per task", l)
	}
	checkJobsPaced(t, client.New(producer, key), before, 20, 10, 400)
}

// checkJobsPaced checks through the producer API that the server holds exactly the jobs of one
// paced phase, all completed, none created before its due time: job i (of size tasks each) is
// due (i+1)·size/rate after the phase started, which was after before. The server's times are
// whole milliseconds, cut down.
func checkJobsPaced(t *testing.T, pc *client.Client, before time.Time, jobs, size int, rate float64) {
	t.Helper()
	page, err := pc.ListJobs(context.Background(), client.ListOptions{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Jobs) != jobs || page.NextCursor != "" {
		t.Fatalf("%d jobs on the server (next page %q), want %d: the submit-to-done phase's only", len(page.Jobs), page.NextCursor, jobs)
	}
	for _, j := range page.Jobs {
		prefix := "bench-rate-submit-to-done-"
		i, err := strconv.Atoi(strings.TrimPrefix(j.Name, prefix))
		if !strings.HasPrefix(j.Name, prefix) || err != nil {
			t.Errorf("job %q: not one of the phase's", j.Name)
			continue
		}
		if j.Status != client.JobCompleted || j.TotalTasks != size {
			t.Errorf("job %s: %s with %d tasks", j.Name, j.Status, j.TotalTasks)
		}
		due := before.Add(seconds(float64((i+1)*size) / rate))
		if j.CreatedAt < due.UnixMilli()-1 { // a millisecond for the wall clock's slewing
			t.Errorf("job %s created at %s, before it was due at %s", j.Name,
				time.UnixMilli(j.CreatedAt).Format("15:04:05.000"), due.Format("15:04:05.000"))
		}
	}
}
