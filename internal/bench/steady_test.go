package bench

import (
	"math"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestSteadyConfigValidate(t *testing.T) {
	t.Parallel()
	cfg := Config{Tasks: 1, DAG: Flat, Via: ViaSDK, Workers: 1, Batch: 1, JobSize: 1, Rate: 100}
	ok := SteadyConfig{Duration: time.Minute, Window: 10 * time.Second}
	if err := ok.Validate(&cfg); err != nil {
		t.Fatal(err)
	}
	pinned := ok
	pinned.PinAt, pinned.PinFor, pinned.DatabaseURL = 10*time.Second, 50*time.Second, "postgres://db"
	if err := pinned.Validate(&cfg); err != nil {
		t.Errorf("a pin that ends with the load: %v", err)
	}
	for _, c := range []struct {
		change func(*SteadyConfig, *Config)
		want   string
	}{
		{func(s *SteadyConfig, _ *Config) { s.Duration = -time.Second }, "--steady must be a positive duration, got -1s"},
		{func(_ *SteadyConfig, c *Config) { c.Rate = 0 }, "--steady needs --rate"},
		{func(_ *SteadyConfig, c *Config) { c.DAG = Chain }, "--dag chain does not apply"},
		{func(_ *SteadyConfig, c *Config) { c.Via = ViaStreamWorker }, "--via stream-worker does not apply"},
		{func(_ *SteadyConfig, c *Config) { c.Commands = []WorkerCommand{{Label: "go", Command: "x"}} }, "--worker-command does not go with --steady"},
		{func(s *SteadyConfig, _ *Config) { s.Window = 0 }, "--window 0s must be above 0 and at most --steady 1m0s"},
		{func(s *SteadyConfig, _ *Config) { s.Window = 2 * time.Minute }, "--window 2m0s must be above 0 and at most --steady 1m0s"},
		{func(s *SteadyConfig, _ *Config) { s.After = -time.Second }, "--steady-after must be 0 or more"},
		{func(s *SteadyConfig, _ *Config) { s.PinAt, s.PinFor = -time.Second, time.Second }, "--pin-at -1s and --pin-for 1s must be 0 or more"},
		{func(s *SteadyConfig, _ *Config) { s.PinAt = time.Second }, "--pin-at needs --pin-for"},
		{func(s *SteadyConfig, _ *Config) { s.PinFor = time.Second }, "--pin-at holds a transaction open on the server's PostgreSQL database"},
		{func(s *SteadyConfig, _ *Config) {
			s.PinAt, s.PinFor, s.DatabaseURL = 30*time.Second, 31*time.Second, "postgres://db"
		}, "the pin (--pin-at 30s, --pin-for 31s) must end by the end of --steady 1m0s"},
		{func(_ *SteadyConfig, c *Config) { c.Rate = 0.001 }, "--rate 0.001 for --steady 1m0s submits no task"},
	} {
		s, c2 := ok, cfg
		c.change(&s, &c2)
		if err := s.Validate(&c2); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v %+v: %v, want %q", s, c2, err, c.want)
		}
	}
}

// Enough submitters to hold the rate while a submission takes 100 ms, within bounds.
func TestSteadySubmitters(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		rate    float64
		jobSize int
		want    int
	}{{1, 1, 4}, {200, 1, 20}, {1000, 1, 100}, {1000, 10, 10}, {1e6, 1, 256}} {
		if got := steadySubmitters(c.rate, c.jobSize); got != c.want {
			t.Errorf("%g tasks/s in jobs of %d: %d submitters, want %d", c.rate, c.jobSize, got, c.want)
		}
	}
}

