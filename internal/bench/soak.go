package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/baton-dev/baton/client"
)

// SoakConfig is a soak: one worker command (Config.Commands' only one) works jobs submitted at a
// steady Config.Rate for Duration, while the bench samples the command's resident memory.
type SoakConfig struct {
	Duration time.Duration
	// Baseline is when the first sample compared with the end's is taken, from the start of the
	// schedule (default: a minute): by then the worker has warmed up (its caches, its pools).
	Baseline time.Duration
	// MaxGrowthPercent is how much the end's RSS may exceed the baseline's, in percent.
	MaxGrowthPercent float64
	// Sample is how often the RSS is sampled for the peak (default: 2 s).
	Sample time.Duration
}

// Validate checks the soak's settings, and that cfg has the one command and the rate it needs.
func (s *SoakConfig) Validate(cfg *Config) error {
	switch {
	case len(cfg.Commands) != 1:
		return fmt.Errorf("--soak runs one --worker-command, got %d", len(cfg.Commands))
	case cfg.Rate <= 0:
		return errors.New("--soak needs --rate: the steady number of tasks per second to submit")
	case s.Duration <= 0:
		return fmt.Errorf("--soak must be a positive duration, got %s", s.Duration)
	case s.Baseline <= 0 || s.Baseline >= s.Duration:
		return fmt.Errorf("--soak-baseline %s must be above 0 and below --soak %s", s.Baseline, s.Duration)
	case s.MaxGrowthPercent < 0 || math.IsNaN(s.MaxGrowthPercent) || math.IsInf(s.MaxGrowthPercent, 0):
		return fmt.Errorf("--soak-max-growth must be a percentage of at least 0, got %v", s.MaxGrowthPercent)
	case soakTasks(cfg.Rate, s.Duration) < 1:
		return fmt.Errorf("--rate %g for --soak %s submits no task", cfg.Rate, s.Duration)
	}
	return nil
}

func soakTasks(rate float64, d time.Duration) int { return int(math.Round(rate * d.Seconds())) }

// SoakResult is what a soak measured.
type SoakResult struct {
	Store           string  `json:"store"` // sqlite or postgres (set by SoakServer), or external (by the caller)
	Worker          string  `json:"worker"`
	Command         string  `json:"command"`
	Task            string  `json:"task"`
	DAG             string  `json:"dag"`
	JobSize         int     `json:"job_size"`
	Workers         int     `json:"workers"`
	RateTasksPerSec float64 `json:"rate_tasks_per_second"`
	DurationSeconds float64 `json:"duration_seconds"`
	Tasks           int     `json:"tasks"`
	Jobs            int     `json:"jobs"`
	// Pacing is how the submission kept to the rate.
	Pacing *Pacing `json:"pacing"`
	// DrainSeconds is the time from the last submission answered to every job finished: about a
	// job's work for a worker that keeps up, the backlog's for one that does not.
	DrainSeconds float64 `json:"drain_seconds"`

	// The command's process tree's resident memory (the sum of VmRSS): at the baseline, at the
	// end of the schedule (before the drain), the highest sample, and every sample.
	BaselineSeconds  float64     `json:"baseline_seconds"`
	BaselineRSSBytes int64       `json:"baseline_rss_bytes"`
	EndRSSBytes      int64       `json:"end_rss_bytes"`
	PeakRSSBytes     int64       `json:"peak_rss_bytes"`
	Samples          []RSSSample `json:"samples"`
	// GrowthPercent is (end / baseline − 1) × 100; above MaxGrowthPercent the soak fails.
	GrowthPercent    float64 `json:"growth_percent"`
	MaxGrowthPercent float64 `json:"max_growth_percent"`

	WorkerCPUSeconds   *float64 `json:"worker_cpu_seconds"` // the command's process tree, start-up included
	ServerCPUSeconds   *float64 `json:"server_cpu_seconds"` // over the soak, nil when unknown
	ServerPeakRSSBytes *int64   `json:"server_peak_rss_bytes"`
	Stop               string   `json:"stop"` // how the command ended when asked to
}

// RSSSample is the command's resident memory some seconds into the soak.
type RSSSample struct {
	AtSeconds float64 `json:"at_seconds"`
	RSSBytes  int64   `json:"rss_bytes"`
}

// Grew says whether the RSS grew more than allowed.
func (r *SoakResult) Grew() bool { return r.GrowthPercent > r.MaxGrowthPercent }

// soakJobs are the jobs of a soak or a steady run, encoded as they go (a long run has many).
type soakJobs struct {
	shape, task, prefix string
	sizes               []int
}

func (j soakJobs) count() int { return len(j.sizes) }
func (j soakJobs) body(i int) ([]byte, error) {
	return json.Marshal(client.SubmitJobRequest{Name: fmt.Sprintf("%s-%d", j.prefix, i), Tasks: shapeTasks(j.shape, j.sizes[i], j.task, "")})
}

