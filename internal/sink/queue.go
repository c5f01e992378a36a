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
	"time"

	"github.com/baton-dev/baton/internal/api"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/pipeline"
)

// Queue is the Buffer Queue as a sink sees it. Local serves it from the dispatcher of the same
// process (baton dev, baton server --sink); Remote from a server's internal listener (baton sink).
type Queue interface {
	// Claim claims up to p.Max messages, waiting up to p.Wait for one.
	Claim(ctx context.Context, p dispatch.ClaimBatchesParams) ([]*dispatch.SinkMessage, error)
	// Extend keeps message id, received as receipt, this sink's for visibility from now. A claim
	// lost to another receive, or a message settled meanwhile, is refused with an error wrapping
	// dispatch.ErrBatchNotClaimed (dispatch.ErrBatchNotFound for a message that is gone).
	Extend(ctx context.Context, id int64, receipt int, visibility time.Duration) error
	// Commit reports that message id was loaded, and what the load added.
	Commit(ctx context.Context, id int64, res dispatch.BatchLoaded) error
	// Fail reports that message id, received as receipt, could not be loaded; dead reports that
	// it was dead-lettered.
	Fail(ctx context.Context, id int64, receipt int, reason string) (dead bool, err error)
}

// Local is the Buffer Queue of a dispatcher in the same process.
type Local struct{ D *dispatch.Dispatcher }

func (l Local) Claim(ctx context.Context, p dispatch.ClaimBatchesParams) ([]*dispatch.SinkMessage, error) {
	return l.D.ClaimBatches(ctx, p)
}

func (l Local) Extend(ctx context.Context, id int64, receipt int, visibility time.Duration) error {
	_, err := l.D.ExtendBatch(ctx, id, receipt, visibility)
	return err
}

func (l Local) Commit(ctx context.Context, id int64, res dispatch.BatchLoaded) error {
	return l.D.CommitBatch(ctx, id, res)
}

func (l Local) Fail(ctx context.Context, id int64, receipt int, reason string) (bool, error) {
	return l.D.FailBatch(ctx, id, receipt, reason)
}

// Remote is the Buffer Queue of a server, through its internal listener.
type Remote struct {
	URL    string       // the internal listener's base URL
	Client *http.Client // with the sink's client certificate where the listener requires mTLS
}

func (r Remote) Claim(ctx context.Context, p dispatch.ClaimBatchesParams) ([]*dispatch.SinkMessage, error) {
	var out api.SinkClaim
	err := r.post(ctx, "/internal/sink/claim", map[string]any{"max": p.Max, "id": p.ID,
		"visibility_seconds": int(p.Visibility / time.Second), "wait_seconds": int(p.Wait / time.Second)}, &out)
	if err != nil {
		return nil, err
	}
	msgs := make([]*dispatch.SinkMessage, 0, len(out.Messages))
	for _, m := range out.Messages {
		sm := &dispatch.SinkMessage{ID: m.ID, ReceiveCount: m.ReceiveCount, VisibleUntil: m.VisibleUntil, Message: m.Message,
			Tenant: m.OrgID, BatchURI: m.BatchURI, Dataset: dispatch.SinkDataset{UUID: m.Dataset.UUID, Name: m.Dataset.Name,
				FilterFields: m.Dataset.FilterFields}}
		if len(m.Dataset.Schema) > 0 && string(m.Dataset.Schema) != "null" {
			sm.Dataset.Schema = &pipeline.Schema{}
			if err := json.Unmarshal(m.Dataset.Schema, sm.Dataset.Schema); err != nil {
				return nil, fmt.Errorf("sink claim: message %d: schema: %w", m.ID, err)
			}
		}
		msgs = append(msgs, sm)
	}
	return msgs, nil
}

// Extend asks for whole seconds, rounding up; the server's 409 and 404 come back as
// dispatch.ErrBatchNotClaimed and dispatch.ErrBatchNotFound.
func (r Remote) Extend(ctx context.Context, id int64, receipt int, visibility time.Duration) error {
	err := r.post(ctx, "/internal/sink/extend", api.SinkExtend{ID: id, ReceiveCount: receipt,
		VisibilitySeconds: int((visibility + time.Second - 1) / time.Second)}, nil)
	var se *StatusError
	if errors.As(err, &se) {
		switch se.Status {
		case http.StatusConflict:
			return fmt.Errorf("%w: %w", dispatch.ErrBatchNotClaimed, err)
		case http.StatusNotFound:
			return fmt.Errorf("%w: %w", dispatch.ErrBatchNotFound, err)
		}
	}
	return err
}

func (r Remote) Commit(ctx context.Context, id int64, res dispatch.BatchLoaded) error {
	return r.post(ctx, "/internal/sink/commit", api.SinkCommit{ID: id, Cursor: res.Cursor, Inserted: res.Inserted, Facets: res.Facets}, nil)
}

func (r Remote) Fail(ctx context.Context, id int64, receipt int, reason string) (bool, error) {
	var out struct {
		Dead bool `json:"dead"`
	}
	err := r.post(ctx, "/internal/sink/fail", api.SinkFail{ID: id, ReceiveCount: receipt, Error: reason}, &out)
	return out.Dead, err
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