// Each event counts in the window of its own time: offered when its POST went out, completed
// when acknowledged; a pickup runs from the job's answer to the handler's start (zero when the
// start came first), counted once per task, in its start's window.
func TestSteadyLogWindows(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	// Four jobs: three of one task, one of two; a window of a second, a schedule of two.
	l := newSteadyLog(start, time.Second, 2*time.Second, []int{1, 1, 1, 2})
	l.sending(0, at(100))
	l.submitted(0, "j0", at(100), at(110))
	l.started("t0", ref{"j0", "t0"}, nil, at(130)) // 20 ms after the answer
	l.completedID("t0", at(140))
	l.completedID("t0", at(150)) // a report repeated: counts once

	l.sending(1, at(900))
	l.started("t1", ref{"j1", "t0"}, nil, at(905))  // before the answer: 0
	l.submitted(1, "j1", at(900), at(1010))         // the answer a window later
	l.started("t1", ref{"j1", "t0"}, nil, at(1500)) // started again (a lease expired): no new pickup
	l.completedID("t1", at(1600))

	l.sending(2, at(1200))
	l.submitted(2, "j2", at(1200), at(1210))
	l.started("t2", ref{"j2", "t0"}, nil, at(1260)) // 50 ms
	l.completedID("t2", at(2500))                   // after the schedule

	l.sending(3, at(1900))
	l.submitted(3, "j3", at(1900), at(1920))
	l.started("t3a", ref{"j3", "t0"}, nil, at(1930)) // 10 ms
	l.started("t3b", ref{"j3", "t1"}, nil, at(2020)) // 100 ms, in the next window
	l.completedID("t3a", at(1950))
	l.completedID("t3b", at(2030))
	l.completedID("unknown", at(2040)) // never started: not the run's

	if len(l.answered) != 0 || len(l.early) != 0 || len(l.running) != 0 {
		t.Errorf("left behind: answered %v, early %v, running %v", l.answered, l.early, l.running)
	}
	if l.ackedCount() != 5 || l.ackedInSchedule != 3 {
		t.Errorf("acknowledged %d, %d in the schedule; want 5 and 3", l.ackedCount(), l.ackedInSchedule)
	}
	type counts struct {
		offered, completed int
		offeredPS          float64
		pickup, submit     []float64 // p50, p99; nil: none
	}
	want := []counts{
		{2, 1, 2, []float64{0, 20}, []float64{10, 110}},
		{3, 2, 3, []float64{10, 50}, []float64{10, 20}},
		{0, 2, 0, []float64{100, 100}, nil},
		{0, 0, 0, nil, nil}, // a window nothing happened in
	}
	for i, w := range want {
		row := l.row(i)
		if row.StartSeconds != float64(i) || row.EndSeconds != float64(i+1) || row.OfferedTasks != w.offered ||
			row.CompletedTasks != w.completed || row.OfferedPerSec != w.offeredPS || row.CompletedPerSec != float64(w.completed) {
			t.Errorf("window %d: %+v, want %+v", i, row, w)
		}
		for name, c := range map[string]struct {
			got  *Latency
			want []float64
		}{"pickup": {row.Pickup, w.pickup}, "submit": {row.Submit, w.submit}} {
			switch {
			case c.want == nil && c.got != nil:
				t.Errorf("window %d: %s %+v, want none", i, name, c.got)
			case c.want != nil && (c.got == nil || c.got.P50 != c.want[0] || c.got.P99 != c.want[1]):
				t.Errorf("window %d: %s %+v, want p50 %v, p99 %v", i, name, c.got, c.want[0], c.want[1])
			}
		}
	}
	if p := l.pickupOver(func(i int) bool { return i == 1 }); p == nil || p.Samples != 2 || p.P99 != 50 {
		t.Errorf("pickup over window 1: %+v", p)
	}
	if p := l.pickupOver(func(int) bool { return true }); p == nil || p.Samples != 5 {
		t.Errorf("pickup over the run: %+v, want 5 samples", p)
	}
}

