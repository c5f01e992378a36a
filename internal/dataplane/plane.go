// Package dataplane moves data between tasks on top of the lifecycle core (package dispatch):
// pipeline deploys, builds of changed versions beside the active one, cutovers and rollbacks, the
// routing of dataset events to consumer tasks, sources (cron, always_on, manual, webhook), the
// dataset registry and its cutover, and the Buffer Queue that hands buffered batches to sinks.
package dataplane

import (
	"context"
	"log/slog"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/baton-dev/baton/internal/blob"
	"github.com/baton-dev/baton/internal/dataplane/bufferqueue"
	"github.com/baton-dev/baton/internal/dataplane/intake"
	"github.com/baton-dev/baton/internal/dataplane/reads"
	"github.com/baton-dev/baton/internal/dataplane/specs"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/query"
	"github.com/baton-dev/baton/internal/service"
	"github.com/baton-dev/baton/internal/store"
)

// Config configures a Plane. Zero fields take their defaults.
type Config struct {
	// Blob is the object storage of buffered datasets' batches; nil refuses buffered publishes.
	Blob *blob.Store
	// Tables creates buffered datasets' tables when a pipeline is deployed; nil creates none.
	Tables DatasetTables
	Buffer bufferqueue.Config
	// LambdaOnPull, when set, says whether the tasks of a lambda job whose operator is op are
	// handed to pull workers of the job's queue instead of being pushed. baton dev sets it to
	// "op has no push target", so that a fresh dev server runs every lambda job; a server leaves
	// it nil, and such tasks wait, pending, for a push target.
	LambdaOnPull func(op string) bool
	// Bundles pins the bundles jobs run when they are deployed; nil refuses every job with a udf.
	Bundles Bundles
	// Query is the Query Service's engine; nil answers every query query.ErrUnavailable.
	Query query.Engine
	// QueryTimeout and TaskQueryTimeout are how long a user's and a task's statement may run
	// (default query.UserTimeout and query.TaskTimeout).
	QueryTimeout, TaskQueryTimeout time.Duration
}

// Plane is the data plane of one server over its dispatcher.
type Plane struct {
	d     *dispatch.Dispatcher
	store store.Store
	clock clockwork.Clock
	log   *slog.Logger
	cfg   Config
	specs specs.Cache // the pipeline versions' specs read so far
	// intake takes in the dataset events and versions workers report (the dispatcher's hook).
	intake *intake.Intake
	// reads answers reads of datasets: rows and queries.
	reads *reads.Reader
	// buffers is the Buffer Queue of buffered datasets' batches.
	buffers *bufferqueue.Queue
	// routing is signalled by a transaction that queued dataset events for the router.
	routing dispatch.Signal
	// afterDeployCheck, when set, runs once a deploy's document has been checked against the
	// tenant's pipelines, before anything is written: tests race another deploy there.
	afterDeployCheck func()
}

// New returns the data plane over d and makes it d's hook, so that the dataset events and
// versions workers report reach it. Call it before d serves.
func New(d *dispatch.Dispatcher, cfg Config) *Plane {
	dp := &Plane{d: d, store: d.Store(), clock: d.Clock(), log: d.Logger(), cfg: cfg}
	dp.intake = intake.New(d, cfg.Blob, &dp.routing)
	d.SetHook(dp.intake)
	var tables reads.Tables
	if cfg.Tables != nil {
		tables = cfg.Tables
	}
	dp.buffers = bufferqueue.New(d, cfg.Blob, cfg.Buffer, &dp.routing)
	dp.reads = reads.New(d, reads.Config{Tables: tables, Blob: cfg.Blob, Query: cfg.Query,
		QueryTimeout: cfg.QueryTimeout, TaskQueryTimeout: cfg.TaskQueryTimeout})
	return dp
}

// Intake returns the plane's part in workers' reports: the dispatcher's hook.
func (dp *Plane) Intake() *intake.Intake { return dp.intake }

// Buffers returns the plane's Buffer Queue.
func (dp *Plane) Buffers() *bufferqueue.Queue { return dp.buffers }

// Reads returns the plane's reads of datasets: rows and queries.
func (dp *Plane) Reads() *reads.Reader { return dp.reads }

// Dispatcher returns the lifecycle core the plane runs on.
func (dp *Plane) Dispatcher() *dispatch.Dispatcher { return dp.d }

// now is the dispatcher's clock at the store's millisecond precision.
func (dp *Plane) now() time.Time { return dp.d.Now() }

// cmpOr is v when it is positive, else def.
func cmpOr[T int | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

// every returns a stopped service named name that runs pass each interval, counted from the end
// of the previous pass, on the plane's clock and logger; a pass that failed while the store was
// unavailable is logged as a warning.
func (dp *Plane) every(name string, interval time.Duration, pass func(context.Context) error) *service.Periodic {
	return service.Every(name, interval, dp.serviceEnv(), pass)
}

// serviceEnv is what the plane's services run on.
func (dp *Plane) serviceEnv() service.Env {
	return service.Env{Clock: dp.clock, Logger: dp.log, Transient: dp.d.Unavailable}
}
