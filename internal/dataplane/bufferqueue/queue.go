// Package bufferqueue is the Buffer Queue of buffered datasets: a task writes a batch of rows to
// object storage under its own prefix and publishes it (Publish, fenced like every report); the
// publish record is a message that a trusted sink claims (Claim), loads into the dataset's table in
// the data database, and settles (Commit, which queues the dataset event that routing delivers,
// or Fail). A message that fails Config.MaxReceives receives is dead-lettered, and an operator
// can put it back (Retry).
package bufferqueue

import (
	"cmp"
	"time"

	"github.com/baton-dev/baton/internal/blob"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/store"
	"github.com/jonboulle/clockwork"
)

// Queue is the Buffer Queue of one server.
type Queue struct {
	d     *dispatch.Dispatcher
	st    store.Store
	clock clockwork.Clock
	blob  *blob.Store
	cfg   Config
	// routing is signalled by a transaction that queued a dataset event for the router; sinks by
	// one that queued a batch for the sinks.
	routing *dispatch.Signal
	sinks   dispatch.Signal
}

// New returns the Buffer Queue over d's store. b is the object storage batches are written to
// (nil: publishes are refused); routing is signalled by each commit that queues a dataset event.
func New(d *dispatch.Dispatcher, b *blob.Store, cfg Config, routing *dispatch.Signal) *Queue {
	return &Queue{d: d, st: d.Store(), clock: d.Clock(), blob: b, cfg: cfg.withDefaults(), routing: routing}
}

// Config configures the Buffer Queue. Zero fields take their defaults.
type Config struct {
	MaxReceives int           // receives before a message is dead-lettered; default 10
	Visibility  time.Duration // how long a claimed message stays invisible by default; default 1 min
	RetryBase   time.Duration // delay before a failed message is visible again, doubling; default 1 s
	RetryMax    time.Duration // cap of that delay; default 1 min
}

// DefaultConfig holds the defaults.
var DefaultConfig = Config{MaxReceives: 10, Visibility: time.Minute, RetryBase: time.Second, RetryMax: time.Minute}

func (c Config) withDefaults() Config {
	def := DefaultConfig
	return Config{MaxReceives: cmp.Or(c.MaxReceives, def.MaxReceives), Visibility: cmp.Or(c.Visibility, def.Visibility),
		RetryBase: cmp.Or(c.RetryBase, def.RetryBase), RetryMax: cmp.Or(c.RetryMax, def.RetryMax)}
}
