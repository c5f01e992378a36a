// Package sink is the trusted sink of buffered datasets: it claims Buffer Queue messages, reads
// each batch from object storage, validates every row, loads the batch into the dataset's table
// in one transaction, and reports the outcome, which emits the dataset event routing delivers.
//
// A load is idempotent (the data database keeps a ledger of loaded batches), so a message
// delivered twice, a sink killed between its load and its report, or two sinks racing on one
// message all end with the batch applied once. While it loads a batch the sink extends its claim,
// so a load may take longer than the claim's visibility; a sink that loses its claim all the same
// stops loading and reports nothing. The tenant of every row is the publish record's, never a
// value in the rows.
package sink

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/baton-dev/baton/internal/blob"
	"github.com/baton-dev/baton/internal/dataset"
	"github.com/baton-dev/baton/internal/pipeline"
	"github.com/baton-dev/baton/internal/transport"
	"github.com/baton-dev/baton/wire"
)

// GC policies for batch artifacts after their batch is committed.
const (
	GCDelete = "delete"
	GCKeep   = "keep"
)

// Config configures a Sink. Zero fields take their defaults.
type Config struct {
	Queue         Queue
	Blob          *blob.Store
	Data          *dataset.DB
	GC            string        // GCDelete (default) or GCKeep
	Workers       int           // batches loaded at once; default 4
	Visibility    time.Duration // how long a claim lasts, extended every third of it while a load runs; default 1 min
	MaxBatchBytes int64         // the largest artifact read; default 64 MiB
	Logger        *slog.Logger
	// Wakeups, when set, is a consumer of the wake-up transport (--transport redis|nats): the
	// sink waits there for wake-ups naming messages (transport.BufferQueue) and claims those by
	// id, and claims from the queue itself whenever a wait brings none (a lost wake-up costs
	// only that wait).
	Wakeups transport.Consumer
	// Clock times the extensions of claims; default the real clock.
	Clock clockwork.Clock
}

// Sink loads buffered batches.
type Sink struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	ensured map[string]string // dataset uuid → the schema (JSON) its table was ensured with

	// loadHook, when set (by tests), runs just before a batch is loaded into the data database,
	// with the load's context.
	loadHook func(ctx context.Context, m wire.SinkMessage)
}

// New returns a sink; Run starts it.
func New(cfg Config) (*Sink, error) {
	switch {
	case cfg.Queue == nil || cfg.Blob == nil || cfg.Data == nil:
		return nil, errors.New("sink: Queue, Blob and Data are required")
	case cfg.GC != "" && cfg.GC != GCDelete && cfg.GC != GCKeep:
		return nil, fmt.Errorf("sink: GC policy %q: must be %s or %s", cfg.GC, GCDelete, GCKeep)
	case cfg.Workers < 0 || cfg.Visibility < 0 || cfg.MaxBatchBytes < 0:
		return nil, errors.New("sink: negative setting")
	}
	cfg.GC = cmp.Or(cfg.GC, GCDelete)
	cfg.Workers = cmp.Or(cfg.Workers, 4)
	cfg.Visibility = cmp.Or(cfg.Visibility, time.Minute)
	cfg.MaxBatchBytes = cmp.Or(cfg.MaxBatchBytes, 64<<20)
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	return &Sink{cfg: cfg, log: cmp.Or(cfg.Logger, slog.Default()), ensured: map[string]string{}}, nil
}

// claimWait is how long one claim waits for a message; wakeWait how long one wait for wake-ups
// lasts before the sink looks at the queue itself.
const (
	claimWait = 20 * time.Second
	wakeWait  = 5 * time.Second
)

