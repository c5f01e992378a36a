package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"time"
)

// SteadyConfig is a steady run, the load of a queue benchmark: jobs of independent tasks (flat,
// at most Config.JobSize each) submitted at a steady Config.Rate for Duration and worked by the
// Go SDK's in-process workers, read window by window. On PostgreSQL it reads the queue depth and
// the hot tables' dead tuples and size at each window's end, and can hold the database's xmin
// horizon with an idle transaction from PinAt for PinFor, as a forgotten session does: the
// classic cause of a queue table's bloat.
type SteadyConfig struct {
	Duration time.Duration // of the offered load
	Window   time.Duration // the reporting window (default: 10 s)
	// After is how long the windows go on after the offered load, with none offered: the tables
	// seen after the load. The run then goes on to the first window's end at which every task has
	// completed.
	After time.Duration
	// PinAt and PinFor are when the pin begins, from the schedule's start, and how long it holds;
	// PinFor 0: no pin. The pin ends by the end of Duration, so that the tables recover under the
	// load that bloated them.
	PinAt, PinFor time.Duration
	// DatabaseURL is the server's PostgreSQL database, for the tables' figures and the pin; ""
	// without one (SQLite, or a running server whose database is not given).
	DatabaseURL string
	// Store is the result's Store, known before the run so that Live can print it.
	Store string
	// Live, if not nil, receives the table's header as the run starts and each window's row as it
	// closes (WriteSummary writes the rest).
	Live io.Writer
}

// Validate checks the steady run's settings, and that cfg is one it can run: the rate it needs,
// flat jobs and the SDK's workers.
func (s *SteadyConfig) Validate(cfg *Config) error {
	switch {
	case s.Duration <= 0:
		return fmt.Errorf("--steady must be a positive duration, got %s", s.Duration)
	case cfg.Rate <= 0:
		return errors.New("--steady needs --rate: the steady number of tasks per second to offer")
	case cfg.DAG != Flat:
		return fmt.Errorf("--steady offers independent tasks, as a queue holds them: --dag %s does not apply (flat)", cfg.DAG)
	case cfg.Via != ViaSDK:
		return fmt.Errorf("--steady works its tasks with the Go SDK's workers: --via %s does not apply (sdk)", cfg.Via)
	case len(cfg.Commands) > 0:
		return errors.New("--worker-command does not go with --steady: the in-process SDK workers work its tasks")
	case s.Window <= 0 || s.Window > s.Duration:
		return fmt.Errorf("--window %s must be above 0 and at most --steady %s", s.Window, s.Duration)
	case s.After < 0:
		return fmt.Errorf("--steady-after must be 0 or more, got %s", s.After)
	case s.PinAt < 0 || s.PinFor < 0:
		return fmt.Errorf("--pin-at %s and --pin-for %s must be 0 or more", s.PinAt, s.PinFor)
	case s.PinAt > 0 && s.PinFor == 0:
		return errors.New("--pin-at needs --pin-for: how long the pin holds")
	case s.PinFor > 0 && s.DatabaseURL == "":
		return errNoDatabase
	case s.PinAt+s.PinFor > s.Duration:
		return fmt.Errorf("the pin (--pin-at %s, --pin-for %s) must end by the end of --steady %s: the tables recover under the load that bloated them; lengthen --steady",
			s.PinAt, s.PinFor, s.Duration)
	case steadyTasks(cfg.Rate, s.Duration) < 1:
		return fmt.Errorf("--rate %g for --steady %s submits no task", cfg.Rate, s.Duration)
	}
	return nil
}

func steadyTasks(rate float64, d time.Duration) int { return int(math.Round(rate * d.Seconds())) }

// steadySubmitters is how many submitters hold a rate of jobs of jobSize tasks while a POST
// /jobs takes up to 100 ms: each waits for its answer before it takes the next job.
func steadySubmitters(rate float64, jobSize int) int {
	return min(max(int(math.Ceil(rate/float64(jobSize)/10)), 4), 256)
}

