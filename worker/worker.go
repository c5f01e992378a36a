// Package worker is Baton's Go worker SDK. A Worker claims tasks from a Baton server's internal
// listener, runs the handler registered for each task's name, keeps the attempt's lease alive
// with heartbeats while it runs, and reports the outcome:
//
//	w, err := worker.New(os.Getenv("BATON_INTERNAL_URL"))
//	w.Handle("resize", func(ctx context.Context, t *worker.Task) (any, error) {
//		return map[string]any{"ok": true}, nil
//	})
//	err = w.Run(ctx) // until ctx ends; then finishes or hands back the tasks it runs
//
// A handler's return decides the report: a nil error completes the task with the output
// (JSON-encoded; a json.RawMessage passes through as it is); an *Error fails it with its category
// and retry flag; any other error is a retryable USER_CODE failure; a panic is a USER_CODE failure
// with the goroutine's stack. The handler's context is cancelled, with a cause that
// context.Cause reports, when
//
//   - the task or its job is cancelled (ErrCancelRequested): the attempt is reported cancelled,
//     whatever the handler returns;
//   - the server no longer counts the attempt as this worker's, a heartbeat having been answered
//     409 or 410 (ErrLeaseLost): an error returned then is not reported;
//   - the task's execution timeout passes (ErrTimeout, the context's deadline): the worker
//     heartbeats at once, so that the server applies its timeout (a TIMEOUT failure, retried by
//     the usual rule) without waiting for its reaper; an error returned then is not reported;
//   - the worker shuts down and its shutdown timeout passed (ErrShutdown): the attempt is handed
//     back as a retryable INFRASTRUCTURE failure.
//
// A successful output is always offered to the server, which accepts it only from the attempt
// that still holds the task: after a timeout, only while no newer attempt has been claimed.
//
// Reports are retried with exponential backoff (100 ms to 10 s, jittered, or longer when an
// answer's Retry-After asks for it) on network errors, timeouts and 5xx, 408 and 429 answers, for
// as long as Run lasts, until the server acknowledges them, answers that the attempt is no longer
// this worker's (409, 410, 404) or refuses them for good (another 4xx); a report repeated after a
// lost answer is acknowledged again without a second effect. Heartbeats and claims are retried
// the same way. The worker speaks the stream-worker dialect (/internal/worker/...) and reports a
// cancelled attempt through /internal/task-complete.
//
// For the push runtime, where Baton POSTs each task to an HTTP target instead, a PushHandler
// (NewPushHandler) is such a target: it runs each delivery with a Handler as a Worker runs a
// claimed task, and reports through the task-scoped dialect (/v1/task/...) with the delivery's
// token, holding no client certificate. A target of its own checks that a delivery comes from
// Baton with VerifyPushRequest or the PushAuth middleware.
package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-dev/baton/internal/mtls"
	"github.com/baton-dev/baton/internal/transport/dial"
	"github.com/baton-dev/baton/wire"
)

// Task is one claimed attempt of a task, as a Handler receives it.
type Task struct {
	ID, JobID, Key, Name string // global task id, job id, the producer's taskId, task name
	Attempt              int
	Input                json.RawMessage
	// DependencyOutputs holds each parent's output by the parent's taskId.
	DependencyOutputs map[string]json.RawMessage
	// CapabilityToken authenticates task-scoped calls (/v1/task/...) about this attempt. It is
	// the token of the claim; it lives for the task's timeout plus 5 minutes (an hour without a
	// timeout). Heartbeats renew it: Token returns the newest.
	CapabilityToken          string
	CapabilityTokenExpiresAt time.Time
	Timeout                  time.Duration // 0: none
	// Pipeline is set for a task of a pipeline job: the job, the datasets it reads and writes,
	// and what started it. Input is then the job's config.
	Pipeline *PipelineTask
	// Traceparent is the W3C trace context of the task's job, as its producer submitted it (or
	// the server's span of the submission), "" when there is none. The handler's context already
	// carries it as the parent of the worker's span (see WithTracerProvider); a handler that runs
	// other programs can hand them the traceparent of trace.SpanContextFromContext(ctx).
	Traceparent string
	// PublicURL is where the server's public listener is, for calls of the task-scoped dialect
	// (/v1/task/...) about this attempt: set for a pushed task (the envelope's callbackBaseUrl,
	// or WithPushPublicURL), "" for a claimed one (its Worker knows only the internal listener).
	PublicURL string

	publish func(ctx context.Context, dataset string, jsonl []byte) (*PublishedBatch, error)
	mint    func(ctx context.Context, token string) (*Credentials, error)
	// fetchSecrets asks the server for the attempt's secrets (Secrets), once.
	fetchSecrets func(ctx context.Context) (map[string]string, error)
	rows         func(ctx context.Context, token, path string) (*rowPage, error)
	query        func(ctx context.Context, token, sql string, opts QueryOptions) (*QueryResult, error)

	mu       sync.Mutex
	token    string // the newest capability token; "" until a heartbeat renewed the claim's
	tokenExp time.Time
	creds    *Credentials // the last minted, and when
	credsAt  time.Time
	secrets  map[string]string // delivered by the server; nil until asked
}

