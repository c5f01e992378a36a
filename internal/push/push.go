// Package push delivers the tasks of runtime "push" to their HTTP targets: it takes each
// attempt's lease, POSTs the push envelope, and fails the attempt when the target does not take it.
//
// The push runtime (docs/contracts/push.md): for a task with runtime "push" the server takes the
// lease itself (Dispatcher.ClaimPushWait) and POSTs the push envelope (wire.PushEnvelope) to the HTTP
// target configured for the task's name. A 2xx answer means the target took the task: it then
// reports through the callback or task-scoped dialect with the envelope's task token, like any
// worker. Anything else fails the attempt through the core's retry rule, so the dispatcher owns
// every retry (the target's own retries should be off). A task of a pipeline's lambda job whose
// name has no target here is not claimed: it waits, pending, for a deliverer that has one (a plain
// job's task without a target is claimed and fails as CONFIGURATION: its submission was checked).
//
// A target with a secret (Config.Secrets) gets it as a bearer token, and each delivery is signed
// over its timestamp and exact body (internal/pushsig's Sign; the worker SDK's VerifyPushRequest
// checks it), so the target can refuse forged and replayed deliveries. Every delivery, a retry's
// too, is signed afresh when it is sent. A target without a secret gets no authentication headers.
package push

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/jonboulle/clockwork"

	"github.com/baton-dev/baton/internal/assignment"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/pushsig"
	"github.com/baton-dev/baton/internal/service"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/wire"
)

// TokenFunc mints the capability token of a claimed attempt of t (the API's), with its expiry:
// the envelope hands it to the target, which reports with it.
type TokenFunc func(ctx context.Context, t *store.Task, job dispatch.JobRef, route *wire.Route) (string, time.Time, error)

// Config configures a Deliverer.
type Config struct {
	// Token mints the task token of each delivery; required (without tokens a target could not
	// report back, and the Deliverer does not start).
	Token  TokenFunc
	Logger *slog.Logger // default slog.Default()

	Targets         map[string]string // task name → target URL (baton server --push-target NAME=URL)
	CallbackBaseURL string            // the public URL targets call back (the envelope's callbackBaseUrl)
	Timeout         time.Duration     // how long a target has to answer a delivery; default 30 s
	Concurrency     int               // deliveries in flight at once; default 16
	// Secrets are the targets' secrets by task name (baton server --push-secret NAME=SECRET). A
	// target with one is sent "Authorization: Bearer <secret>", Baton-Timestamp and
	// Baton-Signature with every delivery; one without is sent none of them. A secret that
	// pushsig.CheckSecret refuses, the empty one included, makes its target unusable (its
	// deliveries fail as CONFIGURATION); a secret for a name without a target is unused.
	Secrets map[string]string
	// Clock stamps the signatures; default the real clock. Not the dispatcher's: a target checks
	// the timestamp against its own clock.
	Clock clockwork.Clock
	// Client sends the deliveries. The default has no overall timeout (Timeout bounds each
	// request) and does not follow redirects: a 3xx is an answer, and a failed delivery.
	Client   *http.Client
	WorkerID string // the worker id push attempts are claimed under; default "baton-push"
}

const (
	// pushMaxWait bounds one claim long poll, so that the loop looks at its slots again now and
	// then; Stop does not wait for it (the poll ends with the loop's context).
	pushMaxWait = 5 * time.Second
	// pushRetryPause is the pause after a claim failed (the store is unreachable, say).
	pushRetryPause = time.Second
	// pushCompleteTimeout bounds the core call that fails an attempt after a delivery.
	pushCompleteTimeout = 30 * time.Second
	// pushSnippetBytes bounds how much of a refusing target's answer goes into the task error.
	pushSnippetBytes = 200
)

// Deliverer claims ready push tasks and delivers each to its target. Start it once; Stop stops it.
type Deliverer struct {
	d       *dispatch.Dispatcher
	log     *slog.Logger
	cfg     Config
	client  *http.Client
	ownTr   *http.Transport // the default client's transport, closed on Stop
	targets map[string]pushTarget
	names   []string      // of targets, sorted: a pipeline task of another name waits for a target
	slots   chan struct{} // one token per delivery in flight

	inflight sync.WaitGroup
	loop     service.Loop
	stopOnce sync.Once
}

// pushTarget is a configured target: the URL to POST to, how messages name it (without its
// password or query, which may hold credentials: task errors are shown to the tenant), the secret
// that signs its deliveries ("": none), and why it cannot be used, if it cannot.
type pushTarget struct {
	url, display, secret, invalid string
}

