package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/baton-dev/baton/internal/retryafter"
	"github.com/baton-dev/baton/wire"
)

// The stream-worker dialect (docs/contracts/stream-worker.md) of the server's internal listener,
// plus the internal dialect's task-complete (docs/contracts/internal.md) for reporting a cancelled
// attempt, which the stream-worker dialect cannot say.
const (
	pathClaim        = "/internal/worker/claim"
	pathHeartbeat    = "/internal/worker/heartbeat"
	pathComplete     = "/internal/worker/complete"
	pathFail         = "/internal/worker/fail"
	pathTaskComplete = "/internal/task-complete"
)

const (
	// claimSlack is how much longer than its long poll a claim request may take.
	claimSlack = 15 * time.Second
	// requestTimeout bounds one heartbeat or report request.
	requestTimeout = 30 * time.Second
	// maxAnswer caps how much of an answer is read.
	maxAnswer = 4 << 20
	// Retries of heartbeats, reports and claims back off exponentially between these bounds.
	minBackoff = 100 * time.Millisecond
	maxBackoff = 10 * time.Second
	// maxRetryAfter caps how long a Retry-After makes a retry wait.
	maxRetryAfter = time.Minute
)

// apiError is a non-2xx answer of the server.
type apiError struct {
	Path    string
	Status  int
	Code    string // the body's "error"
	Message string // the body's "message"
	// RetryAfter is the delay the answer's Retry-After header asked for (a 503 while the
	// server's database is unreachable, a 429), or 0.
	RetryAfter time.Duration
}

func (e *apiError) Error() string {
	return fmt.Sprintf("baton worker: %s: %d %s: %s", e.Path, e.Status, e.Code, e.Message)
}

// gone reports an answer that means the attempt is no longer this worker's to run or report:
// 409 (attempt_mismatch, lease_mismatch, task_already_terminal, outcome_conflict),
// 410 task_expired, 404 task_not_found.
func gone(err error) bool {
	var e *apiError
	return errors.As(err, &e) && (e.Status == http.StatusConflict || e.Status == http.StatusGone || e.Status == http.StatusNotFound)
}

// transient reports an error worth retrying: no answer at all (network, timeout), a 5xx, 408 or
// 429. Any other answer was a decision of the server.
func transient(err error) bool {
	var e *apiError
	if !errors.As(err, &e) {
		return true
	}
	return e.Status >= 500 || e.Status == http.StatusRequestTimeout || e.Status == http.StatusTooManyRequests
}

// client sends requests to one listener of the server: the internal one (a Worker), or the
// public one (a pushed attempt).
type client struct {
	url  string // the listener's base URL, without a trailing slash
	http *http.Client
}

// post sends body as JSON to the server and decodes a 2xx answer into out (unless nil).
func (c *client) post(ctx context.Context, timeout time.Duration, path string, body, out any) error {
	return c.postWith(ctx, timeout, path, nil, body, out)
}

// postWith is post with extra request headers (name, value pairs).
func (c *client) postWith(ctx context.Context, timeout time.Duration, path string, header []string, body, out any) error {
	raw, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("baton worker: %s: encode the request: %w", path, err)
	}
	return c.request(ctx, timeout, http.MethodPost, path, header, raw, out)
}

// getWith GETs path (with its query) with extra request headers and decodes the answer into out.
func (c *client) getWith(ctx context.Context, timeout time.Duration, path string, header []string, out any) error {
	return c.request(ctx, timeout, http.MethodGet, path, header, nil, out)
}

// request sends one request: a JSON body unless it is nil.
func (c *client) request(ctx context.Context, timeout time.Duration, method, path string, header []string, raw []byte, out any) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var body io.Reader
	if raw != nil {
		body = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url+path, body)
	if err != nil {
		return fmt.Errorf("baton worker: %s: %w", path, err)
	}
	if raw != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("baton worker: %s: %w", path, err)
	}
	defer res.Body.Close()
	ans, err := io.ReadAll(io.LimitReader(res.Body, maxAnswer))
	if err != nil {
		return fmt.Errorf("baton worker: %s: read the answer: %w", path, err)
	}
	if res.StatusCode/100 != 2 {
		e := &apiError{Path: path, Status: res.StatusCode, RetryAfter: retryafter.Parse(res.Header.Get("Retry-After"))}
		var b struct {
			Error   any    `json:"error"`
			Message string `json:"message"`
		}
		if json.Unmarshal(ans, &b) == nil {
			e.Code, e.Message = fmt.Sprint(b.Error), b.Message
		} else {
			e.Message = string(bytes.TrimSpace(ans[:min(len(ans), 200)]))
		}
		return e
	}
	if out != nil {
		if err := json.Unmarshal(ans, out); err != nil {
			// A proxy's 2xx page, say: the call may not have reached the server.
			return fmt.Errorf("baton worker: %s: decode the answer: %w", path, err)
		}
	}
	return nil
}

// backoff is an exponential delay from minBackoff to maxBackoff with ±50% jitter.
type backoff struct{ n int }

func (b *backoff) next() time.Duration {
	d := min(maxBackoff, minBackoff<<min(b.n, 20))
	b.n++
	return time.Duration(float64(d) * (0.5 + rand.Float64()))
}

// after is the delay before trying again after err: the next backoff, or longer when the
// server's answer asked for longer with Retry-After (up to maxRetryAfter).
func (b *backoff) after(err error) time.Duration {
	d := b.next()
	var e *apiError
	if errors.As(err, &e) && e.RetryAfter > d {
		d = min(e.RetryAfter, maxRetryAfter)
	}
	return d
}

func (b *backoff) reset() { b.n = 0 }

// sleep waits for d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// claimAnswer is /internal/worker/claim's answer (one claim of it).
type claimAnswer = wire.StreamClaim

// heartbeatAnswer is /internal/worker/heartbeat's answer.
type heartbeatAnswer struct {
	OK             bool      `json:"ok"`
	LeaseExpiresAt time.Time `json:"lease_expires_at"`
	ShouldCancel   bool      `json:"should_cancel"`
	CancelReason   *string   `json:"cancel_reason"`
	// A fresh capability token, when the claim's has less than half of its life left.
	CapabilityToken          string    `json:"capability_token"`
	CapabilityTokenExpiresAt time.Time `json:"capability_token_expires_at"`
}

// failure is the stream-worker dialect's error object of /internal/worker/fail.
type failure struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	Stack     string `json:"stack,omitempty"`
	Retryable *bool  `json:"retryable,omitempty"`
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