// PipelineTask is the data plane of a pipeline job's task.
type PipelineTask struct {
	Job      PipelineJob     `json:"job"`
	Operator string          `json:"operator"`
	Inputs   []DatasetInput  `json:"inputs"`
	Outputs  []DatasetOutput `json:"outputs"`
	Trigger  json.RawMessage `json:"trigger,omitempty"`
}

// The data-plane part of a pipeline task, in the shapes every worker dialect hands it.
type (
	// PipelineJob names the pipeline job a task runs for, and the pipeline version it was
	// created under.
	PipelineJob = wire.PipelineJob
	// DatasetInput is a dataset the task reads. The input whose event started the task carries
	// the event's version and cursor, or its partition; Where is the filter to apply when reading.
	DatasetInput = wire.DatasetInput
	// DatasetOutput is a dataset the task writes: output OutputIndex of its job. WriteMode is
	// "buffered" for a dataset the task adds rows to with PublishBatch.
	DatasetOutput = wire.DatasetOutput
)

// Handler runs one attempt of a task. Its output is JSON-encoded; a json.RawMessage passes
// through.
type Handler func(ctx context.Context, t *Task) (output any, err error)

// handBackTimeout bounds how long Run, once its shutdown timeout has passed, still tries to hand
// back unfinished attempts and deliver outcomes that are not reported yet.
const handBackTimeout = 10 * time.Second

// Worker claims tasks and runs their handlers. Register handlers with Handle, then call Run.
type Worker struct {
	client // the internal listener
	// host runs the attempts; its contexts and shutdown signal are set when Run starts: runCtx
	// is Run's context without its cancellation, reportCtx ends when Run gives up on unreported
	// outcomes.
	host
	cfg config
	log *slog.Logger

	mu       sync.RWMutex
	handlers map[string]Handler

	running atomic.Bool
	slots   chan struct{} // one per running attempt (concurrency); set when Run starts
	// settling holds one place per attempt whose handler returned and whose outcome is being
	// reported (concurrency places): see start.
	settling chan struct{}
	idle     *idleness // stops the claim loops once the worker is idle long enough
	attempts sync.WaitGroup
	reports  reporter
}

// New returns a worker of the Baton server whose internal listener is at internalURL
// (e.g. "https://baton.internal:8081").
func New(internalURL string, opts ...Option) (*Worker, error) {
	cfg := config{blobURL: os.Getenv("BATON_BLOB_URL")}
	for _, o := range opts {
		o(&cfg)
	}
	u, err := url.Parse(internalURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("baton worker: internal URL %q: want http(s)://host[:port]", internalURL)
	}
	switch {
	case cfg.concurrency < 0:
		return nil, errors.New("baton worker: concurrency must be positive")
	case cfg.batchSize < 0:
		return nil, errors.New("baton worker: batch size must be positive")
	case cfg.heartbeatInterval < 0, cfg.shutdownTimeout < 0, cfg.pollWait < 0, cfg.idleTimeout != nil && *cfg.idleTimeout < 0:
		return nil, errors.New("baton worker: negative duration")
	case cfg.pollWait > maxPollWait:
		return nil, fmt.Errorf("baton worker: poll wait %s is above the server's limit of %s", cfg.pollWait, maxPollWait)
	}
	for _, q := range cfg.queues {
		if q == "" {
			return nil, errors.New("baton worker: empty queue name")
		}
	}
	cfg.concurrency = cmp.Or(cfg.concurrency, 1)
	cfg.batchSize = cmp.Or(cfg.batchSize, 1)
	cfg.shutdownTimeout = cmp.Or(cfg.shutdownTimeout, defaultShutdownTimeout)
	cfg.pollWait = cmp.Or(cfg.pollWait, defaultPollWait)
	cfg.workerID = cmp.Or(cfg.workerID, defaultWorkerID())
	hc := cfg.httpClient
	if hc == nil {
		// http.DefaultClient keeps 2 idle connections per host: with more tasks in flight every
		// report and heartbeat would open a new connection. Keep one per slot.
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = max(cfg.concurrency+cfg.batchSize, 2)
		hc = &http.Client{Transport: tr}
	}
	if cfg.caFile != "" || cfg.certFile != "" || cfg.keyFile != "" {
		if hc, err = withClientCert(hc, cfg.caFile, cfg.certFile, cfg.keyFile); err != nil {
			return nil, err
		}
	}
	log := cmp.Or(cfg.logger, slog.Default())
	w := &Worker{
		client:   client{url: strings.TrimRight(internalURL, "/"), http: hc},
		host:     host{workerID: cfg.workerID, tracerProvider: cfg.tracerProvider, blobURL: cfg.blobURL},
		cfg:      cfg,
		log:      log.With("worker_id", cfg.workerID),
		handlers: map[string]Handler{},
	}
	w.reports.w = w
	return w, nil
}

