// Package server builds a whole Baton server from its configuration (the dispatcher, the HTTP
// handlers and every background service) and starts and stops it as one Service.
//
// Listen binds a server's listeners and Serve runs a whole server process on them, until its
// context ends. The command (`baton dev`, `baton server`) keeps its flags and printing; tests
// build servers through the same constructor, so what they run is what the command runs.
package server

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"

	"go.opentelemetry.io/otel/trace"

	"github.com/baton-dev/baton/internal/api"
	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/blob"
	"github.com/baton-dev/baton/internal/bundle"
	"github.com/baton-dev/baton/internal/capability"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dataplane/staging"
	"github.com/baton-dev/baton/internal/dataset"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/grant"
	"github.com/baton-dev/baton/internal/maintenance"
	"github.com/baton-dev/baton/internal/metrics"
	"github.com/baton-dev/baton/internal/push"
	"github.com/baton-dev/baton/internal/service"
	"github.com/baton-dev/baton/internal/sink"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/transport"
	"github.com/baton-dev/baton/internal/udf"
	"github.com/baton-dev/baton/internal/ui"
)

// Config is what a server is built from. Only Store is required.
type Config struct {
	Store  store.Store
	Logger *slog.Logger // default slog.Default()

	// Dispatch configures the dispatcher. New sets its Logger, Metrics, TracerProvider and
	// StoreWakeups from the fields below.
	Dispatch dispatch.Config
	// DataPlane configures the data plane over the dispatcher. New sets its Blob and Tables from
	// the fields below.
	DataPlane dataplane.Config
	// API configures the HTTP adapters. New sets its Dispatcher, DataPlane, Auth, Tokens, Logger,
	// Wakeups, Capabilities, Minter, Dashboard, Metrics and TracerProvider.
	API api.Config
	// UI configures the dashboard. New sets its Dispatcher, DataPlane, Auth, Logger, Done and
	// Metrics.
	UI ui.Config
	// Limits are the producer API keys' rate limit and daily quota.
	Limits auth.Limits
	// Push configures the delivery of push tasks to their HTTP targets.
	Push push.Config

	// Blob is the object storage of batch artifacts, datasets and user code bundles; nil: none
	// (and no bundle can be uploaded).
	Blob *blob.Store
	// BundleLimits are the checks an uploaded bundle passes (bundle.DefaultLimits where zero).
	BundleLimits bundle.Limits
	// Credentials configure minting task credentials, used when Blob is an S3 bucket.
	Credentials grant.MinterOptions
	// Data is the data database of buffered datasets; nil: none.
	Data *dataset.DB
	// Transport carries wake-ups to workers (redis, nats); nil: workers find work in the store.
	// The server uses it and does not close it.
	Transport transport.Transport

	// Metrics counts what the server does, for a metrics listener; nil counts nothing.
	Metrics        *metrics.Metrics
	TracerProvider trace.TracerProvider // nil traces nothing

	Retention maintenance.RetentionConfig
	// Staging configures the collector of replace outputs' uncommitted staging folders; it runs
	// only with Blob.
	Staging   staging.Config
	Reconcile maintenance.ReconcilerConfig // used with a Transport
	Relay     maintenance.RelayConfig      // New sets its Publisher and Wake

	// Sink, when set, runs a sink in this process (baton dev, baton server --sink). New sets its
	// Queue, Blob, Data, Logger and, with a Transport, its Wakeups (a consumer named
	// SinkConsumer).
	Sink         *sink.Config
	SinkConsumer string
	// ControllerID is the worker id of the server's own dispatcher-runtime tasks; default
	// "baton-server".
	ControllerID string
}

// Server is a built server: its dispatcher, its HTTP adapters and its services.
type Server struct {
	Dispatcher *dispatch.Dispatcher
	DataPlane  *dataplane.Plane
	API        *api.Server
	Metrics    *metrics.Metrics // nil when the config had none

	store     store.Store
	log       *slog.Logger
	pusher    *push.Deliverer
	dashDone  chan struct{}
	services  service.Group // in start order; stopped in reverse
	consumers []transport.Consumer

	mu        sync.Mutex
	started   bool
	drainOnce sync.Once
	stopOnce  sync.Once
}

