package worker

// A push target in Go: where a Worker claims its tasks over the internal listener, a PushHandler
// is handed them. Baton POSTs each attempt of a task of runtime "push" (or of a pipeline's lambda
// job) to the target configured for its name (baton server --push-target NAME=URL); the
// PushHandler takes it with a 202 at once and runs it like a claimed task, reporting through the
// task-scoped dialect with the envelope's token only: it needs no client certificate and never
// calls /internal/*.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/baton-dev/baton/wire"
)

const (
	defaultPushConcurrency = 8
	// maxPushBody bounds a delivery: an envelope holds the task's input and its parents' outputs.
	maxPushBody = 32 << 20
	// recentPushes is how many finished attempts a PushHandler remembers, so that a late repeat
	// of their delivery is not run again.
	recentPushes = 1024
)

// ErrNoSecretsOnPush is what Task.Secret and Task.Secrets answer for a pushed task whose job
// declares secrets: the server delivers secrets on its internal listener only, to trusted
// workers, never to a push target. It comes as a permanent CONFIGURATION failure.
var ErrNoSecretsOnPush = errors.New("baton worker: secrets are delivered on the internal listener only, to trusted workers (baton worker); a push target receives none")

// pushConfig is what the PushOptions set.
type pushConfig struct {
	secret      string
	publicURL   string
	concurrency int
	logger      *slog.Logger
	blobURL     string
	httpClient  *http.Client
}

// PushOption configures a PushHandler.
type PushOption func(*pushConfig)

// WithPushSecret makes the PushHandler accept only deliveries signed with secret, the target's
// --push-secret on the server (see VerifyPushRequest); others are answered 401. It panics on an
// empty secret. Without it every delivery is taken: keep such a target where only Baton can
// reach it.
func WithPushSecret(secret string) PushOption {
	if secret == "" {
		panic("worker.WithPushSecret: empty secret")
	}
	return func(c *pushConfig) { c.secret = secret }
}

// WithPushPublicURL sets where the server's public listener is (http(s)://host[:port]), for the
// attempts' calls, in place of each envelope's callbackBaseUrl: when the target reaches the
// server by another address than the one the server announces.
func WithPushPublicURL(u string) PushOption { return func(c *pushConfig) { c.publicURL = u } }

// WithPushConcurrency sets how many attempts run at once (default 8); a delivery that finds
// every slot busy is answered 503, and the server's retry rule decides when it comes again.
func WithPushConcurrency(n int) PushOption { return func(c *pushConfig) { c.concurrency = n } }

// WithPushLogger sets the logger (default slog.Default()).
func WithPushLogger(l *slog.Logger) PushOption { return func(c *pushConfig) { c.logger = l } }

// WithPushBlob sets the object storage PublishBatch writes batches to, as WithBlob does for a
// Worker (default: BATON_BLOB_URL); without one, batches are written with the attempt's minted
// credentials (S3 only).
func WithPushBlob(url string) PushOption { return func(c *pushConfig) { c.blobURL = url } }

// WithPushHTTPClient sends the attempts' calls with hc (leave its Timeout at zero: every call has
// its own deadline). By default one that keeps idle connections for every slot.
func WithPushHTTPClient(hc *http.Client) PushOption { return func(c *pushConfig) { c.httpClient = hc } }

// PushHandler is a push target that runs each delivered attempt with a Handler, exactly as a
// Worker runs a claimed one: the handler's context carries the envelope's deadline (ErrTimeout)
// and is cancelled when the task is cancelled (ErrCancelRequested) or the attempt is no longer
// this target's (ErrLeaseLost); heartbeats keep the lease alive at the envelope's
// heartbeatIntervalMs, renewing the token; the outcome is reported and retried as a Worker's
// (see the package documentation). Every call goes to the task-scoped dialect (/v1/task/...) of
// the envelope's callbackBaseUrl with the envelope's taskToken: Credentials, PublishBatch and
// PublishJSONL (with WithPushBlob, or with the minted credentials) and Rows work as for a
// claimed task; Secrets answers ErrNoSecretsOnPush.
//
// ServeHTTP answers a delivery at once: 202 when it runs it, or when that attempt (the same task
// id and attempt number: a repeat of its delivery) already runs or ran lately; 401 for a
// delivery whose signature WithPushSecret refuses; 400 for a body that is no push envelope; 503
// when every slot is busy or the handler is shutting down. Baton fails an attempt whose delivery
// was not answered 2xx, and retries it by the task's retry rule.
type PushHandler struct {
	host
	h       Handler
	cfg     pushConfig
	http    *http.Client
	log     *slog.Logger
	abandon context.CancelFunc // ends reportCtx
	slots   chan struct{}      // one per running attempt

	mu       sync.Mutex
	closing  bool
	running  map[string]bool // by pushKey
	recent   recentSet       // finished lately, by pushKey
	attempts sync.WaitGroup
	forced   sync.Once // closes host.force
}

var _ http.Handler = (*PushHandler)(nil)