// defaultWorkerID is hostname-pid.
func defaultWorkerID() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d", cmp.Or(host, "worker"), os.Getpid())
}

// withClientCert returns a copy of hc whose transport presents the client certificate and trusts
// only the given CA.
func withClientCert(hc *http.Client, caFile, certFile, keyFile string) (*http.Client, error) {
	tlsCfg, err := mtls.ClientConfig(caFile, certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("baton worker: client certificate: %w", err)
	}
	var tr *http.Transport
	switch t := hc.Transport.(type) {
	case nil:
		tr = http.DefaultTransport.(*http.Transport).Clone()
	case *http.Transport:
		tr = t.Clone()
	default:
		return nil, fmt.Errorf("baton worker: WithClientCert needs an *http.Transport, the HTTP client has a %T", t)
	}
	tr.TLSClientConfig = tlsCfg
	c := *hc
	c.Transport = tr
	return &c, nil
}

// Handle registers h for tasks named taskName, replacing an earlier handler of that name. It
// panics on an empty name or a nil handler.
func (w *Worker) Handle(taskName string, h Handler) {
	if taskName == "" || h == nil {
		panic("baton worker: Handle needs a task name and a handler")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.handlers[taskName] = h
}

func (w *Worker) handler(name string) Handler {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.handlers[name]
}

// Run claims and runs tasks until ctx ends, then shuts down gracefully: it stops claiming, waits
// up to the shutdown timeout for running handlers to finish and their outcomes to be reported,
// then cancels the handlers still running and hands their attempts back to the server (a
// retryable INFRASTRUCTURE failure). It returns nil after a clean shutdown, and an error if it
// could not start or some outcome could not be delivered before it gave up. A Worker runs once.
func (w *Worker) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("baton worker: Run called twice")
	}
	queues := w.cfg.queues
	if len(queues) == 0 {
		w.mu.RLock()
		for name := range w.handlers {
			queues = append(queues, name)
		}
		w.mu.RUnlock()
		slices.Sort(queues)
	}
	if len(queues) == 0 {
		return errors.New("baton worker: no handlers registered and no queues given")
	}
	w.runCtx = context.WithoutCancel(ctx)
	reportCtx, abandon := context.WithCancel(w.runCtx)
	defer abandon()
	w.reportCtx = reportCtx
	w.force = make(chan struct{})
	w.slots = make(chan struct{}, w.cfg.concurrency)
	w.settling = make(chan struct{}, w.cfg.concurrency)
	w.idle = newIdleness(w.cfg, time.Now)

	w.log.InfoContext(ctx, "worker started", "queues", queues, "concurrency", w.cfg.concurrency)
	var claimers sync.WaitGroup
	if w.cfg.wakeKind != "" {
		tr, err := dial.Open(ctx, w.cfg.wakeKind, w.cfg.wakeURL, w.cfg.wakeNamespace)
		if err != nil {
			return fmt.Errorf("baton worker: wake-ups: %w", err)
		}
		defer tr.Close()
		for i := range w.cfg.batchSize {
			c := tr.NewConsumer(fmt.Sprintf("%s-%d", w.cfg.workerID, i))
			defer c.Close()
			claimers.Go(func() { w.wakeLoop(ctx, queues, c) })
		}
	} else {
		for range w.cfg.batchSize {
			claimers.Go(func() { w.claimLoop(ctx, queues) })
		}
	}
	select {
	case <-ctx.Done():
	case <-w.idle.stop:
		// The claim loops stop at their next turn; what claims still in flight bring is run.
		w.log.InfoContext(ctx, "worker idle: stopping", "idle_timeout", w.idle.idleTimeout())
	}
	claimers.Wait()

	done := make(chan struct{})
	go func() { w.attempts.Wait(); close(done) }()
	timer := time.NewTimer(w.cfg.shutdownTimeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		w.log.WarnContext(w.runCtx, "shutdown timeout passed: handing back running tasks", "timeout", w.cfg.shutdownTimeout)
		close(w.force)
		timer.Reset(handBackTimeout)
		select {
		case <-done:
		case <-timer.C:
			abandon() // the report loops give up and return
			<-done
		}
	}
	if n := w.unreported.Load(); n > 0 {
		return fmt.Errorf("baton worker: %d attempt outcome(s) not delivered before shutdown; the server will time them out", n)
	}
	w.log.InfoContext(w.runCtx, "worker stopped")
	return nil
}