// The summary reads the pinned windows, the sizes around the pin, and when the size came back;
// the checks read it against the goals.
func TestSteadySummaryAndChecks(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	// 10 windows of 10 s, a load of 100 s at 10 tasks/s; the pin holds over windows 2 to 4. Each
	// window offers 100 tasks, picked up in 5 ms, except in the pin: 150 ms, and only 90 complete.
	sizes := make([]int, 1000)
	for i := range sizes {
		sizes[i] = 1
	}
	l := newSteadyLog(start, 10*time.Second, 100*time.Second, sizes)
	res := &SteadyResult{DurationSeconds: 100, Tasks: 1000, Pin: &PinReport{AtSeconds: 20, ForSeconds: 30, HeldFromSeconds: 20, HeldToSeconds: 50,
		TablesBefore: &TableStats{AtSeconds: 20, SizeBytes: 1000, DeadTuples: 10},
		TablesAtEnd:  &TableStats{AtSeconds: 50, SizeBytes: 2000, DeadTuples: 5000}}}
	for i := range 1000 {
		w := i / 100
		sent := start.Add(time.Duration(i) * 100 * time.Millisecond)
		id := "t" + string(rune('a'+w)) + strings.Repeat("x", i%100)
		l.sending(i, sent)
		l.submitted(i, id, sent, sent)
		pickup := ms(5)
		if w >= 2 && w <= 4 {
			pickup = ms(150)
		}
		l.started(id, ref{id, "t0"}, nil, sent.Add(pickup))
		if !(w >= 2 && w <= 4) || i%100 < 90 {
			l.completedID(id, sent.Add(pickup+ms(1)))
		}
	}
	sizesAt := []int64{900, 1000, 1500, 1800, 2100, 1500, 1090, 1050, 1000, 1000}
	for i := range 10 {
		w := l.row(i)
		w.PinHeld = i >= 2 && i <= 4
		w.Tables = &TableStats{AtSeconds: w.EndSeconds, SizeBytes: sizesAt[i], DeadTuples: 7}
		res.Windows = append(res.Windows, w)
	}
	s := summarize(l, res)
	if s.OfferedPerSec != 10 || s.ScheduleCompletedTasks != 970 || s.CompletedPerSec != 9.7 {
		t.Errorf("rates: %+v", s)
	}
	if s.PinnedOfferedTasks != 300 || s.PinnedCompletedTasks != 270 || s.PickupPinned == nil || s.PickupPinned.P50 != 150 ||
		s.Pickup == nil || s.Pickup.P50 != 5 || s.Pickup.Samples != 1000 {
		t.Errorf("pinned part: %+v, pickup %+v, pinned %+v", s, s.Pickup, s.PickupPinned)
	}
	if *s.SizeBeforePinBytes != 1000 || *s.SizeAtPinEndBytes != 2000 || *s.SizeAtEndBytes != 1000 || *s.DeadAtPinEnd != 5000 || *s.DeadAtEnd != 7 {
		t.Errorf("sizes: %+v", s)
	}
	// Within 10% of 1000: 1090 at the end of window 6, 70 s in, 20 s after the pin.
	if s.SizeBackSeconds == nil || *s.SizeBackSeconds != 20 || *s.ObservedAfterPinSeconds != 50 {
		t.Errorf("size back after %v, observed %v after the pin; want 20 and 50", s.SizeBackSeconds, s.ObservedAfterPinSeconds)
	}
	res.Summary = s
	got := checks(res)
	want := []GoalCheck{
		{"pickup p99 < 100 ms during the pin", checkMissed, "p99 150.00 ms (over the run 150.00 ms)"},
		{"completions keep up with the offered rate during the pin", checkMissed, "270 of 300 offered tasks completed (90.0%, at least 99% wanted)"},
		{"hot tables back to their size before the pin (within 10%) within 5m of its end", checkMet, "back 20s after the pin ended"},
	}
	for i := range want {
		if i >= len(got) || got[i] != want[i] {
			t.Errorf("checks:\n%+v\nwant\n%+v", got, want)
			break
		}
	}

	// Never back: missed once five minutes were watched, n/a before.
	never := *res
	never.Summary.SizeBackSeconds = nil
	for _, c := range []struct {
		observed float64
		status   string
		detail   string
	}{
		{300, checkMissed, "not within the run, which went on 5m after the pin"},
		{50, checkNotApplied, "not back by the run's end, 50s after the pin: observe at least 5m after it"},
	} {
		never.Summary.ObservedAfterPinSeconds = &c.observed
		if got := checks(&never)[2]; got.Status != c.status || !strings.HasPrefix(got.Detail, c.detail) {
			t.Errorf("observed %vs after the pin: %+v, want %s: %s", c.observed, got, c.status, c.detail)
		}
	}

	// With autovacuum off, nothing could bring the size back.
	off := false
	never.Autovacuum = &off
	if got := checks(&never)[2]; got.Status != checkNotApplied || !strings.HasPrefix(got.Detail, "autovacuum is off") {
		t.Errorf("autovacuum off: %+v", got)
	}

	// Without a pin, the run as a whole: 970 of 1000 completed in the schedule.
	nopin := *res
	nopin.Pin = nil
	nopin.Summary = summarize(l, &nopin)
	got = checks(&nopin)
	if got[0].Goal != "pickup p99 < 100 ms over the run" || got[0].Status != checkMissed ||
		got[1].Detail != "970 of 1000 offered tasks completed (97.0%, at least 99% wanted)" || got[2].Status != checkNotApplied {
		t.Errorf("without a pin: %+v", got)
	}
	if nopin.Summary.PickupPinned != nil || nopin.Summary.SizeBeforePinBytes != nil || nopin.Summary.SizeBackSeconds != nil {
		t.Errorf("pin figures without a pin: %+v", nopin.Summary)
	}
}

// The size counts back at the pin's end itself when it never grew past the slack.
func TestSteadySizeBackAtThePinsEnd(t *testing.T) {
	t.Parallel()
	p := &PinReport{HeldToSeconds: 30, TablesBefore: &TableStats{SizeBytes: 1000}, TablesAtEnd: &TableStats{AtSeconds: 30.2, SizeBytes: 1100}}
	if got := sizeBack(p, nil); got == nil || math.Abs(*got-0.2) > 1e-9 {
		t.Errorf("back after %v, want 0.2", got)
	}
	p.TablesAtEnd.SizeBytes = 1101
	wins := []SteadyWindow{{Tables: &TableStats{AtSeconds: 20, SizeBytes: 900}}, {Tables: &TableStats{AtSeconds: 40, SizeBytes: 1200}}}
	if got := sizeBack(p, wins); got != nil {
		t.Errorf("back after %v: a look before the pin's end does not count", *got)
	}
}