// Run claims and loads batches, Workers at a time, until ctx ends; then it waits for the loads
// under way. A failing queue is retried with a growing pause.
func (s *Sink) Run(ctx context.Context) {
	free := make(chan struct{}, s.cfg.Workers)
	for range s.cfg.Workers {
		free <- struct{}{}
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	pause := time.Duration(0)
	for {
		// At least one worker is free before claiming; claim as many messages as are free.
		select {
		case <-ctx.Done():
			return
		case <-free:
		}
		n := 1
		for more := true; more; {
			select {
			case <-free:
				n++
			default:
				more = false
			}
		}
		msgs, wakes, err := s.claim(ctx, n)
		for range n - len(msgs) {
			free <- struct{}{}
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			pause = min(max(2*pause, 100*time.Millisecond), 5*time.Second)
			s.log.WarnContext(ctx, "sink: claim failed", "err", err, "retry_in", pause)
			select {
			case <-ctx.Done():
				return
			case <-time.After(pause):
			}
			continue
		}
		pause = 0
		for _, m := range msgs {
			wg.Go(func() {
				defer func() { free <- struct{}{} }()
				err := s.Process(ctx, m)
				switch {
				case err == nil || ctx.Err() != nil:
				case errors.Is(err, ErrClaimLost):
					s.log.WarnContext(ctx, "sink: lost the claim of a batch while loading it: another receive holds it now, or it was settled",
						"id", m.ID, "receive", m.ReceiveCount, "err", err)
				default:
					s.log.WarnContext(ctx, "sink: batch not settled; it is delivered again once its visibility ends",
						"id", m.ID, "err", err)
				}
				if w := wakes[m.ID]; w != nil && err == nil {
					_ = w.Ack(context.WithoutCancel(ctx))
				}
			})
		}
	}
}

// claim claims up to n messages: from the queue's long poll, or after wake-ups naming them, with
// the wake-up of each message claimed that way.
func (s *Sink) claim(ctx context.Context, n int) ([]wire.SinkMessage, map[int64]transport.Delivery, error) {
	p := wire.SinkClaimRequest{Max: n, VisibilitySeconds: s.visibilitySeconds(), WaitSeconds: int(claimWait / time.Second)}
	if s.cfg.Wakeups == nil {
		msgs, err := s.cfg.Queue.Claim(ctx, p)
		return msgs, nil, err
	}
	ds, err := s.cfg.Wakeups.Receive(ctx, []string{transport.BufferQueue}, n, wakeWait)
	if err != nil {
		return nil, nil, fmt.Errorf("receive wake-ups: %w", err)
	}
	if len(ds) == 0 {
		p.WaitSeconds = 0
		msgs, err := s.cfg.Queue.Claim(ctx, p)
		return msgs, nil, err
	}
	var msgs []wire.SinkMessage
	wakes := map[int64]transport.Delivery{}
	for _, d := range ds {
		id, err := strconv.ParseInt(d.TaskID(), 10, 64)
		if err != nil {
			_ = d.Ack(ctx) // not a message id: nothing to claim
			continue
		}
		got, err := s.cfg.Queue.Claim(ctx, wire.SinkClaimRequest{ID: id, VisibilitySeconds: s.visibilitySeconds()})
		if err != nil {
			// Those claimed so far come back once their visibility ends; the wake-ups not
			// acknowledged come again.
			return nil, nil, err
		}
		if len(got) == 0 {
			_ = d.Ack(ctx) // settled, or another sink's for now: its visibility brings it back
			continue
		}
		msgs = append(msgs, got[0])
		wakes[got[0].ID] = d
	}
	return msgs, wakes, nil
}

// ErrClaimLost: the queue refused to extend the claim of a batch being loaded (its visibility ran
// out and another receive took the message over, or it is settled). The load was canceled and
// nothing was reported: the receive that holds the message now loads and settles it.
var ErrClaimLost = errors.New("the claim of the batch was lost while loading it")

// Process loads one claimed message and reports the outcome: Commit after a load (or a repeat of
// one), Fail when the batch cannot be loaded (an artifact outside the buffer location or missing,
// a bad row, a schema the table cannot serve, a dataset version a reset retired after the claim,
// which the queue dead-letters at once if the reset has not). While it works it extends the
// message's claim (holdClaim); when the claim is lost the load is canceled, nothing is reported
// and the error wraps ErrClaimLost, as it does when the queue refuses the Fail because the
// message is no longer this receive's. Any other error means it could report neither; the
// message is delivered again once its visibility ends.
//
// A batch is applied once whatever the timing: the data database's ledger makes a second load of
// it a repeat with the first one's result, so a load that committed just before its claim was
// lost is still committed here, and the new holder's repeat commits the same result again,
// which changes nothing.
func (s *Sink) Process(ctx context.Context, m wire.SinkMessage) error {
	s.log.DebugContext(ctx, "sink: loading a batch", "id", m.ID, "dataset", m.Dataset.Name, "receive", m.ReceiveCount, "uri", m.BatchURI)
	loadCtx, cancelLoad := context.WithCancelCause(ctx)
	defer cancelLoad(nil)
	release := s.holdClaim(ctx, m, cancelLoad)
	loaded, key, reason, err := s.load(loadCtx, m)
	if lost := release(); lost != nil && (err != nil || reason != "") {
		return fmt.Errorf("batch %d, receive %d: %w", m.ID, m.ReceiveCount, lost)
	}
	if err != nil {
		return err
	}
	if reason != "" {
		dead, err := s.cfg.Queue.Fail(ctx, wire.SinkFail{ID: m.ID, ReceiveCount: m.ReceiveCount, Error: reason})
		if errors.Is(err, ErrNotClaimed) {
			// Another receive holds it, or it is settled (a reset dead-letters the batches it
			// discards, those a sink holds included).
			return fmt.Errorf("batch %d, receive %d: %w: %w", m.ID, m.ReceiveCount, ErrClaimLost, err)
		}
		if err != nil {
			return fmt.Errorf("fail batch %d: %w", m.ID, err)
		}
		s.log.WarnContext(ctx, "sink: batch rejected", "id", m.ID, "dataset", m.Dataset.Name, "receive", m.ReceiveCount,
			"dead_lettered", dead, "reason", reason)
		return nil
	}
	res := wire.SinkCommit{ID: m.ID, Cursor: loaded.Cursor, Inserted: loaded.Inserted, Facets: loaded.Facets}
	if err := s.cfg.Queue.Commit(ctx, res); err != nil {
		return fmt.Errorf("commit batch %d: %w", m.ID, err)
	}
	s.log.DebugContext(ctx, "sink: batch committed", "id", m.ID, "dataset", m.Dataset.Name, "inserted", loaded.Inserted,
		"cursor", loaded.Cursor, "repeat", loaded.Repeat)
	if s.cfg.GC == GCDelete {
		if err := s.cfg.Blob.Delete(ctx, key); err != nil {
			s.log.WarnContext(ctx, "sink: could not delete a committed batch's artifact", "uri", m.BatchURI, "err", err)
		}
	}
	return nil
}

// holdClaim extends m's claim every third of the visibility, to the visibility from then, until
// release is called; so a load that outlasts the visibility stays this sink's. When the queue
// refuses an extension, the claim is lost: holdClaim cancels the load (cancelLoad) and release
// returns an error wrapping ErrClaimLost. An extension that fails otherwise (the server out of
// reach) is tried again at the next tick: the claim is lost only if another sink claims the
// message meanwhile.
func (s *Sink) holdClaim(ctx context.Context, m wire.SinkMessage, cancelLoad context.CancelCauseFunc) (release func() error) {
	seconds := s.visibilitySeconds()
	visibility := time.Duration(seconds) * time.Second
	ctx, stop := context.WithCancel(ctx)
	var lost error
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			tick := s.cfg.Clock.NewTimer(visibility / 3)
			select {
			case <-ctx.Done():
				tick.Stop()
				return
			case <-tick.Chan():
			}
			err := s.cfg.Queue.Extend(ctx, wire.SinkExtend{ID: m.ID, ReceiveCount: m.ReceiveCount, VisibilitySeconds: seconds})
			switch {
			case err == nil:
				s.log.DebugContext(ctx, "sink: claim extended", "id", m.ID, "receive", m.ReceiveCount, "visibility", visibility)
			case ctx.Err() != nil:
				return
			case errors.Is(err, ErrNotClaimed) || errors.Is(err, ErrNotFound):
				lost = fmt.Errorf("%w: %w", ErrClaimLost, err)
				cancelLoad(lost)
				return
			default:
				s.log.WarnContext(ctx, "sink: could not extend the claim of a batch being loaded; trying again", "id", m.ID,
					"receive", m.ReceiveCount, "err", err)
			}
		}
	}()
	return func() error {
		stop()
		<-done
		return lost
	}
}

