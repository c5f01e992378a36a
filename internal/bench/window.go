package bench

import (
	"slices"
	"sync"
	"time"
)

// steadyLog collects what a steady run observes, by window of the run: the tasks offered (their
// job's POST /jobs sent), the completions acknowledged, each task's pickup latency (its job's
// POST /jobs answered → a worker's handler started it) and the submissions' round trips. It is
// the run's submitWatch and the SDK workers' observer. Every event counts in the window of its
// own time, whenever it is recorded.
type steadyLog struct {
	start    time.Time
	window   time.Duration
	schedule time.Time // the end of the offered load
	sizes    []int     // tasks of job i

	mu       sync.Mutex
	wins     []windowData
	answered map[string]answer      // job id → its POST /jobs answer, while some of its tasks have not started
	early    map[string][]time.Time // job id → its tasks' starts seen before its answer
	running  map[string]bool        // task ids started and not yet acknowledged
	acked    int
	// ackedInSchedule counts the completions acknowledged before the schedule's end.
	ackedInSchedule int
}

// answer is when a job's POST /jobs answered, and how many of its tasks have not started since.
type answer struct {
	at   time.Time
	left int
}

// windowData is what one window collected.
type windowData struct {
	offered, completed int
	pickup, submit     []time.Duration
}

func newSteadyLog(start time.Time, window, schedule time.Duration, sizes []int) *steadyLog {
	return &steadyLog{start: start, window: window, schedule: start.Add(schedule), sizes: sizes,
		answered: map[string]answer{}, early: map[string][]time.Time{}, running: map[string]bool{}}
}

// win is the window of at, made if new; at before the start counts in the first one. The caller
// holds mu.
func (l *steadyLog) win(at time.Time) *windowData {
	i := max(int(at.Sub(l.start)/l.window), 0)
	for len(l.wins) <= i {
		l.wins = append(l.wins, windowData{})
	}
	return &l.wins[i]
}

// sending counts job i's tasks offered as its POST /jobs goes out.
func (l *steadyLog) sending(i int, at time.Time) {
	l.mu.Lock()
	l.win(at).offered += l.sizes[i]
	l.mu.Unlock()
}

// submitted records job i's POST /jobs round trip, and the pickup of its tasks that a worker
// started before the answer came back (the server commits before it answers): zero.
func (l *steadyLog) submitted(i int, jobID string, sent, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.win(sent).submit = append(l.win(sent).submit, at.Sub(sent))
	early := l.early[jobID]
	delete(l.early, jobID)
	for _, s := range early {
		l.win(s).pickup = append(l.win(s).pickup, 0)
	}
	if left := l.sizes[i] - len(early); left > 0 {
		l.answered[jobID] = answer{at: at, left: left}
	}
}

// claimed is the SDK's claim round trip, which a steady run does not report.
func (l *steadyLog) claimed(time.Duration) {}

// started records a worker's handler starting task id of job t.job: its pickup, from its job's
// answer. A task started again (its lease expired) keeps its first pickup.
func (l *steadyLog) started(id string, t ref, _ []string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.running[id] {
		return
	}
	l.running[id] = true
	a, ok := l.answered[t.job]
	if !ok {
		l.early[t.job] = append(l.early[t.job], at)
		return
	}
	l.win(at).pickup = append(l.win(at).pickup, max(at.Sub(a.at), 0))
	if a.left--; a.left == 0 {
		delete(l.answered, t.job)
	} else {
		l.answered[t.job] = a
	}
}

// completedID records the acknowledgement of task id's completion; a report repeated after a
// lost answer counts once.
func (l *steadyLog) completedID(id string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.running[id] {
		return
	}
	delete(l.running, id)
	l.acked++
	if at.Before(l.schedule) {
		l.ackedInSchedule++
	}
	l.win(at).completed++
}

func (l *steadyLog) ackedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.acked
}

// row sums window i up: its counts, rates and latencies; the caller adds the database's figures.
func (l *steadyLog) row(i int) SteadyWindow {
	l.mu.Lock()
	defer l.mu.Unlock()
	var d windowData
	if i < len(l.wins) {
		d = l.wins[i]
	}
	secs := l.window.Seconds()
	return SteadyWindow{
		StartSeconds:    round(float64(i)*secs, 3),
		EndSeconds:      round(float64(i+1)*secs, 3),
		OfferedTasks:    d.offered,
		CompletedTasks:  d.completed,
		OfferedPerSec:   round(float64(d.offered)/secs, 1),
		CompletedPerSec: round(float64(d.completed)/secs, 1),
		Pickup:          percentiles(slices.Clone(d.pickup)),
		Submit:          percentiles(slices.Clone(d.submit)),
	}
}

// pickupOver is the pickup latency of the tasks started in the windows for which in says true.
func (l *steadyLog) pickupOver(in func(i int) bool) *Latency {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ds []time.Duration
	for i, w := range l.wins {
		if in(i) {
			ds = append(ds, w.pickup...)
		}
	}
	return percentiles(ds)
}