// The steady table: the header, a row per window ("-" where the store has no figure), the
// summary and the checks.
func TestSteadyWriteTable(t *testing.T) {
	t.Parallel()
	depth := 12
	cpu := 2.5
	r := &SteadyResult{Store: "postgres", Via: ViaSDK, Workers: 64, Batch: 8, JobSize: 1, RateTasksPerSec: 1000, DurationSeconds: 60,
		AfterSeconds: 300, WindowSeconds: 10, Tasks: 60000, Jobs: 60000, HotTables: HotTables,
		Pin:    &PinReport{AtSeconds: 15, ForSeconds: 30, HeldFromSeconds: 15.002, HeldToSeconds: 45.001, XID: 4242},
		Pacing: &Pacing{RateTasksPerSec: 1000, SubmitTasksPerSec: 999.9, MaxLagMs: 3.5},
		Windows: []SteadyWindow{
			{StartSeconds: 0, EndSeconds: 10, OfferedPerSec: 1000, CompletedPerSec: 998, Pickup: &Latency{P50: 1.5, P99: 9.25},
				Submit: &Latency{P99: 4}, QueueDepth: &depth, Tables: &TableStats{DeadTuples: 321, SizeBytes: 5 << 20}},
			{StartSeconds: 10, EndSeconds: 20, PinHeld: true, OfferedPerSec: 1000, CompletedPerSec: 1000},
		},
		Checks:           []GoalCheck{{"pickup p99 < 100 ms during the pin", checkMet, "p99 9.25 ms"}},
		ServerCPUSeconds: &cpu,
	}
	off := false
	r.Autovacuum = &off
	size, dead := int64(5<<20), int64(321)
	r.Summary = SteadySummary{OfferedPerSec: 1000, CompletedPerSec: 999.5, ScheduleCompletedTasks: 59970, Pickup: &Latency{P50: 1.5, P95: 5, P99: 9.25},
		SizeBeforePinBytes: &size, SizeAtPinEndBytes: &size, SizeAtEndBytes: &size, DeadBeforePin: &dead, DeadAtPinEnd: &dead, DeadAtEnd: &dead}
	var b strings.Builder
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{
		`store +postgres`, `workers +64, via sdk \(batch 8\)`, `schedule +1000 tasks/s for 1m, jobs of 1: 60000 tasks in 60000 jobs`,
		`after +5m more, no load offered`, `pin +at 15s for 30s: an idle transaction holds the xmin horizon`,
		`hot tables +jobs, tasks, task_deps, attempts, events, outbox`, `window +10s`,
		`autovacuum +off on the database server: nothing reclaims dead tuples, pin or not`,
		`window +pin +offered/s +completed/s +pickup ms p50 / p99 +submit ms p99 +queue depth +dead tuples +hot tables`,
		`0s-10s +1000 +998 +1.50 / 9.25 +4.00 +12 +321 +5.0 MiB`,
		`10s-20s +held +1000 +1000 +- +- +- +- +-`,
		`offered +1000.0 tasks/s over the schedule: 60000 tasks`,
		`completed +999.5 tasks/s over the schedule \(59970 tasks in it\), every task by the run's end \(20s\)`,
		`pickup ms p50 / p95 / p99 +over the run 1.50 / 5.00 / 9.25; during the pin n/a`,
		`submitted tasks/s +1000, on schedule \(max lag 3.5 ms\)`,
		`pin held +from 15.002s to 45.001s \(xid 4242\)`,
		`hot tables +before the pin 5.0 MiB \(321 dead tuples\), at its end 5.0 MiB \(321\), at the run's end 5.0 MiB \(321\)`,
		`size back within 10% +not within the run`,
		`server CPU seconds +2.50`, `server peak RSS +unknown`,
		`met +pickup p99 < 100 ms during the pin: p99 9.25 ms`,
	} {
		if !regexp.MustCompile(`(?m)^` + row + ` *$`).MatchString(b.String()) {
			t.Errorf("no row %q in\n%s", row, b.String())
		}
	}
}

func TestFmtDur(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{5 * time.Minute: "5m", time.Hour: "1h", 90 * time.Second: "1m30s",
		1500 * time.Millisecond: "1.5s", 2*time.Hour + time.Minute: "2h1m"} {
		if got := fmtDur(d); got != want {
			t.Errorf("fmtDur(%v) = %q, want %q", d, got, want)
		}
	}
}