// NewPushHandler returns a PushHandler that runs every delivered attempt with h. It panics on a
// nil h, or on a WithPushPublicURL that is not http(s)://host[:port].
func NewPushHandler(h Handler, opts ...PushOption) *PushHandler {
	if h == nil {
		panic("worker.NewPushHandler: nil handler")
	}
	cfg := pushConfig{blobURL: os.Getenv("BATON_BLOB_URL")}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.concurrency < 1 {
		cfg.concurrency = defaultPushConcurrency
	}
	if cfg.publicURL != "" {
		if !httpURL(cfg.publicURL) {
			panic(fmt.Sprintf("worker.WithPushPublicURL: %q: want http(s)://host[:port]", cfg.publicURL))
		}
		cfg.publicURL = strings.TrimRight(cfg.publicURL, "/")
	}
	hc := cfg.httpClient
	if hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 2 * cfg.concurrency // a heartbeat and a call of each attempt
		hc = &http.Client{Transport: tr}
	}
	reportCtx, abandon := context.WithCancel(context.Background())
	return &PushHandler{
		host: host{workerID: defaultWorkerID(), blobURL: cfg.blobURL, runCtx: context.Background(), reportCtx: reportCtx,
			force: make(chan struct{})},
		h: h, cfg: cfg, http: hc, log: cmp.Or(cfg.logger, slog.Default()), abandon: abandon,
		slots: make(chan struct{}, cfg.concurrency), running: map[string]bool{},
	}
}

// ServeHTTP takes one push delivery.
func (p *PushHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		pushAnswer(w, http.StatusMethodNotAllowed, "a push delivery is a POST")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxPushBody)
	var (
		body []byte
		err  error
	)
	if p.cfg.secret != "" {
		body, err = VerifyPushRequest(r, p.cfg.secret, 0)
	} else {
		body, err = io.ReadAll(r.Body)
	}
	var tooLarge *http.MaxBytesError
	switch {
	case errors.Is(err, ErrPushUnauthorized):
		p.log.WarnContext(r.Context(), "push delivery refused", "err", err, "remote", r.RemoteAddr)
		w.Header().Set("WWW-Authenticate", `Bearer realm="baton-push"`)
		pushAnswer(w, http.StatusUnauthorized, err.Error())
		return
	case errors.As(err, &tooLarge):
		pushAnswer(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("a push delivery is at most %d bytes", maxPushBody))
		return
	case err != nil:
		pushAnswer(w, http.StatusBadRequest, err.Error())
		return
	}
	env, err := decodeEnvelope(body)
	if err != nil {
		pushAnswer(w, http.StatusBadRequest, err.Error())
		return
	}
	base := cmp.Or(p.cfg.publicURL, strings.TrimRight(env.CallbackBaseURL, "/"))
	if !httpURL(base) {
		pushAnswer(w, http.StatusBadRequest, fmt.Sprintf("the envelope's callbackBaseUrl %q is not http(s)://host[:port], and the target has no public URL of its own", env.CallbackBaseURL))
		return
	}
	status, msg := p.admit(env, base)
	if status != http.StatusAccepted {
		pushAnswer(w, status, msg)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"accepted": true, "duplicate": msg != ""})
}

// admit starts the attempt env delivers, unless it runs or ran already: it answers 202 (with a
// message for a repeat), or 503 and why.
func (p *PushHandler) admit(env *wire.PushEnvelope, base string) (int, string) {
	key := pushKey(env.TaskID, env.Attempt)
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.running[key] || p.recent.has(key):
		p.log.Info("push delivery repeated: the attempt runs or ran already", "task_id", env.TaskID, "attempt", env.Attempt)
		return http.StatusAccepted, "duplicate"
	case p.closing:
		return http.StatusServiceUnavailable, "the target is shutting down"
	}
	select {
	case p.slots <- struct{}{}:
	default:
		return http.StatusServiceUnavailable, fmt.Sprintf("all %d slots of the target are busy", cap(p.slots))
	}
	p.running[key] = true
	p.attempts.Add(1)
	a := p.newAttempt(env, base)
	go func() {
		defer p.attempts.Done()
		a.run()
		p.mu.Lock()
		delete(p.running, key)
		p.recent.add(key)
		p.mu.Unlock()
		<-p.slots
	}()
	return http.StatusAccepted, ""
}

// Shutdown stops taking deliveries (they are answered 503) and waits for the running attempts to
// finish and their outcomes to be reported. Once ctx ends it cancels the handlers still running
// (ErrShutdown) and hands their attempts back to the server as retryable INFRASTRUCTURE
// failures, trying for up to 10 s more. It returns an error when some outcome could not be
// delivered (the server then times the attempt out). Serve no more deliveries with the
// PushHandler after it: it takes none.
func (p *PushHandler) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	p.closing = true
	p.mu.Unlock()
	done := make(chan struct{})
	go func() { p.attempts.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		p.log.Warn("push target shutting down: handing back running tasks")
		p.forced.Do(func() { close(p.force) })
		timer := time.NewTimer(handBackTimeout)
		defer timer.Stop()
		select {
		case <-done:
		case <-timer.C:
			p.abandon() // the report loops give up and return
			<-done
		}
	}
	p.abandon()
	if n := p.unreported.Load(); n > 0 {
		return fmt.Errorf("baton worker: %d attempt outcome(s) not delivered before shutdown; the server will time them out", n)
	}
	return nil
}

