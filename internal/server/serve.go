package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/baton-dev/baton/internal/blob"
	"github.com/baton-dev/baton/internal/dataset"
	"github.com/baton-dev/baton/internal/metrics"
	"github.com/baton-dev/baton/internal/transport"
)

// ServeConfig is a server process: the server to build, the listeners it serves, and the
// storage of buffered datasets that Serve opens for it.
type ServeConfig struct {
	// Server is what the server is built from. Serve sets its Blob and Data from the URLs below,
	// a Metrics of its own when there is a metrics listener, SinkConsumer (a name unique to this
	// process) with a Sink, and Push.CallbackBaseURL, when empty, to the producer listener's URL.
	// Serve closes Server.Transport when it returns.
	Server Config
	// Listeners are where the server serves; Metrics, if not nil, serves GET /metrics.
	Listeners Listeners
	HTTP      HTTPLimits // every listener's
	// ShutdownTimeout bounds how long in-flight requests may take to finish on shutdown.
	ShutdownTimeout time.Duration
	// BlobURL is the object storage of buffered datasets' batches (file:// or s3://) and
	// DataDatabaseURL their data database; "": none. A Sink needs both.
	BlobURL, DataDatabaseURL string
	// TransportURL and TransportNamespace are logged with the Transport's name (its password
	// hidden).
	TransportURL, TransportNamespace string
}

// Serve builds the server of cfg and runs its APIs and background loops until ctx ends, then
// shuts down gracefully: the listeners stop accepting, in-flight requests finish (each answered
// only after its transaction committed), the loops stop.
func Serve(ctx context.Context, cfg ServeConfig) error {
	log := cmp.Or(cfg.Server.Logger, slog.Default())
	dp, err := openDataPlane(ctx, cfg.BlobURL, cfg.DataDatabaseURL, cfg.Server.Sink != nil)
	if err != nil {
		return err
	}
	defer dp.close()
	if tr := cfg.Server.Transport; tr != nil {
		defer tr.Close()
		log.Info("wake-up transport", "transport", tr.Name(), "url", redactURL(cfg.TransportURL), "namespace", cfg.TransportNamespace)
	}
	sc := cfg.Server
	ls := cfg.Listeners
	sc.Push.CallbackBaseURL = cmp.Or(sc.Push.CallbackBaseURL, "http://"+ls.Producer.Addr().String())
	sc.Blob, sc.Data = dp.blob, dp.data
	if ls.Metrics != nil {
		sc.Metrics = metrics.New()
	}
	if sc.Sink != nil {
		sc.SinkConsumer = transport.ConsumerName("sink")
	}
	srv, err := New(sc)
	if err != nil {
		return err
	}
	if err := srv.Start(ctx); err != nil {
		return err
	}
	defer srv.Stop()

	servers := []*http.Server{newHTTPServer(srv.ProducerHandler(), cfg.HTTP, log), newHTTPServer(srv.InternalHandler(), cfg.HTTP, log)}
	listeners := []net.Listener{ls.Producer, ls.Internal}
	if sc.Metrics != nil {
		servers, listeners = append(servers, newHTTPServer(metricsHandler(sc.Metrics), cfg.HTTP, log)), append(listeners, ls.Metrics)
	}
	errs := make(chan error, len(servers))
	for i, l := range listeners {
		go func() { errs <- servers[i].Serve(l) }()
	}
	select {
	case <-ctx.Done():
	case err := <-errs:
		return fmt.Errorf("serve: %w", err)
	}
	log.Info("shutting down: finishing in-flight requests")
	// Push deliveries in flight finish while the callback listener still serves their targets.
	srv.Drain()
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	// A query may run for minutes, on work no request of its own can stop: 5 s before the grace
	// ends (half of a shorter grace) its statement is stopped, so that its handler still audits
	// it and answers, and the listener sees the connection idle, in time.
	if eng := sc.DataPlane.Query; eng != nil {
		stopQueries := time.AfterFunc(max(cfg.ShutdownTimeout/2, cfg.ShutdownTimeout-5*time.Second), eng.Stop)
		defer stopQueries.Stop()
	}
	var shutdownErr error
	for _, hs := range servers {
		if err := hs.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			shutdownErr = errors.Join(shutdownErr, err)
		}
	}
	srv.Stop()
	return shutdownErr
}

// dataPlane is the object storage and the data database of buffered datasets; either may be nil
// (not configured).
type dataPlane struct {
	blob *blob.Store
	data *dataset.DB
}

// openDataPlane opens what the URLs name. A sink needs both.
func openDataPlane(ctx context.Context, blobURL, dataURL string, sink bool) (*dataPlane, error) {
	dp := &dataPlane{}
	var err error
	if blobURL != "" {
		if dp.blob, err = blob.Open(ctx, blobURL, blob.Options{}); err != nil {
			return nil, fmt.Errorf("--blob-url: %w", err)
		}
	}
	if dataURL != "" {
		if dp.data, err = dataset.Open(ctx, dataURL); err != nil {
			dp.close()
			return nil, fmt.Errorf("data database: %w", err)
		}
	}
	if sink && (dp.blob == nil || dp.data == nil) {
		dp.close()
		return nil, errors.New("--sink needs --blob-url and a data database")
	}
	return dp, nil
}

func (dp *dataPlane) close() {
	if dp.blob != nil {
		dp.blob.Close()
	}
	if dp.data != nil {
		dp.data.Close()
	}
}

// HTTPLimits bound how long, and how much of, a listener one client can hold.
//
// ReadHeader and MaxHeaderBytes bound a request's head: a client that sends its headers slowly,
// or too many of them, is cut off (431 for too many), as any front proxy would. Read bounds the
// whole request, body included, from its first byte: a 4 MiB body (the default --max-body-bytes)
// needs about 140 KB/s to arrive in time; a client that stops sending gets 408 and the
// connection is closed. Write bounds an ordinary request from its headers to the end of its
// answer: handlers take milliseconds, and at most about two seconds while the database is
// unreachable (they then answer 503), so a minute is only ever reached by a client that does not
// read its answer. Long polls (claims wait up to 60 s) and event streams outlast it: their
// handlers move the write deadline themselves (request.HoldOpen), so this bound does not cut them.
// Idle bounds how long a kept-alive connection may sit between requests: two minutes, more than
// the pause between a worker's long polls or its heartbeats.
type HTTPLimits struct {
	ReadHeader, Read, Write, Idle time.Duration
	MaxHeaderBytes                int
}

// DefaultHTTPLimits are the listeners' limits of `baton dev` and `baton server`.
var DefaultHTTPLimits = HTTPLimits{
	ReadHeader:     10 * time.Second,
	Read:           30 * time.Second,
	Write:          time.Minute,
	Idle:           2 * time.Minute,
	MaxHeaderBytes: 64 << 10, // net/http's default is 1 MiB; a JWT and a browser's headers need a few KiB
}

// newHTTPServer is a listener's server with the limits.
func newHTTPServer(h http.Handler, lim HTTPLimits, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: lim.ReadHeader,
		ReadTimeout:       lim.Read,
		WriteTimeout:      lim.Write,
		IdleTimeout:       lim.Idle,
		MaxHeaderBytes:    lim.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// metricsHandler serves GET /metrics and nothing else.
func metricsHandler(m *metrics.Metrics) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	return mux
}

// redactURL hides the password of a server URL for logging.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}
