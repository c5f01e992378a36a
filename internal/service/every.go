package service

import (
	"context"
	"log/slog"
	"time"

	"github.com/jonboulle/clockwork"
)

// Env is what a periodic service runs on. Zero fields take their defaults.
type Env struct {
	Clock  clockwork.Clock // default the real clock
	Logger *slog.Logger    // default slog.Default()
	// Transient reports whether a pass failed because the store is unavailable for a moment: such
	// a failure is logged as a warning (the next pass tries again), any other as an error. Nil:
	// every failure is an error.
	Transient func(error) bool
}

// Periodic is a Service that runs a pass at once and then again after each wait, until it is
// stopped. A failed pass is logged with the service's name and does not end the service.
type Periodic struct {
	Loop
	name     string
	interval time.Duration
	pass     func(context.Context) error
	env      Env
	wake     func() <-chan struct{}
	next     func() (time.Duration, bool)
}

// Every returns a stopped periodic service named name that runs pass every interval, counted
// from the end of the previous pass.
func Every(name string, interval time.Duration, env Env, pass func(context.Context) error) *Periodic {
	if env.Clock == nil {
		env.Clock = clockwork.NewRealClock()
	}
	if env.Logger == nil {
		env.Logger = slog.Default()
	}
	return &Periodic{name: name, interval: interval, pass: pass, env: env}
}

// WakeOn makes the wait after a pass end early when the channel wake returns closes. wake is
// called before each pass, so that a signal given while the pass runs is not missed. It returns
// p; call it before Start.
func (p *Periodic) WakeOn(wake func() <-chan struct{}) *Periodic {
	p.wake = wake
	return p
}

// WaitBy makes next say how long to wait after each pass instead of the interval (0 runs the next
// pass at once), and whether a wake-up (WakeOn) may end that wait early. It returns p; call it
// before Start.
func (p *Periodic) WaitBy(next func() (wait time.Duration, wakeable bool)) *Periodic {
	p.next = next
	return p
}

// Name is the service's name, as its logs and its start errors give it.
func (p *Periodic) Name() string { return p.name }

// Start runs the service until Stop or until ctx ends.
func (p *Periodic) Start(ctx context.Context) error { return p.Run(ctx, p.Serve) }

// Serve runs the passes in the calling goroutine until ctx ends: for a service that runs them
// beside other goroutines of its own (call it instead of Start).
func (p *Periodic) Serve(ctx context.Context) {
	for {
		var woken <-chan struct{}
		if p.wake != nil {
			woken = p.wake()
		}
		p.RunPass(ctx)
		wait := p.interval
		if p.next != nil {
			var wakeable bool
			if wait, wakeable = p.next(); !wakeable {
				woken = nil
			}
		}
		if wait <= 0 {
			if ctx.Err() != nil {
				return
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-woken:
		case <-p.env.Clock.After(wait):
		}
	}
}

// RunPass runs one pass and logs its failure, if any, as the service does; it returns the pass's
// error.
func (p *Periodic) RunPass(ctx context.Context) error {
	err := p.pass(ctx)
	LogFailure(ctx, p.env, p.name, err)
	return err
}

// LogFailure logs a failed pass of the service named name: a warning when env.Transient says the
// store is unavailable for a moment, else an error. Nothing when err is nil or ctx has ended.
func LogFailure(ctx context.Context, env Env, name string, err error) {
	if err == nil || ctx.Err() != nil {
		return
	}
	level := slog.LevelError
	if env.Transient != nil && env.Transient(err) {
		level = slog.LevelWarn
	}
	logger := env.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger.Log(ctx, level, "service pass failed", "service", name, "err", err)
}