// newAttempt prepares the attempt env delivers, to report to the public listener at base.
func (p *PushHandler) newAttempt(env *wire.PushEnvelope, base string) *attempt {
	t := &Task{ID: env.TaskID, JobID: env.RunID, Key: env.TaskKey, Name: env.TaskName, Attempt: env.Attempt,
		Input: env.Input, DependencyOutputs: env.DependencyOutputs, CapabilityToken: env.TaskToken,
		CapabilityTokenExpiresAt: env.TokenExpiresAt.Time, Traceparent: env.Traceparent, PublicURL: base}
	if len(t.Input) == 0 || string(t.Input) == "null" {
		t.Input = env.Config
	}
	if len(t.Input) == 0 || string(t.Input) == "null" {
		t.Input = json.RawMessage("{}")
	}
	if t.DependencyOutputs == nil {
		t.DependencyOutputs = map[string]json.RawMessage{}
	}
	if env.Job != nil {
		t.Pipeline = &PipelineTask{Job: *env.Job, Operator: env.Operator, Inputs: env.Inputs, Outputs: env.Outputs, Trigger: env.Trigger}
	}
	if !env.Deadline.IsZero() {
		// The timeout ran from the claim: when the lease the server took last began.
		claimedAt := time.Now()
		if lease := time.Duration(env.HeartbeatTimeoutMs) * time.Millisecond; lease > 0 && !env.LeaseExpiresAt.IsZero() {
			if leased := env.LeaseExpiresAt.Add(-lease); leased.Before(claimedAt) {
				claimedAt = leased
			}
		}
		t.Timeout = max(env.Deadline.Sub(claimedAt), 0)
	}
	a := &attempt{h: &p.host, d: scopedDialect{}, api: &client{url: base, http: p.http}, routes: scopedRoutes, handler: p.h,
		task: t, taskID: env.TaskID, lease: env.LeaseToken, every: pushHeartbeatEvery(env.HeartbeatIntervalMs, env.HeartbeatTimeoutMs),
		leaseTTL: time.Duration(env.HeartbeatTimeoutMs) * time.Millisecond,
		log:      p.log.With("task_id", env.TaskID, "attempt", env.Attempt, "task", env.TaskName)}
	a.bind()
	t.fetchSecrets = func(context.Context) (map[string]string, error) {
		return nil, Permanent(&Error{Category: Configuration, Err: ErrNoSecretsOnPush})
	}
	a.ctx, a.cancel = context.WithCancelCause(withTraceparent(p.runCtx, t.Traceparent))
	a.handlerCtx, a.stopDeadline = a.ctx, func() {}
	if !env.Deadline.IsZero() {
		a.handlerCtx, a.stopDeadline = context.WithDeadlineCause(a.ctx, env.Deadline.Time, ErrTimeout)
	}
	a.log.Debug("push delivery taken", "lease_expires_at", env.LeaseExpiresAt.Time, "heartbeat_every", a.every)
	return a
}

// decodeEnvelope reads a push envelope and checks what running it needs.
func decodeEnvelope(body []byte) (*wire.PushEnvelope, error) {
	var env wire.PushEnvelope
	if err := json.Unmarshal(body, &env); err != nil {
		return nil, fmt.Errorf("the body is not a push envelope: %v", err)
	}
	switch {
	case env.TaskID == "":
		return nil, errors.New("the push envelope has no taskId")
	case env.Attempt < 1:
		return nil, fmt.Errorf("the push envelope's attempt %d is not a positive integer", env.Attempt)
	case env.TaskToken == "":
		return nil, errors.New("the push envelope has no taskToken")
	case env.LeaseToken == "":
		return nil, errors.New("the push envelope has no leaseToken")
	}
	return &env, nil
}

// pushHeartbeatEvery is the heartbeat interval of a pushed attempt: the envelope's, else a third
// of its lease, else 10 s.
func pushHeartbeatEvery(intervalMs, timeoutMs int64) time.Duration {
	switch {
	case intervalMs > 0:
		return time.Duration(intervalMs) * time.Millisecond
	case timeoutMs > 0:
		return time.Duration(timeoutMs) * time.Millisecond / 3
	}
	return 10 * time.Second
}

// pushKey names an attempt among deliveries.
func pushKey(taskID string, attempt int) string { return taskID + "/" + strconv.Itoa(attempt) }

// pushAnswer writes a JSON {"error": msg} answer.
func pushAnswer(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

func httpURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// recentSet remembers the last recentPushes keys added.
type recentSet struct {
	keys []string
	next int
	set  map[string]bool
}

func (r *recentSet) has(k string) bool { return r.set[k] }

func (r *recentSet) add(k string) {
	if r.set == nil {
		r.set = map[string]bool{}
	}
	if len(r.keys) < recentPushes {
		r.keys = append(r.keys, k)
	} else {
		delete(r.set, r.keys[r.next])
		r.keys[r.next] = k
		r.next = (r.next + 1) % recentPushes
	}
	r.set[k] = true
}
