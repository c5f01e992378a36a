// Package client is a Go client for Baton's producer API: submit jobs (DAGs of tasks), add tasks
// to them, follow their progress, cancel and resume them; deploy pipelines and read their
// datasets, and query them with read-only SQL (Query).
//
//	c := client.New("https://baton.example.com", os.Getenv("BATON_API_KEY"))
//	res, err := c.SubmitJob(ctx, client.SubmitJobRequest{Tasks: tasks}, client.WithIdempotencyKey(key))
//	job, err := c.Watch(ctx, res.JobID, time.Second, nil)
//
// Every answer other than 2xx is returned as an *APIError. Requests that are safe to repeat
// (GETs, and a job submission that carries an idempotency key) are retried when the server
// answers 429 Too Many Requests or 503 Service Unavailable (its database is unavailable for a
// moment), after the delay its Retry-After header asks for.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/baton-dev/baton/internal/retryafter"
)

// DefaultUserAgent is the User-Agent sent unless WithUserAgent replaces it.
const DefaultUserAgent = "baton-go-client"

const (
	// maxTries bounds the attempts of a retryable request, the first one included.
	maxTries = 3
	// maxRetryWait is the longest Retry-After the client sleeps through; a longer one (a daily
	// quota that resets at midnight) is returned to the caller at once.
	maxRetryWait = time.Minute
	// defaultRetryWait is the delay before a retry when the server gave no Retry-After.
	defaultRetryWait = time.Second
	// maxErrorBody caps how much of an error answer is read.
	maxErrorBody = 1 << 20
)

// Client calls Baton's producer API. It is safe for concurrent use.
type Client struct {
	baseURL   string
	apiKey    string
	http      *http.Client
	userAgent string
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sends requests with hc instead of http.DefaultClient. A Timeout on hc also
// bounds StreamEvents, which holds its answer open until the job finishes; prefer contexts.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) {
		if hc != nil {
			c.http = hc
		}
	}
}

// WithUserAgent sets the User-Agent header of every request.
func WithUserAgent(ua string) Option {
	return func(c *Client) { c.userAgent = ua }
}

// New returns a client of the server at baseURL (e.g. "http://127.0.0.1:8080") that
// authenticates with apiKey.
func New(baseURL, apiKey string, opts ...Option) *Client {
	c := &Client{
		baseURL:   strings.TrimRight(baseURL, "/"),
		apiKey:    apiKey,
		http:      http.DefaultClient,
		userAgent: DefaultUserAgent,
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// APIError is a non-2xx answer of the server.
type APIError struct {
	Status int // HTTP status code
	// Code is a machine-readable reason, when the server gives one: the body's "error" of an
	// answer that also has a "message" ({"error": "sql_rejected", "message": "..."}).
	Code    string
	Message string   // the body's "message" when it has a Code, else its "error"
	Errors  []string // the body's "errors": every validation failure, when there are several
	// RetryAfter is the delay the server asked for in a Retry-After header (429, 503), or 0.
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	msg := e.Message
	if n := len(e.Errors); n > 1 {
		msg = strings.Join(e.Errors, "; ")
	}
	if e.Code != "" {
		return fmt.Sprintf("baton: %d %s (%s): %s", e.Status, http.StatusText(e.Status), e.Code, msg)
	}
	return fmt.Sprintf("baton: %d %s: %s", e.Status, http.StatusText(e.Status), msg)
}

// IsNotFound reports whether err is an APIError with status 404 (no such job or task).
func IsNotFound(err error) bool {
	var e *APIError
	return errors.As(err, &e) && e.Status == http.StatusNotFound
}

// request is one call of the API.
type request struct {
	method string
	path   string // escaped path and query, from the base URL
	body   []byte // nil: no body
	header http.Header
	// retry allows repeating the request: it is safe to send twice.
	retry bool
}

// do sends r, retrying on 429 and 503 when r allows it, and decodes a 2xx JSON answer into out
// (unless out is nil). It returns the answer's header.
func (c *Client) do(ctx context.Context, r request, out any) (http.Header, error) {
	for try := 1; ; try++ {
		res, err := c.send(ctx, r, "application/json")
		if err != nil {
			return nil, err
		}
		if res.StatusCode/100 == 2 {
			defer res.Body.Close()
			if out == nil {
				_, _ = io.Copy(io.Discard, res.Body)
				return res.Header, nil
			}
			if err := json.NewDecoder(res.Body).Decode(out); err != nil {
				return nil, fmt.Errorf("baton: %s %s: decode the answer: %w", r.method, r.path, err)
			}
			_, _ = io.Copy(io.Discard, res.Body) // the trailing newline, so the connection is reused
			return res.Header, nil
		}
		apiErr := readAPIError(res)
		if !r.retry || try >= maxTries || (apiErr.Status != http.StatusTooManyRequests && apiErr.Status != http.StatusServiceUnavailable) {
			return nil, apiErr
		}
		wait := apiErr.RetryAfter
		if wait == 0 {
			wait = defaultRetryWait
		}
		if wait > maxRetryWait {
			return nil, apiErr
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("baton: %s %s: waiting to retry after %d: %w", r.method, r.path, apiErr.Status, ctx.Err())
		case <-t.C:
		}
	}
}

// send sends r once and returns the answer, whatever its status.
func (c *Client) send(ctx context.Context, r request, accept string) (*http.Response, error) {
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, c.baseURL+r.path, body)
	if err != nil {
		return nil, fmt.Errorf("baton: %s %s: %w", r.method, r.path, err)
	}
	for k, v := range r.header {
		req.Header[k] = v
	}
	req.Header.Set("x-api-key", c.apiKey)
	req.Header.Set("Accept", accept)
	if c.userAgent != "" {
		req.Header.Set("User-Agent", c.userAgent)
	}
	if r.body != nil && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("baton: %s %s: %w", r.method, r.path, err)
	}
	return res, nil
}

// readAPIError reads a non-2xx answer and closes its body.
func readAPIError(res *http.Response) *APIError {
	defer res.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
	e := &APIError{Status: res.StatusCode, RetryAfter: retryafter.Parse(res.Header.Get("Retry-After"))}
	var body struct {
		Error   string   `json:"error"`
		Message string   `json:"message"`
		Errors  []string `json:"errors"`
	}
	if json.Unmarshal(raw, &body) == nil && body.Error != "" {
		e.Message, e.Errors = body.Error, body.Errors
		if body.Message != "" {
			e.Code, e.Message = body.Error, body.Message
		}
		return e
	}
	// Not Baton's JSON (a proxy's page, say): keep a short excerpt of what came back.
	text := strings.TrimSpace(string(raw))
	if len(text) > 200 {
		text = text[:200] + "…"
	}
	e.Message = text
	if e.Message == "" {
		e.Message = http.StatusText(res.StatusCode)
	}
	return e
}