// claimLoop claims tasks whenever slots are free, as many in one request as there are free
// slots, until ctx ends.
func (w *Worker) claimLoop(ctx context.Context, queues []string) {
	var b backoff
	for {
		select {
		case w.slots <- struct{}{}:
		case <-ctx.Done():
			return
		case <-w.idle.stop:
			return
		}
		n := 1
	more:
		for n < maxBatch {
			select {
			case w.slots <- struct{}{}:
				n++
			default:
				break more
			}
		}
		as, err := w.claim(ctx, queues, n)
		for range n - len(as) {
			<-w.slots
		}
		if err != nil || len(as) == 0 {
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				w.log.WarnContext(ctx, "claim failed", "err", err)
				if !sleep(ctx, b.after(err)) {
					return
				}
			} else if w.idle.empty() {
				return
			}
			continue
		}
		b.reset()
		for _, a := range as {
			w.start(a)
		}
	}
}

// start runs a claimed attempt in a slot the claim loop took for it.
//
// The slot is freed as soon as the handler returns, not when its outcome has been reported: the
// report waits for the server's commit, and a slot held through it would sit idle for a round
// trip per task, which for short tasks halves what a worker gets through (River's executors free
// theirs the same way, leaving the completion to a batching completer). What bounds the
// attempts a worker holds is then its concurrency of running handlers plus as many outcomes
// being reported (settling): when that many reports are pending, the slot stays taken until one
// is answered, so a slow server still slows the claims down.
func (w *Worker) start(a *attempt) {
	w.idle.started(a.task)
	w.attempts.Add(1)
	var freed, settling bool
	a.handlerReturned = func() {
		w.settling <- struct{}{}
		settling = true
		<-w.slots
		freed = true
	}
	go func() {
		defer w.attempts.Done()
		defer func() {
			if settling {
				<-w.settling
			}
			if !freed {
				<-w.slots
			}
		}()
		defer w.idle.finished()
		a.run()
		w.ackWake(a) // after the heartbeats stopped and the outcome was reported
	}()
}

// claim long-polls the queues once for up to n tasks (the stream-worker dialect's claim for one,
// claim-batch for more); it returns none when nothing was claimed.
func (w *Worker) claim(ctx context.Context, queues []string, n int) ([]*attempt, error) {
	body := map[string]any{"worker_id": w.cfg.workerID, "streams": queues, "max_wait_ms": w.cfg.pollWait.Milliseconds()}
	if w.cfg.isolation != "" {
		body["isolation"] = w.cfg.isolation
	}
	if n == 1 {
		var ans claimAnswer
		if err := w.post(ctx, w.cfg.pollWait+claimSlack, pathClaim, body, &ans); err != nil {
			return nil, err
		}
		if !ans.Claimed {
			return nil, nil
		}
		return []*attempt{w.newAttempt(ctx, ans)}, nil
	}
	body["max_tasks"] = n
	var ans claimBatchAnswer
	if err := w.post(ctx, w.cfg.pollWait+claimSlack, pathClaimBatch, body, &ans); err != nil {
		return nil, err
	}
	if len(ans.Claims) > n {
		return nil, fmt.Errorf("baton worker: %s: %d claims for %d slots", pathClaimBatch, len(ans.Claims), n)
	}
	as := make([]*attempt, len(ans.Claims))
	for i, c := range ans.Claims {
		as[i] = w.newAttempt(ctx, c)
	}
	return as, nil
}