var _ service.Service = (*Server)(nil)

// New builds a server from cfg; nothing runs until Start.
func New(cfg Config) (*Server, error) {
	if cfg.Store == nil {
		return nil, errors.New("server: no store")
	}
	log := cmp.Or(cfg.Logger, slog.Default())
	st := cfg.Store

	dcfg := cfg.Dispatch
	dcfg.Logger, dcfg.Metrics, dcfg.TracerProvider = log, cfg.Metrics, cfg.TracerProvider
	dcfg.StoreWakeups = cfg.Transport == nil
	var minter *grant.Minter
	var storageRoot string
	if cfg.Blob != nil {
		storageRoot = cfg.Blob.Root()
		if cfg.Blob.S3() != nil {
			var err error
			if minter, err = grant.NewMinter(cfg.Blob, cfg.Credentials); err != nil {
				return nil, err
			}
		}
	}
	d, err := dispatch.New(st, dcfg)
	if err != nil {
		return nil, err
	}
	pcfg := cfg.DataPlane
	// The tenants' user code bundles, kept beside the batches: deploys pin them, attempts
	// download them.
	var bundles *udf.Registry
	if cfg.Blob != nil {
		pcfg.Blob = cfg.Blob
		bundles = udf.New(udf.Config{Store: st, Blob: cfg.Blob, Limits: cfg.BundleLimits})
		pcfg.Bundles = bundles
	}
	if cfg.Data != nil {
		pcfg.Tables = dataplane.DatasetDB{DB: cfg.Data}
	}
	dp := dataplane.New(d, pcfg)
	authn := auth.NewAuthenticator(st, cfg.Limits, nil)
	// The dashboard's live pages end when the server drains, like the API's event streams.
	dashDone := make(chan struct{})
	ucfg := cfg.UI
	ucfg.Dispatcher, ucfg.DataPlane, ucfg.Auth, ucfg.Logger, ucfg.Done, ucfg.Metrics = d, dp, authn, log, dashDone, cfg.Metrics
	ucfg.Workers = st
	dash, err := ui.New(ucfg)
	if err != nil {
		return nil, err
	}
	acfg := cfg.API
	// The capability tokens of task attempts: minted at claims (every dialect) and at push
	// deliveries, checked by the task-scoped and callback dialects.
	caps := capability.New(capability.Config{Tokens: auth.NewTokens(st, nil), StorageRoot: storageRoot, Logger: log, Dispatcher: d})
	acfg.Dispatcher, acfg.DataPlane, acfg.Auth, acfg.Capabilities, acfg.Logger = d, dp, authn, caps, log
	// A transport whose wake-ups are stream entries lets stream-worker claims hand out their ids.
	acfg.Wakeups, _ = cfg.Transport.(transport.MessageIDs)
	acfg.Minter, acfg.Dashboard, acfg.Bundles, acfg.Workers = minter, dash, bundles, st
	acfg.Metrics, acfg.TracerProvider = cfg.Metrics, cfg.TracerProvider
	a := api.New(acfg)

	s := &Server{Dispatcher: d, DataPlane: dp, API: a, Metrics: cfg.Metrics, store: st, log: log, dashDone: dashDone}
	// Wake long-polling claimers when another replica makes a task ready (PostgreSQL).
	s.services.Add("wake-up listener", service.Func(d.ListenForWakeups))
	if cfg.Metrics != nil {
		// The tasks and outbox gauges are counted in the background, never per scrape.
		s.services.Add("metrics refresh", service.Func(func(ctx context.Context) {
			cfg.Metrics.RefreshLoop(ctx, st, metrics.DefaultRefreshEvery, log)
		}))
	}
	s.services.Add("reaper", d.NewReaper())
	// With the store transport workers find work in the store, so the relay only marks wake-ups
	// sent and prunes them; with redis or nats it publishes them, and the reconciler heals what
	// the transport loses.
	maint := maintenance.Env{Store: st, Logger: log}
	relay := cfg.Relay
	relay.Publisher, relay.Wake = maintenance.StorePublisher{}, d.TaskReady
	if cfg.Transport != nil {
		relay.Publisher = maintenance.TransportPublisher{Transport: cfg.Transport}
		s.services.Add("wake-up reconciler", maintenance.NewReconciler(maint, cfg.Transport, cfg.Reconcile))
	}
	s.services.Add("outbox relay", maintenance.NewRelay(maint, relay))
	s.services.Add("router", dp.NewRouter(dataplane.RouteConfig{}))
	s.services.Add("pipeline sources", dp.NewSources())
	s.services.Add("pipeline builds", dp.NewBuilds(dataplane.BuildConfig{}))
	retention := cfg.Retention
	retention.Metrics = cfg.Metrics
	ret, err := maintenance.NewRetention(maint, retention)
	if err != nil {
		return nil, err
	}
	// The collector deletes from the data plane's object storage; with none it runs nothing.
	collector := staging.New(cfg.Staging, staging.Deps{Store: st, Blob: pcfg.Blob,
		Env: service.Env{Clock: d.Clock(), Logger: d.Logger(), Transient: d.Unavailable}, ReplaceOutputs: dp.ReplaceOutputDatasets})
	s.services.Add("retention", ret)
	s.services.Add("staging collector", collector)
	s.services.Add("controller", dp.NewController(cmp.Or(cfg.ControllerID, "baton-server")))
	pcfgPush := cfg.Push
	pcfgPush.Token, pcfgPush.Logger = caps.Mint, log
	s.pusher = push.New(d, pcfgPush)
	s.services.Add("push deliverer", s.pusher)
	if cfg.Sink != nil {
		if cfg.Blob == nil || cfg.Data == nil {
			return nil, errors.New("server: a sink needs object storage and a data database")
		}
		scfg := *cfg.Sink
		scfg.Queue, scfg.Blob, scfg.Data, scfg.Logger = SinkQueue{P: dp}, cfg.Blob, cfg.Data, log
		if cfg.Transport != nil {
			scfg.Wakeups = cfg.Transport.NewConsumer(cmp.Or(cfg.SinkConsumer, "sink"))
			s.consumers = append(s.consumers, scfg.Wakeups)
		}
		sk, err := sink.New(scfg)
		if err != nil {
			s.closeConsumers()
			return nil, err
		}
		s.services.Add("sink", service.Func(sk.Run))
	}
	return s, nil
}

// Start starts every service of the server. It fails with service.ErrStarted when called twice.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return service.ErrStarted
	}
	s.started = true
	return s.services.Start(ctx)
}

// ProducerHandler serves the producer API, the dashboard and the API reference.
func (s *Server) ProducerHandler() http.Handler { return s.API.ProducerHandler() }

// InternalHandler serves the worker API of trusted workers and sinks.
func (s *Server) InternalHandler() http.Handler { return s.API.InternalHandler() }

// Drain begins a graceful shutdown while the listeners still serve: long polls and event streams
// end, the dashboard's live pages close, and push deliveries in flight finish (their targets may
// still be calling back). Call it before shutting the HTTP servers down, and Stop after.
func (s *Server) Drain() {
	s.drainOnce.Do(func() {
		s.API.Drain()
		close(s.dashDone)
		s.pusher.Stop()
	})
}

// Stop stops every service, the last started first, and waits for each. It may be called more
// than once, and before Start.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		s.started = true // a server stopped before it started never starts
		s.mu.Unlock()
		s.services.Stop()
		s.closeConsumers()
	})
}

func (s *Server) closeConsumers() {
	for _, c := range s.consumers {
		c.Close()
	}
}
