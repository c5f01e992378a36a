// Package natsq is the NATS JetStream driver of transport.Transport.
//
// All wake-ups live in one work-queue stream (a message is removed once acknowledged) whose
// subjects are SubjectPrefix+".>"; queue q publishes on SubjectPrefix+"."+token(q), where token
// is the base64url encoding of the name, so any queue name maps to exactly one valid subject
// token. Each queue has one durable pull consumer filtered on its subject, shared by every worker
// process: a work-queue stream forbids overlapping consumers, and a shared durable is what makes
// workers compete for the queue's messages.
//
// JetStream redelivers a message nobody acknowledged within AckWait by itself, so Reclaim has
// nothing to do. A deleted stream or consumer is recreated by whichever call runs into its
// absence first; wake-ups lost with it are re-published by the server's reconciler.
package natsq

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/baton-dev/baton/internal/transport"
)

// Defaults of Options.
const (
	DefaultStream         = "BATON_WAKEUPS"
	DefaultSubjectPrefix  = "baton.wake"
	DefaultAckWait        = 60 * time.Second
	DefaultPublishTimeout = 5 * time.Second
)

const (
	// connectTimeout bounds Open's connection attempt when ctx has no earlier deadline.
	connectTimeout = 5 * time.Second
	// maxQueueLen keeps a queue's subject well within the server's 4 KiB protocol line limit
	// (max_control_line), whose violation makes the server drop the whole connection.
	maxQueueLen = 1024
	// maxAckPending bounds a queue's delivered, unacknowledged wake-ups across all workers.
	maxAckPending = 10000
)

// Options configures a Transport. Zero fields take the defaults above.
type Options struct {
	Stream        string        // stream name, default "BATON_WAKEUPS"
	SubjectPrefix string        // default "baton.wake"; queue q's subject is SubjectPrefix+"."+token(q)
	AckWait       time.Duration // an unacknowledged delivery is redelivered after it; InProgress resets it
	// PublishTimeout bounds Publish, which is called inside a database transaction.
	PublishTimeout time.Duration
}

func (o Options) withDefaults() Options {
	o.Stream = cmp.Or(o.Stream, DefaultStream)
	o.SubjectPrefix = cmp.Or(o.SubjectPrefix, DefaultSubjectPrefix)
	o.AckWait = cmp.Or(o.AckWait, DefaultAckWait)
	o.PublishTimeout = cmp.Or(o.PublishTimeout, DefaultPublishTimeout)
	return o
}

// Validate reports whether the options, defaults applied, name a valid stream and subject
// prefix and positive durations.
func (o Options) Validate() error {
	o = o.withDefaults()
	if strings.ContainsAny(o.Stream, ".*>/\\") || strings.ContainsFunc(o.Stream, isSpace) {
		return fmt.Errorf("nats: invalid stream name %q: it cannot contain '.', '*', '>', path separators or whitespace", o.Stream)
	}
	for tok := range strings.SplitSeq(o.SubjectPrefix, ".") {
		if tok == "" || tok == "*" || tok == ">" || strings.ContainsFunc(tok, isSpace) {
			return fmt.Errorf("nats: invalid subject prefix %q: it must be dot-separated, non-empty tokens without wildcards or whitespace", o.SubjectPrefix)
		}
	}
	if o.AckWait < 0 {
		return fmt.Errorf("nats: negative ack wait %v", o.AckWait)
	}
	if o.PublishTimeout < 0 {
		return fmt.Errorf("nats: negative publish timeout %v", o.PublishTimeout)
	}
	return nil
}

func isSpace(r rune) bool {
	return r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '\f' || r == '\v'
}

// Transport is the NATS JetStream wake-up transport. It is safe for concurrent use.
type Transport struct {
	opts   Options
	nc     *nats.Conn
	js     jetstream.JetStream
	stream jetstream.Stream // addresses the stream by name, so it outlives a deletion

	mu        sync.Mutex
	consumers map[string]jetstream.Consumer // by queue; dropped when found missing on the server

	closeOnce sync.Once
	closeErr  error
	closed    chan struct{} // closed by the connection's ClosedHandler
}

var _ transport.Transport = (*Transport)(nil)

