// Package udfrun runs bundle tasks where no worker was deployed for them: Local follows the
// pipelines a dev server has deployed and runs the tasks of every queue whose jobs all run
// bundles, in this process, through the same wrapper, cache and sandbox as `baton worker`.
package udfrun

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/baton-dev/baton/internal/dataplane/specs"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/wrapper"
	"github.com/baton-dev/baton/worker"
)

// Config configures a Local runner.
type Config struct {
	Store store.Store
	// Wrapper runs each task (its Command nil: bundles only).
	Wrapper *wrapper.Wrapper
	// InternalURL is the server's /internal/* listener, and Options the worker's (client
	// certificate, logger, ...).
	InternalURL string
	Options     []worker.Option
	// OnPull says whether a lambda job's tasks of operator op are pulled (no push target), as
	// the data plane's Config.LambdaOnPull; nil: every lambda job's are pushed.
	OnPull func(op string) bool
	// Every is how often the deployed pipelines are read again (default 2 s).
	Every time.Duration
	Log   *slog.Logger
}

// Local runs the bundle tasks of a server's own pull queues.
type Local struct {
	cfg   Config
	specs specs.Cache // versions never change: each is read and decoded once
}

// NewLocal returns the runner c configures.
func NewLocal(c Config) *Local {
	if c.Every <= 0 {
		c.Every = 2 * time.Second
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return &Local{cfg: c}
}

// Run follows the deployed pipelines until ctx ends: whenever the queues that only bundle jobs
// use (and the task names on them) change, it starts a worker for the new set, and lets the
// previous one finish what it runs.
func (l *Local) Run(ctx context.Context) {
	var current map[string][]string // queue → task names
	var stop context.CancelFunc
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	tick := time.NewTicker(l.cfg.Every)
	defer tick.Stop()
	for {
		queues, err := l.bundleQueues(ctx)
		if err != nil && ctx.Err() == nil {
			l.cfg.Log.Warn("bundle runner: read the deployed pipelines", "err", err)
		}
		if err == nil && !maps.EqualFunc(queues, current, slices.Equal) {
			if stop != nil {
				stop() // the old worker finishes its tasks (its shutdown timeout) and stops
				stop = nil
			}
			current = queues
			if len(queues) > 0 {
				wctx, cancel := context.WithCancel(ctx)
				stop = cancel
				go l.serve(wctx, queues)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// serve runs one worker on queues until ctx ends.
func (l *Local) serve(ctx context.Context, queues map[string][]string) {
	opts := append(slices.Clone(l.cfg.Options), worker.WithQueues(slices.Sorted(maps.Keys(queues))...),
		worker.WithWorkerID("baton-dev-bundles"))
	wk, err := worker.New(l.cfg.InternalURL, opts...)
	if err != nil {
		l.cfg.Log.Error("bundle runner: start a worker", "err", err)
		return
	}
	for _, names := range queues {
		for _, name := range names {
			wk.Handle(name, l.cfg.Wrapper.Handle)
		}
	}
	l.cfg.Log.Info("running bundle tasks in this process", "queues", slices.Sorted(maps.Keys(queues)))
	if err := wk.Run(ctx); err != nil && ctx.Err() == nil {
		l.cfg.Log.Error("bundle runner: worker stopped", "err", err)
	}
}

// bundleQueues are the pull queues of the active and building versions of every tenant's
// pipelines on which every job runs a bundle, with the task names (operators) of those jobs.
func (l *Local) bundleQueues(ctx context.Context) (map[string][]string, error) {
	keys, err := l.cfg.Store.APIKeyList(ctx)
	if err != nil {
		return nil, err
	}
	tenants := map[string]bool{}
	for _, k := range keys {
		tenants[k.Tenant] = true
	}
	names, mixed := map[string][]string{}, map[string]bool{}
	for tenant := range tenants {
		ps, err := l.cfg.Store.PipelineList(ctx, tenant)
		if err != nil {
			return nil, err
		}
		for _, p := range ps {
			for _, v := range []string{p.ActiveVersion, p.BuildingVersion} {
				if v == "" {
					continue
				}
				s, err := l.specs.Get(ctx, l.cfg.Store, tenant, p.Name, v)
				if err != nil {
					return nil, err
				}
				for _, j := range s.Jobs {
					if j.TaskRuntime(l.cfg.OnPull) != "pull" || j.TaskQueue() == specs.ControlQueue {
						continue
					}
					q := j.TaskQueue()
					if j.UDF == nil {
						mixed[q] = true
						continue
					}
					if !slices.Contains(names[q], j.Operator) {
						names[q] = append(names[q], j.Operator)
					}
				}
			}
		}
	}
	for q := range mixed {
		delete(names, q) // a worker's queue: its tasks that run no bundle are not ours to run
	}
	for _, ns := range names {
		slices.Sort(ns)
	}
	return names, nil
}
