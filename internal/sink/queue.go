package sink

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/baton-dev/baton/wire"
)

// Queue is the Buffer Queue as a sink sees it, in the shapes of the internal listener's
// /internal/sink/* routes. Remote serves it from a server's internal listener (baton sink); a
// server running a sink in its own process (baton dev, baton server --sink) serves it from its
// dispatcher without HTTP.
type Queue interface {
	// Claim claims up to p.Max messages, waiting up to p.WaitSeconds for one.
	Claim(ctx context.Context, p wire.SinkClaimRequest) ([]wire.SinkMessage, error)
	// Extend keeps a received message the caller's for p.VisibilitySeconds from now. A claim lost
	// to another receive, or a message settled meanwhile, is refused with an error wrapping
	// ErrNotClaimed (ErrNotFound for a message that is gone).
	Extend(ctx context.Context, p wire.SinkExtend) error
	// Commit reports that a message was loaded, and what the load added.
	Commit(ctx context.Context, p wire.SinkCommit) error
	// Fail reports that a received message could not be loaded; dead reports that it was
	// dead-lettered. A message no longer this receive's (another receive holds it, or it is
	// settled) is refused with an error wrapping ErrNotClaimed (ErrNotFound for one that is gone).
	Fail(ctx context.Context, p wire.SinkFail) (dead bool, err error)
}

// The queue's refusals of an extension or a fail.
var (
	ErrNotClaimed = errors.New("the buffer batch is not claimed by this receive")
	ErrNotFound   = errors.New("buffer batch not found")
)

// Remote is the Buffer Queue of a server, through its internal listener.
type Remote struct {
	URL    string       // the internal listener's base URL
	Client *http.Client // with the sink's client certificate where the listener requires mTLS
}

func (r Remote) Claim(ctx context.Context, p wire.SinkClaimRequest) ([]wire.SinkMessage, error) {
	var out wire.SinkClaim
	if err := r.post(ctx, "/internal/sink/claim", p, &out); err != nil {
		return nil, err
	}
	return out.Messages, nil
}

// Extend turns the server's 409 and 404 into ErrNotClaimed and ErrNotFound.
func (r Remote) Extend(ctx context.Context, p wire.SinkExtend) error {
	return refusal(r.post(ctx, "/internal/sink/extend", p, nil))
}

// refusal turns the server's 409 and 404 answers to an extend or a fail into ErrNotClaimed and
// ErrNotFound.
func refusal(err error) error {
	var se *StatusError
	if errors.As(err, &se) {
		switch se.Status {
		case http.StatusConflict:
			return fmt.Errorf("%w: %w", ErrNotClaimed, err)
		case http.StatusNotFound:
			return fmt.Errorf("%w: %w", ErrNotFound, err)
		}
	}
	return err
}

func (r Remote) Commit(ctx context.Context, p wire.SinkCommit) error {
	return r.post(ctx, "/internal/sink/commit", p, nil)
}

// Fail turns the server's 409 and 404 into ErrNotClaimed and ErrNotFound.
func (r Remote) Fail(ctx context.Context, p wire.SinkFail) (bool, error) {
	var out wire.SinkFailed
	err := r.post(ctx, "/internal/sink/fail", p, &out)
	return out.Dead, refusal(err)
}

// post sends body as JSON and decodes a 200's answer into out (when not nil).
func (r Remote) post(ctx context.Context, path string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(r.URL, "/")+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	client := r.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("sink: %s: %w", path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return fmt.Errorf("sink: %s: read answer: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return &StatusError{Path: path, Status: resp.StatusCode, Body: strings.TrimSpace(string(data))}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("sink: %s: decode answer: %w", path, err)
	}
	return nil
}

// StatusError is a server's refusal of a Remote call.
type StatusError struct {
	Path   string
	Status int
	Body   string
}

func (e *StatusError) Error() string { return fmt.Sprintf("sink: %s: %d %s", e.Path, e.Status, e.Body) }