// Open connects to the NATS server at url (nats://host:port), creates or updates the stream,
// and returns the transport. The first connection attempt fails fast; once connected, the
// connection reconnects for as long as it takes.
func Open(ctx context.Context, url string, opts Options) (*Transport, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	if err := checkURL(url); err != nil {
		return nil, fmt.Errorf("nats: connect to %s: %w", redact(url), err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("nats: connect to %s: %w", redact(url), err)
	}
	timeout := connectTimeout
	if d, ok := ctx.Deadline(); ok {
		if timeout = min(timeout, time.Until(d)); timeout <= 0 {
			return nil, fmt.Errorf("nats: connect to %s: %w", redact(url), context.DeadlineExceeded)
		}
	}
	t := &Transport{
		opts:      opts,
		consumers: make(map[string]jetstream.Consumer),
		closed:    make(chan struct{}),
	}
	nc, err := connect(ctx, url,
		nats.Name("baton"),
		nats.Timeout(timeout),
		nats.RetryOnFailedConnect(false),
		nats.MaxReconnects(-1),
		nats.ClosedHandler(func(*nats.Conn) { close(t.closed) }),
	)
	if err != nil {
		return nil, fmt.Errorf("nats: connect to %s: %w", redact(url), err)
	}
	t.nc = nc
	// The async publish timeout frees the bookkeeping of acks that never come; Publish gives
	// up on them after the same time.
	t.js, err = jetstream.New(nc, jetstream.WithPublishAsyncTimeout(opts.PublishTimeout))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("nats: jetstream: %w", err)
	}
	if t.stream, err = t.ensureStream(ctx); err != nil {
		nc.Close()
		return nil, err
	}
	return t, nil
}

// connect is nats.Connect that gives up when ctx ends.
func connect(ctx context.Context, url string, opts ...nats.Option) (*nats.Conn, error) {
	type result struct {
		nc  *nats.Conn
		err error
	}
	res := make(chan result, 1)
	go func() {
		nc, err := nats.Connect(url, opts...)
		res <- result{nc, err}
	}()
	select {
	case r := <-res:
		return r.nc, r.err
	case <-ctx.Done():
		go func() {
			if r := <-res; r.nc != nil {
				r.nc.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

// checkURL accepts what nats.Connect does, a comma-separated list of servers, each host:port
// or scheme://host:port, but only NATS's own schemes: nats.Connect would treat http://host as
// nats://host.
func checkURL(servers string) error {
	if strings.TrimSpace(servers) == "" {
		return errors.New("empty server URL")
	}
	for s := range strings.SplitSeq(servers, ",") {
		scheme, _, ok := strings.Cut(strings.TrimSpace(s), "://")
		if !ok {
			continue
		}
		switch strings.ToLower(scheme) {
		case "nats", "tls", "ws", "wss":
		default:
			return fmt.Errorf("unsupported URL scheme %q (want nats, tls, ws or wss)", scheme)
		}
	}
	return nil
}

// redact hides a password in a server URL.
func redact(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		return u.Redacted()
	}
	return s
}

// Name returns "nats".
func (t *Transport) Name() string { return "nats" }

func (t *Transport) streamConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        t.opts.Stream,
		Description: "baton task wake-ups",
		Subjects:    []string{t.opts.SubjectPrefix + ".>"},
		Retention:   jetstream.WorkQueuePolicy,
		// In memory: wake-ups are hints that the reconciler re-publishes when they are lost, so
		// they need not survive a NATS restart; and a file-backed stream deleted while clients
		// re-create it can lose its files on NATS 2.9 (and take JetStream down with it).
		Storage: jetstream.MemoryStorage,
	}
}

// ensureStream creates the stream, or updates it to this transport's configuration.
func (t *Transport) ensureStream(ctx context.Context) (jetstream.Stream, error) {
	s, err := t.js.CreateOrUpdateStream(ctx, t.streamConfig())
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		// Another process created it between our update and create attempts.
		s, err = t.js.CreateOrUpdateStream(ctx, t.streamConfig())
	}
	if err != nil {
		return nil, fmt.Errorf("nats: create stream %s: %w", t.opts.Stream, err)
	}
	return s, nil
}

// token encodes a queue name as a single subject token, injectively: base64url has no '.', '*',
// '>' or whitespace. The empty name, whose encoding is empty, becomes "_", which no non-empty
// name encodes to (every encoding is at least two characters long).
func token(queue string) string {
	if queue == "" {
		return "_"
	}
	return base64.RawURLEncoding.EncodeToString([]byte(queue))
}

