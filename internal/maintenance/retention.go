package maintenance

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/baton-dev/baton/internal/metrics"
	"github.com/baton-dev/baton/internal/service"
	"github.com/baton-dev/baton/internal/store"
)

// The defaults of baton dev's and baton server's retention flags.
const (
	DefaultRetention           = 30 * 24 * time.Hour
	DefaultDeadLetterRetention = 90 * 24 * time.Hour
)

// RetentionConfig configures a Retention. The zero config deletes nothing.
type RetentionConfig struct {
	// Retention is how long a finished job is kept after it finished; 0 keeps jobs forever.
	Retention time.Duration
	// Tenants overrides Retention per tenant; 0 keeps the tenant's jobs forever.
	Tenants map[string]time.Duration
	// DeadLetterRetention is how long a finished job is kept after a dead letter of its own
	// (until a resume takes the dead letter back): at least Retention, or 0 to keep such jobs
	// until they are resumed.
	DeadLetterRetention time.Duration
	Every               time.Duration // between passes; default 1 min
	Batch               int           // jobs deleted per transaction; default 100
	Pause               time.Duration // between the batches of a pass; default 100 ms
	// Metrics, when not nil, counts the rows deleted.
	Metrics *metrics.Metrics
}

// Validate reports a setting that cannot work.
func (c RetentionConfig) Validate() error {
	if c.Retention < 0 || c.DeadLetterRetention < 0 {
		return errors.New("maintenance: negative retention")
	}
	for tenant, d := range c.Tenants {
		if d < 0 {
			return fmt.Errorf("maintenance: negative retention for tenant %q", tenant)
		}
	}
	if c.DeadLetterRetention > 0 && c.DeadLetterRetention < c.Retention {
		return fmt.Errorf("maintenance: dead-letter retention %s is below retention %s: a dead letter keeps its job longer, never shorter", c.DeadLetterRetention, c.Retention)
	}
	if c.Every < 0 || c.Batch < 0 || c.Pause < 0 {
		return errors.New("maintenance: negative retention pass setting")
	}
	return nil
}

// Off reports whether c keeps every job forever.
func (c RetentionConfig) Off() bool {
	if c.Retention > 0 {
		return false
	}
	for _, d := range c.Tenants {
		if d > 0 {
			return false
		}
	}
	return true
}

// Retention deletes finished jobs once they expire (store.RetentionPolicy says when), with their
// tasks, dependencies, attempts, events and reports. Each pass deletes batches of Batch jobs, each
// its own short transaction, until a batch comes back short, pausing between batches so as not to
// hold the database. Every replica runs it: on PostgreSQL a batch skips the jobs another
// replica's batch holds, so replicas share the work without waiting on each other.
type Retention struct {
	env Env
	cfg RetentionConfig
	svc *service.Periodic
}

// NewRetention returns a stopped Retention over env's store.
func NewRetention(env Env, cfg RetentionConfig) (*Retention, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Tenants = maps.Clone(cfg.Tenants)
	cfg.Every = cmp.Or(cfg.Every, time.Minute)
	cfg.Batch = cmp.Or(cfg.Batch, 100)
	cfg.Pause = cmp.Or(cfg.Pause, 100*time.Millisecond)
	r := &Retention{env: env.withDefaults(), cfg: cfg}
	r.svc = r.env.every("retention", cfg.Every, r.pass)
	return r, nil
}

// Start runs a pass at once and then every Every, until Stop or until ctx ends. It does nothing
// when the config keeps every job.
func (r *Retention) Start(ctx context.Context) error {
	if r.cfg.Off() {
		return nil
	}
	return r.svc.Start(ctx)
}

// Stop stops the passes and waits for the one under way.
func (r *Retention) Stop() { r.svc.Stop() }

// pass runs RunOnce and logs what it deleted.
func (r *Retention) pass(ctx context.Context) error {
	total, err := r.RunOnce(ctx)
	if total.Jobs > 0 {
		attrs := []any{}
		for _, tc := range total.Tables() {
			attrs = append(attrs, tc.Table, tc.N)
		}
		r.env.Logger.InfoContext(ctx, "retention deleted expired jobs", attrs...)
	}
	return err
}

// RunOnce deletes batches of expired jobs (and query audit records) until one comes back short, pausing Pause between them,
// and returns what it deleted in all.
func (r *Retention) RunOnce(ctx context.Context) (store.RetentionCounts, error) {
	var total store.RetentionCounts
	for {
		n, err := r.DeleteBatch(ctx)
		total.Add(n)
		if err != nil || (n.Jobs < r.cfg.Batch && n.QueryAudit < r.cfg.Batch) {
			return total, err
		}
		select {
		case <-ctx.Done():
			return total, ctx.Err()
		case <-r.env.Clock.After(r.cfg.Pause):
		}
	}
}

// DeleteBatch deletes up to Batch expired jobs in one transaction and returns what it deleted.
func (r *Retention) DeleteBatch(ctx context.Context) (store.RetentionCounts, error) {
	p := store.RetentionPolicy{Now: r.env.now(), Retention: r.cfg.Retention, Tenants: r.cfg.Tenants,
		DeadLetterRetention: r.cfg.DeadLetterRetention, Limit: r.cfg.Batch}
	var n store.RetentionCounts
	err := r.env.Store.InTx(ctx, func(tx store.Tx) error {
		var err error
		n, err = tx.JobDeleteExpired(ctx, p)
		return err
	})
	if err != nil {
		return store.RetentionCounts{}, fmt.Errorf("delete expired jobs: %w", err)
	}
	r.cfg.Metrics.RetentionDeleted(n)
	return n, nil
}