// New returns a stopped Deliverer of d's push tasks.
func New(d *dispatch.Dispatcher, cfg Config) *Deliverer {
	cfg.Timeout = cmp.Or(cfg.Timeout, 30*time.Second)
	cfg.Concurrency = max(cmp.Or(cfg.Concurrency, 16), 1)
	cfg.WorkerID = cmp.Or(cfg.WorkerID, "baton-push")
	cfg.CallbackBaseURL = strings.TrimRight(cfg.CallbackBaseURL, "/")
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	p := &Deliverer{d: d, log: cmp.Or(cfg.Logger, slog.Default()), cfg: cfg, client: cfg.Client, targets: make(map[string]pushTarget, len(cfg.Targets)),
		slots: make(chan struct{}, cfg.Concurrency)}
	if p.client == nil {
		p.ownTr = http.DefaultTransport.(*http.Transport).Clone()
		p.ownTr.MaxIdleConnsPerHost = cfg.Concurrency
		p.client = &http.Client{Transport: p.ownTr,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	for name, raw := range cfg.Targets {
		secret, signed := cfg.Secrets[name]
		p.targets[name] = parsePushTarget(raw, secret, signed)
		p.names = append(p.names, name)
	}
	slices.Sort(p.names)
	return p
}

// parsePushTarget reads a target's URL and, when signed, its secret. An empty secret makes the
// target unusable rather than unsigned: it is more likely a secret that failed to load than a
// wish to send none.
func parsePushTarget(raw, secret string, signed bool) pushTarget {
	u, err := url.Parse(raw)
	if err != nil {
		return pushTarget{url: raw, display: "(unparsable URL)", invalid: "is not a valid URL"}
	}
	shown := *u
	shown.RawQuery, shown.ForceQuery, shown.Fragment, shown.RawFragment = "", false, "", ""
	t := pushTarget{url: raw, display: shown.Redacted(), secret: secret}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		t.invalid = "is not an http(s) URL"
	} else if err := pushsig.CheckSecret(secret); signed && err != nil {
		t.invalid = "has an unusable secret: " + err.Error()
	}
	return t
}

// Start runs the push dispatcher until Stop or until ctx ends. Deliveries outlive ctx: each one
// finishes (bounded by Timeout) and its outcome is recorded.
func (p *Deliverer) Start(ctx context.Context) error { return p.loop.Run(ctx, p.run) }

// Stop stops claiming and waits for the deliveries in flight. It may be called more than once,
// and before Start.
func (p *Deliverer) Stop() {
	p.loop.Stop()
	p.stopOnce.Do(func() {
		p.inflight.Wait()
		if p.ownTr != nil {
			p.ownTr.CloseIdleConnections()
		}
	})
}

func (p *Deliverer) run(ctx context.Context) {
	if p.cfg.Token == nil {
		// Without tokens a target could not call back: claiming would only burn attempts.
		p.log.ErrorContext(ctx, "push dispatcher not started: no capability token issuer configured (push.Config.Token)")
		return
	}
	if p.cfg.CallbackBaseURL == "" {
		p.log.WarnContext(ctx, "push dispatcher has no callback base URL: targets cannot report back")
	}
	for {
		n, ok := p.acquire(ctx)
		if !ok {
			return
		}
		claims, err := p.d.ClaimPushWait(ctx, dispatch.ClaimPushParams{WorkerID: p.cfg.WorkerID, Limit: n, Targets: p.names}, pushMaxWait)
		if err != nil {
			claims = nil // the transaction did not commit
		}
		p.release(n - len(claims))
		for _, c := range claims {
			p.inflight.Add(1)
			go func() {
				defer p.inflight.Done()
				defer p.release(1)
				p.deliver(context.WithoutCancel(ctx), c)
			}()
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			p.log.ErrorContext(ctx, "claim push tasks", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(pushRetryPause):
			}
		}
	}
}

// acquire waits for a free delivery slot and takes it and every other free one.
func (p *Deliverer) acquire(ctx context.Context) (int, bool) {
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return 0, false
	}
	n := 1
	for n < cap(p.slots) {
		select {
		case p.slots <- struct{}{}:
			n++
		default:
			return n, true
		}
	}
	return n, true
}

func (p *Deliverer) release(n int) {
	for range n {
		<-p.slots
	}
}

// deliver hands one claimed attempt to its target, and fails the attempt if the target does not
// take it.
func (p *Deliverer) deliver(ctx context.Context, c *dispatch.Claim) {
	t := c.Task
	log := p.log.With("task", t.ID, "job", t.JobID, "attempt", t.Attempt, "name", t.Name)
	target, ok := p.targets[t.Name]
	if !ok {
		p.fail(ctx, log, t, lifecycle.Configuration,
			fmt.Sprintf("no push target for task name %q (baton server --push-target %s=URL)", t.Name, t.Name))
		return
	}
	log = log.With("target", target.display)
	if target.invalid != "" {
		p.fail(ctx, log, t, lifecycle.Configuration, fmt.Sprintf("push target %s for task name %q %s", target.display, t.Name, target.invalid))
		return
	}
	key := fmt.Sprintf("%s/%s/%d", t.JobID, t.ID, t.Attempt)
	body, err := p.envelope(ctx, c, key)
	if err != nil {
		p.fail(ctx, log, t, lifecycle.Infrastructure, fmt.Sprintf("could not prepare the delivery to push target %s: %v", target.display, err))
		return
	}
	start := time.Now()
	status, err := p.post(ctx, target, key, t.Traceparent, body)
	if err != nil {
		p.fail(ctx, log, t, lifecycle.Infrastructure, err.Error())
		return
	}
	log.DebugContext(ctx, "push delivered", "status", status, "took", time.Since(start))
}