func checkQueue(queue string) error {
	if len(queue) > maxQueueLen {
		return fmt.Errorf("nats: queue name of %d bytes is longer than %d", len(queue), maxQueueLen)
	}
	return nil
}

func (t *Transport) subject(queue string) string {
	return t.opts.SubjectPrefix + "." + token(queue)
}

// consumerName is the durable consumer of queue. Long tokens are hashed to keep the name a valid
// file name on the server; the '_' after "baton" keeps hashed names apart from plain ones.
func consumerName(queue string) string {
	tok := token(queue)
	if len(tok) <= 128 {
		return "baton-" + tok
	}
	sum := sha256.Sum256([]byte(queue))
	return "baton_" + base64.RawURLEncoding.EncodeToString(sum[:])
}

// isGone reports whether err says the stream or the consumer does not exist (any more).
// A request nobody answers (no responders) means the same: the subjects of a stream's or a
// consumer's API disappear with them.
func isGone(err error) bool {
	return errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, jetstream.ErrStreamNotFound) ||
		errors.Is(err, jetstream.ErrConsumerNotFound) ||
		errors.Is(err, jetstream.ErrConsumerDoesNotExist) ||
		errors.Is(err, jetstream.ErrConsumerDeleted)
}

// isBroken reports the server failing to use the stream's storage, as NATS 2.9 does after a
// stream was deleted while another client re-created it: "error opening msg block file" on a
// publish, "open .../meta.inf: no such file or directory" creating a consumer.
func isBroken(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case jsStreamStoreFailed, jsStreamCreateFailed:
		return true
	case jetstream.JSErrCodeConsumerCreate:
		return strings.Contains(apiErr.Description, "no such file or directory")
	}
	return false
}

// JetStream error codes of a stream whose storage failed.
const (
	jsStreamStoreFailed  jetstream.ErrorCode = 10077
	jsStreamCreateFailed jetstream.ErrorCode = 10049
)

// resetStream deletes a stream whose storage the server lost, so that it can be created afresh.
// The wake-ups it held are lost, which the server's reconciler heals.
func (t *Transport) resetStream(ctx context.Context) error {
	t.mu.Lock()
	clear(t.consumers)
	t.mu.Unlock()
	if err := t.js.DeleteStream(ctx, t.opts.Stream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("delete the broken stream %s: %w", t.opts.Stream, err)
	}
	return nil
}

type wakeBody struct {
	TaskID string `json:"task_id"`
}

// Publish publishes msgs asynchronously and waits for the stream's acknowledgements, within
// PublishTimeout and ctx. If the stream is missing it recreates it and retries those once.
func (t *Transport) Publish(ctx context.Context, msgs []transport.Wakeup) (failed map[int64]error) {
	ctx, cancel := context.WithTimeout(ctx, t.opts.PublishTimeout)
	defer cancel()
	failed = t.publish(ctx, msgs)
	var retry []transport.Wakeup
	broken := false
	for _, m := range msgs {
		if err, ok := failed[m.ID]; ok && (isGone(err) || isBroken(err)) {
			retry = append(retry, m)
			broken = broken || isBroken(err)
		}
	}
	if len(retry) == 0 {
		return failed
	}
	if broken {
		if err := t.resetStream(ctx); err != nil {
			for _, m := range retry {
				failed[m.ID] = fmt.Errorf("nats: publish: %w", err)
			}
			return failed
		}
	}
	if _, err := t.ensureStream(ctx); err != nil {
		for _, m := range retry {
			failed[m.ID] = fmt.Errorf("nats: publish: %w", err)
		}
		return failed
	}
	for _, m := range retry {
		delete(failed, m.ID)
	}
	for id, err := range t.publish(ctx, retry) {
		failed[id] = err
	}
	return failed
}

