// Package maintenance holds the services that keep a Baton store and its transport in order
// beside the lifecycle: the outbox relay, retention of finished jobs, and the reconciler of a
// wake-up transport. Each runs over the store, a clock and a logger only, on every replica.
package maintenance

import (
	"context"
	"log/slog"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/baton-dev/baton/internal/service"
	"github.com/baton-dev/baton/internal/store"
)

// Env is what every maintenance service runs on. Zero fields take their defaults.
type Env struct {
	Store  store.Store
	Clock  clockwork.Clock // default the real clock
	Logger *slog.Logger    // default slog.Default()
}

func (e Env) withDefaults() Env {
	if e.Clock == nil {
		e.Clock = clockwork.NewRealClock()
	}
	if e.Logger == nil {
		e.Logger = slog.Default()
	}
	return e
}

// now is the clock's time at the store's precision (milliseconds, UTC), as the lifecycle writes it.
func (e Env) now() time.Time {
	return time.UnixMilli(e.Clock.Now().UnixMilli()).UTC()
}

// every returns a stopped service named name that runs pass each interval on the env's clock and
// logger; a pass that failed while the store was unavailable is logged as a warning.
func (e Env) every(name string, interval time.Duration, pass func(context.Context) error) *service.Periodic {
	return service.Every(name, interval, service.Env{Clock: e.Clock, Logger: e.Logger, Transient: e.Store.Transient}, pass)
}