// SteadyServer runs a steady run (Steady) on a server it starts, as RunServer does; on
// PostgreSQL it reads (and pins) the server's database. The result's Store is sqlite or postgres.
func SteadyServer(ctx context.Context, cfg Config, sc ServerConfig, steady SteadyConfig) (*SteadyResult, error) {
	steady.DatabaseURL, steady.Store = sc.DatabaseURL, sc.store()
	var res *SteadyResult
	err := withServer(ctx, &cfg, sc, func() (err error) {
		res, err = Steady(ctx, cfg, steady)
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// Steady runs a steady run against a running server: it starts the SDK's workers, submits the
// jobs on the rate's schedule, pins the database's horizon if asked, closes a window every
// sc.Window (reading the database's figures at its end), goes on after the schedule for sc.After
// and until every task has completed, then checks that none of its jobs is still processing. The
// goals it is read against are in the result (Checks), not errors.
func Steady(ctx context.Context, cfg Config, sc SteadyConfig) (*SteadyResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	sc.Window = cmpDur(sc.Window, 10*time.Second)
	if err := sc.Validate(&cfg); err != nil {
		return nil, err
	}
	if cfg.Submitters == 0 {
		cfg.Submitters = steadySubmitters(cfg.Rate, cfg.JobSize)
	}
	b := newBench(cfg)
	defer b.hc.CloseIdleConnections()
	cfg = b.cfg
	sizes := jobSizes(steadyTasks(cfg.Rate, sc.Duration), cfg.JobSize)
	res := &SteadyResult{Store: sc.Store, Via: cfg.Via, Workers: cfg.Workers, Batch: cfg.Batch, JobSize: cfg.JobSize,
		RateTasksPerSec: cfg.Rate, DurationSeconds: sc.Duration.Seconds(), AfterSeconds: sc.After.Seconds(),
		WindowSeconds: sc.Window.Seconds(), Tasks: steadyTasks(cfg.Rate, sc.Duration), Jobs: len(sizes)}

	var pg *pgWatch
	var pin *pinSession
	if sc.DatabaseURL != "" {
		var err error
		if pg, err = openPGWatch(ctx, sc.DatabaseURL, cfg.TaskName); err != nil {
			return nil, err
		}
		defer pg.close()
		res.HotTables, res.Autovacuum = HotTables, &pg.autovacuum
	}
	if sc.PinFor > 0 {
		var err error
		if pin, err = openPin(ctx, sc.DatabaseURL); err != nil {
			return nil, err
		}
		defer pin.close()
		res.Pin = &PinReport{AtSeconds: sc.PinAt.Seconds(), ForSeconds: sc.PinFor.Seconds()}
	}
	if sc.Live != nil {
		if err := res.writeHeader(sc.Live); err != nil {
			return nil, err
		}
	}

	// The workers, the submitters and the pin run beside the windows; on the way out they are
	// stopped and waited for, before the pin's session closes.
	var bg sync.WaitGroup
	defer bg.Wait()
	bgCtx, stopAll := context.WithCancel(ctx)
	defer stopAll()
	server0 := b.serverCPU()
	start := time.Now()
	log := newSteadyLog(start, sc.Window, sc.Duration, sizes)
	b.steady = log
	workCtx, stopWorkers := context.WithCancel(bgCtx)
	defer stopWorkers()
	workersDone := make(chan error, 1)
	bg.Go(func() { workersDone <- b.workSDK(workCtx) })

	type submission struct {
		ids  []string
		err  error
		took time.Duration
	}
	submitDone := make(chan submission, 1)
	pace := newPacer(sizes, cfg.Rate, start)
	bg.Go(func() {
		ids, err := b.submit(bgCtx, soakJobs{shape: Flat, task: cfg.TaskName, prefix: cfg.TaskName, sizes: sizes}, pace)
		submitDone <- submission{ids, err, time.Since(start)}
	})
	var pinDone chan error
	if pin != nil {
		pinDone = make(chan error, 1)
		bg.Go(func() { pinDone <- b.runPin(bgCtx, pin, pg, res.Pin, start) })
	}

	var sub *submission
	// wait waits until t, and fails when something beside the windows did.
	wait := func(t time.Time) error {
		timer := time.NewTimer(time.Until(t))
		defer timer.Stop()
		for {
			select {
			case <-timer.C:
				return nil
			case <-ctx.Done():
				return fmt.Errorf("%d of %d tasks completed when the bench gave up (%w)", log.ackedCount(), res.Tasks, context.Cause(ctx))
			case s := <-submitDone:
				if s.err != nil {
					return s.err
				}
				sub, submitDone = &s, nil
			case err := <-pinDone:
				if err != nil {
					return err
				}
				pinDone = nil
			case err := <-workersDone:
				return fmt.Errorf("the workers stopped: %w", cmpErr(err, errors.New("without an error")))
			}
		}
	}
	pinFrom, pinTo := sc.PinAt.Seconds(), (sc.PinAt + sc.PinFor).Seconds()
	for i := 0; ; i++ {
		end := start.Add(time.Duration(i+1) * sc.Window)
		if err := wait(end); err != nil {
			return nil, err
		}
		w := log.row(i)
		w.PinHeld = pin != nil && w.StartSeconds < pinTo && w.EndSeconds > pinFrom
		if pg != nil {
			depth, err := pg.queueDepth(ctx)
			if err != nil {
				return nil, err
			}
			w.QueueDepth = &depth
			if w.Tables, err = pg.tables(ctx, time.Since(start).Seconds()); err != nil {
				return nil, err
			}
		}
		res.Windows = append(res.Windows, w)
		if sc.Live != nil {
			if err := writeWindowRow(sc.Live, w); err != nil {
				return nil, err
			}
		}
		if end.Sub(start) >= sc.Duration+sc.After && sub != nil && log.ackedCount() == res.Tasks {
			break
		}
	}
	if pinDone != nil { // the pin ended with the schedule, but its last look may still be under way
		if err := <-pinDone; err != nil {
			return nil, err
		}
	}
	if cfg.ServerPID != 0 {
		if st, err := ReadProcStats(cfg.ServerPID); err == nil {
			res.ServerPeakRSSBytes = &st.PeakRSSBytes
		}
	}
	res.ServerCPUSeconds = delta(server0, b.serverCPU())
	stopWorkers()
	if err := <-workersDone; err != nil {
		return nil, fmt.Errorf("stop the workers: %w", err)
	}
	sleep := func(d time.Duration) error {
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	if err := b.awaitJobs(ctx, sub.ids, sleep); err != nil {
		return nil, fmt.Errorf("every task completed, but: %w", err)
	}
	res.Pacing = pace.report(cfg.Rate, res.Tasks, sub.took)
	// The windows again, final: a pickup joins its window once its job's answer is in, which
	// may come a hair after the window's row was printed.
	for i := range res.Windows {
		w := log.row(i)
		w.PinHeld, w.QueueDepth, w.Tables = res.Windows[i].PinHeld, res.Windows[i].QueueDepth, res.Windows[i].Tables
		res.Windows[i] = w
	}
	res.Summary = summarize(log, res)
	res.Checks = checks(res)
	return res, nil
}

// runPin holds the horizon over the pin's span of the schedule, reading the hot tables just
// before it begins and just after it ends, into rep.
func (b *bench) runPin(ctx context.Context, pin *pinSession, pg *pgWatch, rep *PinReport, start time.Time) error {
	at := start.Add(time.Duration(rep.AtSeconds * float64(time.Second)))
	until := at.Add(time.Duration(rep.ForSeconds * float64(time.Second)))
	t := time.NewTimer(time.Until(at))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return nil // the run failed before the pin
	}
	before, err := pg.tables(ctx, time.Since(start).Seconds())
	if err != nil {
		return err
	}
	xid, from, to, err := pin.hold(ctx, until)
	if err != nil {
		return err
	}
	after, err := pg.tables(ctx, time.Since(start).Seconds())
	if err != nil {
		return err
	}
	rep.XID = xid
	rep.HeldFromSeconds, rep.HeldToSeconds = round(from.Sub(start).Seconds(), 3), round(to.Sub(start).Seconds(), 3)
	rep.TablesBefore, rep.TablesAtEnd = before, after
	return nil
}