// newAttempt prepares the attempt a claim answered.
func (w *Worker) newAttempt(ctx context.Context, ans claimAnswer) *attempt {
	claimedAt := time.Now()
	if ans.LeaseTTLSeconds > 0 && !ans.LeaseExpiresAt.IsZero() {
		// The execution deadline runs from when the server claimed the task, which is earlier
		// than the answer's arrival by the claim's latency: use it, so that the handler is
		// stopped with ErrTimeout no later than the server times the attempt out. A difference
		// of more than a few seconds is clock skew, not latency: then keep the arrival time.
		if started := ans.LeaseExpiresAt.Add(-seconds(ans.LeaseTTLSeconds)); started.Before(claimedAt) && claimedAt.Sub(started) < 5*time.Second {
			claimedAt = started
		}
	}
	t := &Task{
		ID:                       cmp.Or(ans.TaskID, ans.JobID),
		JobID:                    ans.RunID,
		Key:                      ans.TaskKey,
		Name:                     ans.TaskName,
		Attempt:                  ans.AttemptID,
		Input:                    ans.Payload,
		DependencyOutputs:        ans.DependencyOutputs,
		CapabilityToken:          ans.CapabilityToken,
		CapabilityTokenExpiresAt: ans.CapabilityTokenExpiresAt.Time,
		Traceparent:              ans.Traceparent,
	}
	if ans.TimeoutSeconds != nil && *ans.TimeoutSeconds > 0 {
		t.Timeout = seconds(*ans.TimeoutSeconds)
	}
	if t.DependencyOutputs == nil {
		t.DependencyOutputs = map[string]json.RawMessage{}
	}
	if ans.Job != nil {
		t.Pipeline = &PipelineTask{Job: *ans.Job, Operator: ans.Operator, Trigger: ans.Trigger}
		if ans.Inputs != nil {
			t.Pipeline.Inputs = *ans.Inputs
		}
		if ans.Outputs != nil {
			t.Pipeline.Outputs = *ans.Outputs
		}
	}
	a := &attempt{
		h:         &w.host,
		d:         streamDialect{w},
		api:       &w.client,
		routes:    internalRoutes,
		handler:   w.handler(ans.TaskName),
		task:      t,
		taskID:    ans.JobID,
		lease:     ans.LeaseToken,
		stream:    ans.Stream,
		messageID: ans.MessageID,
		every:     w.heartbeatEvery(ans),
		leaseTTL:  seconds(ans.LeaseTTLSeconds),
		log:       w.log.With("task_id", ans.JobID, "attempt", ans.AttemptID, "task", ans.TaskName),
	}
	a.bind()
	t.fetchSecrets = func(ctx context.Context) (map[string]string, error) { return w.fetchSecrets(ctx, a) }
	a.ctx, a.cancel = context.WithCancelCause(withTraceparent(w.runCtx, t.Traceparent))
	a.handlerCtx, a.stopDeadline = a.ctx, func() {}
	if t.Timeout > 0 {
		a.handlerCtx, a.stopDeadline = context.WithDeadlineCause(a.ctx, claimedAt.Add(t.Timeout), ErrTimeout)
	}
	a.log.DebugContext(ctx, "task claimed", "lease_expires_at", ans.LeaseExpiresAt.Time, "heartbeat_every", a.every)
	return a
}

// heartbeatEvery is min(WithHeartbeatInterval, the server's interval), ignoring an unset one.
func (w *Worker) heartbeatEvery(ans claimAnswer) time.Duration {
	server := seconds(ans.HeartbeatIntervalSeconds)
	switch mine := w.cfg.heartbeatInterval; {
	case server > 0 && mine > 0:
		return min(server, mine)
	case server > 0:
		return server
	case mine > 0:
		return mine
	case ans.LeaseTTLSeconds > 0:
		return seconds(ans.LeaseTTLSeconds) / 3
	}
	return 10 * time.Second
}