func (t *Transport) publish(ctx context.Context, msgs []transport.Wakeup) map[int64]error {
	failed := make(map[int64]error)
	type pending struct {
		id  int64
		ack jetstream.PubAckFuture
	}
	var waiting []pending
	for _, m := range msgs {
		if err := checkQueue(m.Queue); err != nil {
			failed[m.ID] = fmt.Errorf("nats: publish: %w", err)
			continue
		}
		body, err := json.Marshal(wakeBody{TaskID: m.TaskID})
		if err != nil {
			failed[m.ID] = fmt.Errorf("nats: publish: %w", err)
			continue
		}
		// No retries on "no responders": that means the stream is gone, which Publish heals.
		ack, err := t.js.PublishMsgAsync(&nats.Msg{Subject: t.subject(m.Queue), Data: body},
			jetstream.WithExpectStream(t.opts.Stream), jetstream.WithRetryAttempts(0))
		if err != nil {
			failed[m.ID] = fmt.Errorf("nats: publish: %w", err)
			continue
		}
		waiting = append(waiting, pending{m.ID, ack})
	}
	for _, p := range waiting {
		var err error
		select {
		case <-p.ack.Ok():
		case err = <-p.ack.Err():
		case <-ctx.Done():
			// An acknowledgement that arrived together with the deadline still counts.
			select {
			case <-p.ack.Ok():
			case err = <-p.ack.Err():
			default:
				err = ctx.Err()
			}
		}
		if err != nil {
			failed[p.id] = fmt.Errorf("nats: publish: %w", err)
		}
	}
	return failed
}

// Outstanding counts the messages on queue's subject: in a work-queue stream an acknowledged
// message is gone, so those are the queued and the delivered, unacknowledged ones. A missing
// stream is recreated and counts 0.
func (t *Transport) Outstanding(ctx context.Context, queue string) (int, error) {
	if err := checkQueue(queue); err != nil {
		return 0, fmt.Errorf("nats: outstanding: %w", err)
	}
	subject := t.subject(queue)
	info, err := t.stream.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err == nil {
		return int(info.State.Subjects[subject]), nil
	}
	if isGone(err) {
		if _, err := t.ensureStream(ctx); err != nil {
			return 0, fmt.Errorf("nats: outstanding: %w", err)
		}
		return 0, nil
	}
	return 0, fmt.Errorf("nats: outstanding of queue %q: %w", queue, err)
}

// Reclaim returns nothing: JetStream redelivers a message unacknowledged for AckWait by itself.
func (t *Transport) Reclaim(context.Context, time.Duration, int) ([]transport.Delivery, error) {
	return nil, nil
}

// NewConsumer returns a consumer on the transport's connection. Every consumer of a queue pulls
// from the same durable JetStream consumer, so name only labels the worker.
func (t *Transport) NewConsumer(string) transport.Consumer {
	return &Consumer{t: t}
}

// Close drains the connection, letting pending publishes and acknowledgements reach the
// server, and waits for it to close.
func (t *Transport) Close() error {
	t.closeOnce.Do(func() {
		if err := t.nc.Drain(); err != nil {
			t.nc.Close()
			if !errors.Is(err, nats.ErrConnectionClosed) {
				t.closeErr = fmt.Errorf("nats: close: %w", err)
			}
			return
		}
		select {
		case <-t.closed:
		case <-time.After(nats.DefaultDrainTimeout + time.Second):
			t.nc.Close()
		}
	})
	return t.closeErr
}

// consumer returns queue's durable consumer, creating it (and the stream) when needed.
func (t *Transport) consumer(ctx context.Context, queue string) (jetstream.Consumer, error) {
	t.mu.Lock()
	c, ok := t.consumers[queue]
	t.mu.Unlock()
	if ok {
		return c, nil
	}
	cfg := jetstream.ConsumerConfig{
		Durable:       consumerName(queue),
		Description:   "baton wake-ups of one queue",
		FilterSubject: t.subject(queue),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       t.opts.AckWait,
		MaxAckPending: maxAckPending,
		MaxDeliver:    -1,
	}
	c, err := t.js.CreateOrUpdateConsumer(ctx, t.opts.Stream, cfg)
	if isGone(err) || isBroken(err) {
		if isBroken(err) {
			if err := t.resetStream(ctx); err != nil {
				return nil, err
			}
		}
		if _, err := t.ensureStream(ctx); err != nil {
			return nil, err
		}
		c, err = t.js.CreateOrUpdateConsumer(ctx, t.opts.Stream, cfg)
	}
	if err != nil {
		return nil, fmt.Errorf("nats: create consumer of queue %q: %w", queue, err)
	}
	t.mu.Lock()
	t.consumers[queue] = c
	t.mu.Unlock()
	return c, nil
}

func (t *Transport) forgetConsumer(queue string) {
	t.mu.Lock()
	delete(t.consumers, queue)
	t.mu.Unlock()
}