// envelope is the push envelope of c (wire.PushEnvelope), with a fresh task token.
func (p *Deliverer) envelope(ctx context.Context, c *dispatch.Claim, key string) ([]byte, error) {
	token, tokenExp, err := p.cfg.Token(ctx, c.Task, c.Job, c.Route)
	if err != nil {
		return nil, fmt.Errorf("issue task token: %w", err)
	}
	env := assignment.Assignment{Claim: c, Token: token, TokenExpires: tokenExp}.Push(p.cfg.CallbackBaseURL, key)
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(env); err != nil {
		return nil, fmt.Errorf("encode envelope: %w", err)
	}
	return b.Bytes(), nil
}

// post sends one delivery, with the job's traceparent (if any) as its header. A nil error means
// the target took the task (a 2xx); otherwise the error's text is the task error's message.
func (p *Deliverer) post(ctx context.Context, target pushTarget, key, traceparent string, body []byte) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target.url, bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("push target %s: %w", target.display, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	if traceparent != "" {
		req.Header.Set("traceparent", traceparent)
	}
	if target.secret != "" {
		ts, sig := pushsig.Sign(target.secret, p.cfg.Clock.Now(), body)
		req.Header.Set("Authorization", "Bearer "+target.secret)
		req.Header.Set(pushsig.TimestampHeader, ts)
		req.Header.Set(pushsig.SignatureHeader, sig)
	}
	res, err := p.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.Is(ctx.Err(), context.DeadlineExceeded) || (errors.As(err, &ue) && ue.Timeout()) {
			return 0, fmt.Errorf("push target %s did not answer within %s", target.display, p.cfg.Timeout)
		}
		if errors.As(err, &ue) {
			err = ue.Err // url.Error repeats the full URL, query included
		}
		return 0, fmt.Errorf("push target %s could not be reached: %v", target.display, err)
	}
	defer res.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(res.Body, 4<<10)) // drained, so the connection is reused
	if res.StatusCode >= 200 && res.StatusCode < 300 {
		return res.StatusCode, nil
	}
	msg := fmt.Sprintf("push target %s answered %s", target.display, strings.TrimSpace(fmt.Sprintf("%d %s", res.StatusCode, http.StatusText(res.StatusCode))))
	if s := snippet(answer); s != "" {
		msg += ": " + s
	}
	return res.StatusCode, errors.New(msg)
}

// snippet is the start of a target's answer on one line, for a task error.
func snippet(b []byte) string {
	s := strings.ToValidUTF8(string(b), "")
	s = strings.Join(strings.FieldsFunc(s, unicode.IsSpace), " ")
	if len(s) > pushSnippetBytes {
		s = strings.ToValidUTF8(s[:pushSnippetBytes], "") + "…"
	}
	return s
}

// fail ends the delivered attempt as failed; the core's retry rule decides what follows. An
// attempt that already ended (the target reported before it answered, or the lease was lost) is
// left as it is.
func (p *Deliverer) fail(ctx context.Context, log *slog.Logger, t *store.Task, category lifecycle.Category, message string) {
	ctx, cancel := context.WithTimeout(ctx, pushCompleteTimeout)
	defer cancel()
	res, err := p.d.Complete(ctx, dispatch.CompleteParams{TaskID: t.ID, Attempt: t.Attempt, LeaseToken: t.LeaseToken,
		Outcome: store.OutcomeFailed, Error: &store.TaskError{Category: category, Message: message}})
	var mismatch *dispatch.AttemptMismatchError
	switch {
	case err == nil:
		log.WarnContext(ctx, "push delivery failed", "category", category, "error", message,
			"requeued", res.Requeued, "dead_lettered", res.DeadLettered, "duplicate", res.Duplicate)
	case errors.As(err, &mismatch), errors.Is(err, dispatch.ErrLeaseMismatch),
		errors.Is(err, dispatch.ErrOutcomeConflict), errors.Is(err, dispatch.ErrTaskExpired), errors.Is(err, dispatch.ErrTaskNotFound):
		log.DebugContext(ctx, "push delivery failed after the attempt ended", "error", message, "refusal", err)
	default:
		// The lease stands; when it expires the reaper fails the attempt instead.
		log.ErrorContext(ctx, "record failed push delivery", "error", message, "err", err)
	}
}