// load reads, validates and loads m's batch. reason, when not empty, is why the batch cannot be
// loaded (the message is to be failed); err is a failure to do the work at all.
func (s *Sink) load(ctx context.Context, m wire.SinkMessage) (loaded dataset.Loaded, key, reason string, err error) {
	var schema *pipeline.Schema
	if len(m.Dataset.Schema) > 0 && string(m.Dataset.Schema) != "null" {
		schema = &pipeline.Schema{}
		if err := json.Unmarshal(m.Dataset.Schema, schema); err != nil {
			return loaded, "", fmt.Sprintf("the dataset's row schema cannot be read: %v", err), nil
		}
	}
	if schema == nil {
		return loaded, "", "the dataset has no row schema", nil
	}
	// The server checked the URI at publish; check again, so no record can make the sink read
	// outside the buffer location.
	key, err = s.cfg.Blob.Key(m.BatchURI)
	if err != nil || !strings.HasPrefix(key, blob.BufferPrefix) {
		return loaded, "", fmt.Sprintf("batch_uri %q is outside the buffer location %s", m.BatchURI, s.cfg.Blob.URI(blob.BufferPrefix)), nil
	}
	r, err := s.cfg.Blob.Get(ctx, key)
	if errors.Is(err, blob.ErrNotFound) {
		return loaded, key, "the batch artifact does not exist: " + m.BatchURI, nil
	}
	if err != nil {
		return loaded, key, fmt.Sprintf("read the batch artifact: %v", err), nil
	}
	rows, err := dataset.ParseBatch(r, schema, s.cfg.MaxBatchBytes)
	r.Close()
	if err != nil {
		return loaded, key, err.Error(), nil
	}
	if err := s.ensure(ctx, m.Dataset.UUID, schema); err != nil {
		if errors.Is(err, dataset.ErrIncompatible) {
			return loaded, key, err.Error(), nil
		}
		return loaded, key, "", err
	}
	if s.loadHook != nil {
		s.loadHook(ctx, m)
	}
	version := batchVersion(m)
	loaded, err = s.cfg.Data.Load(ctx, dataset.Batch{ID: m.Dataset.UUID + ":" + strconv.FormatInt(m.ID, 10), Tenant: m.OrgID,
		DatasetUUID: m.Dataset.UUID, Version: version, Schema: schema, Rows: rows, FacetFields: m.Dataset.FilterFields})
	if errors.Is(err, dataset.ErrStaleVersion) {
		return loaded, key, fmt.Sprintf("discarded, not loaded: the batch is of dataset version %s, which a reset of the dataset's outputs "+
			"retired while the batch was on its way to the sink", version), nil
	}
	if err != nil {
		return loaded, key, "", fmt.Errorf("load batch %d: %w", m.ID, err)
	}
	return loaded, key, "", nil
}

// batchVersion is the dataset version m's batch is of: the message's dataset_version ("" when it
// has none).
func batchVersion(m wire.SinkMessage) string {
	var msg struct {
		DatasetVersion string `json:"dataset_version"`
	}
	_ = json.Unmarshal(m.Message, &msg)
	return msg.DatasetVersion
}

// ensure makes sure the dataset's table serves the schema, once per schema.
func (s *Sink) ensure(ctx context.Context, datasetUUID string, schema *pipeline.Schema) error {
	text, _ := json.Marshal(schema)
	s.mu.Lock()
	done := s.ensured[datasetUUID] == string(text)
	s.mu.Unlock()
	if done {
		return nil
	}
	if err := s.cfg.Data.Ensure(ctx, datasetUUID, schema); err != nil {
		return err
	}
	s.mu.Lock()
	s.ensured[datasetUUID] = string(text)
	s.mu.Unlock()
	return nil
}

// visibilitySeconds is the claim visibility asked for, in the whole seconds the queue takes
// (rounded up, from 1 s to 1 h).
func (s *Sink) visibilitySeconds() int {
	v := min(max(s.cfg.Visibility, time.Second), time.Hour)
	return int((v + time.Second - 1) / time.Second)
}