// Soak runs the worker command of cfg.Commands against jobs of cfg.DAG's shape, at most
// cfg.JobSize tasks each, submitted at cfg.Rate tasks per second for soak.Duration; samples the
// command's RSS; waits until every job has finished and checks they all completed; then stops
// the command. A growth above the limit is in the result (Grew), not an error.
func Soak(ctx context.Context, cfg Config, soak SoakConfig) (*SoakResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	soak.Baseline = cmpDur(soak.Baseline, time.Minute)
	soak.Sample = cmpDur(soak.Sample, 2*time.Second)
	if err := soak.Validate(&cfg); err != nil {
		return nil, err
	}
	b := newBench(cfg)
	defer b.hc.CloseIdleConnections()
	cfg = b.cfg
	wc := cfg.Commands[0]
	task := cfg.TaskName + "-soak"
	sizes := jobSizes(soakTasks(cfg.Rate, soak.Duration), cfg.JobSize)
	res := &SoakResult{Worker: wc.Label, Command: wc.Command, Task: task, DAG: cfg.DAG, JobSize: cfg.JobSize, Workers: cfg.Workers,
		RateTasksPerSec: cfg.Rate, DurationSeconds: soak.Duration.Seconds(), Tasks: soakTasks(cfg.Rate, soak.Duration), Jobs: len(sizes),
		BaselineSeconds: soak.Baseline.Seconds(), MaxGrowthPercent: soak.MaxGrowthPercent}

	server0 := b.serverCPU()
	p, err := b.startWorkerCommand(wc, task)
	if err != nil {
		return nil, err
	}
	defer p.stop(0) // on an error: kill it
	start := time.Now()
	// The submission stops should the command exit.
	subCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-p.exited:
			cancel(p.exitedEarly(wc.Label))
		case <-subCtx.Done():
		}
	}()
	smp := &sampler{pid: p.pid(), start: start}
	samplingDone := make(chan struct{})
	go func() {
		defer close(samplingDone)
		smp.run(subCtx, soak.Sample, soak.Baseline)
	}()
	pace := newPacer(sizes, cfg.Rate, start)
	ids, err := b.submit(subCtx, soakJobs{shape: cfg.DAG, task: task, prefix: task, sizes: sizes}, pace)
	submitted := time.Since(start)
	end, endErr := smp.take()
	cause := context.Cause(subCtx) // the command's exit, or ctx's end
	cancel(nil)
	<-samplingDone
	if err != nil {
		return nil, cmpErr(cause, err)
	}
	if endErr != nil {
		return nil, fmt.Errorf("worker command %s: the RSS at the end: %w", wc.Label, endErr)
	}
	res.Pacing = pace.report(cfg.Rate, res.Tasks, submitted)

	drainStart := time.Now()
	if err := b.awaitJobs(ctx, ids, func(d time.Duration) error { return p.sleep(ctx, wc.Label, d) }); err != nil {
		return nil, fmt.Errorf("worker command %s: %w", wc.Label, err)
	}
	res.DrainSeconds = round(time.Since(drainStart).Seconds(), 3)
	if tree, err := ReadTreeStats(p.pid()); err == nil {
		cpu := round(tree.CPUSeconds, 2)
		res.WorkerCPUSeconds = &cpu
	}
	res.ServerCPUSeconds = delta(server0, b.serverCPU())
	if cfg.ServerPID != 0 {
		if st, err := ReadProcStats(cfg.ServerPID); err == nil {
			res.ServerPeakRSSBytes = &st.PeakRSSBytes
		}
	}
	res.Stop = p.stop(commandGrace)
	if _, err := b.verify(ctx, ids); err != nil {
		return nil, fmt.Errorf("worker command %s: %w", wc.Label, err)
	}

	smp.mu.Lock()
	defer smp.mu.Unlock()
	if smp.baseline == nil {
		return nil, fmt.Errorf("worker command %s: no RSS sample at the baseline (%s): %v", wc.Label, soak.Baseline, smp.err)
	}
	res.Samples = smp.samples
	res.BaselineRSSBytes, res.EndRSSBytes = smp.baseline.RSSBytes, end.RSSBytes
	for _, s := range smp.samples {
		res.PeakRSSBytes = max(res.PeakRSSBytes, s.RSSBytes)
	}
	res.GrowthPercent = round((float64(res.EndRSSBytes)/float64(res.BaselineRSSBytes)-1)*100, 2)
	return res, nil
}

func cmpDur(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// sampler samples a process tree's RSS: every interval, and once at the baseline.
type sampler struct {
	pid   int
	start time.Time

	mu       sync.Mutex
	samples  []RSSSample
	baseline *RSSSample
	err      error // the last failed read
}

// take samples now.
func (s *sampler) take() (RSSSample, error) {
	st, err := ReadTreeStats(s.pid)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.err = err
		return RSSSample{}, err
	}
	smp := RSSSample{AtSeconds: round(time.Since(s.start).Seconds(), 3), RSSBytes: st.RSSBytes}
	s.samples = append(s.samples, smp)
	return smp, nil
}

// run samples every interval and at baseline until ctx ends.
func (s *sampler) run(ctx context.Context, interval, baseline time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	base := time.NewTimer(time.Until(s.start.Add(baseline)))
	defer base.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			_, _ = s.take()
		case <-base.C:
			if smp, err := s.take(); err == nil {
				s.mu.Lock()
				s.baseline = &smp
				s.mu.Unlock()
			}
		}
	}
}
