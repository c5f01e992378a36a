package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/baton-dev/baton/internal/transport"
	"github.com/baton-dev/baton/internal/transport/dial"
)

// The raw paths speak a worker dialect directly, one goroutine per worker, one task at a time.

// rawPollWait is the long poll of a raw claim, and the wait of a wake-up receive.
const rawPollWait = time.Second

// retryPause is how long a raw worker waits after a failed request.
const retryPause = 50 * time.Millisecond

// workStream runs Workers goroutines of the stream-worker dialect: claim, then complete.
func (b *bench) workStream(ctx context.Context) error {
	var wg sync.WaitGroup
	for i := range b.cfg.Workers {
		wg.Go(func() { b.streamWorker(ctx, fmt.Sprintf("%s-stream-%d", b.cfg.TaskName, i)) })
	}
	wg.Wait()
	return nil
}

type streamClaimRequest struct {
	WorkerID  string   `json:"worker_id"`
	Streams   []string `json:"streams"`
	MaxWaitMs int64    `json:"max_wait_ms"`
}

type streamClaimAnswer struct {
	Claimed           bool                       `json:"claimed"`
	JobID             string                     `json:"job_id"` // the task id
	AttemptID         int                        `json:"attempt_id"`
	LeaseToken        string                     `json:"lease_token"`
	Stream            string                     `json:"stream"`
	MessageID         *string                    `json:"message_id"`
	TaskKey           string                     `json:"task_key"`
	RunID             string                     `json:"run_id"` // the task's job
	DependencyOutputs map[string]json.RawMessage `json:"dependency_outputs"`
}

type streamCompleteRequest struct {
	WorkerID   string          `json:"worker_id"`
	JobID      string          `json:"job_id"`
	AttemptID  int             `json:"attempt_id"`
	LeaseToken string          `json:"lease_token"`
	Stream     string          `json:"stream"`
	MessageID  *string         `json:"message_id"`
	Result     json.RawMessage `json:"result"`
}

func (b *bench) streamWorker(ctx context.Context, workerID string) {
	claim := streamClaimRequest{WorkerID: workerID, Streams: []string{b.cfg.TaskName}, MaxWaitMs: rawPollWait.Milliseconds()}
	for ctx.Err() == nil {
		var ans streamClaimAnswer
		start := time.Now()
		if err := b.post(ctx, b.cfg.InternalURL+pathStreamClaim, claim, &ans); err != nil {
			b.failed(ctx, err)
			continue
		}
		if !ans.Claimed {
			continue
		}
		got := time.Now()
		rec := b.rec.cur()
		t := ref{ans.RunID, ans.TaskKey}
		rec.claimed(got.Sub(start))
		rec.started(ans.JobID, t, parentKeys(ans.DependencyOutputs), got)
		done := streamCompleteRequest{WorkerID: workerID, JobID: ans.JobID, AttemptID: ans.AttemptID, LeaseToken: ans.LeaseToken,
			Stream: ans.Stream, MessageID: ans.MessageID, Result: json.RawMessage(`{}`)}
		if b.report(ctx, b.cfg.InternalURL+pathStreamComplete, done) {
			rec.completed(t, time.Now())
		}
	}
}

// workInternal runs Workers goroutines of the internal dialect, each with its own consumer of the
// transport: receive a wake-up, claim its task by id, complete it, acknowledge the wake-up.
func (b *bench) workInternal(ctx context.Context) error {
	tr, err := dial.Open(ctx, b.cfg.Transport, b.cfg.TransportURL, b.cfg.TransportNamespace)
	if err != nil {
		return fmt.Errorf("--transport %s at %s: %w", b.cfg.Transport, b.cfg.TransportURL, err)
	}
	defer tr.Close()
	var wg sync.WaitGroup
	for i := range b.cfg.Workers {
		id := fmt.Sprintf("%s-internal-%d", b.cfg.TaskName, i)
		c := tr.NewConsumer(id)
		wg.Go(func() {
			defer c.Close()
			b.internalWorker(ctx, id, c)
		})
	}
	wg.Wait()
	return nil
}

type taskClaimRequest struct {
	TaskID   string `json:"task_id"`
	WorkerID string `json:"worker_id"`
}

type taskClaimAnswer struct {
	Status     string `json:"status"` // Claimed or NotClaimed
	Attempt    int    `json:"attempt"`
	LeaseToken string `json:"lease_token"`
	Task       struct {
		TaskKey string `json:"task_key"`
		Job     struct {
			JobID string `json:"job_id"`
		} `json:"job"`
		DependencyOutputs map[string]json.RawMessage `json:"dependency_outputs"`
	} `json:"task"`
}

type taskCompleteRequest struct {
	TaskID     string `json:"task_id"`
	Attempt    int    `json:"attempt"`
	LeaseToken string `json:"lease_token"`
	Status     string `json:"status"` // Completed
}

func (b *bench) internalWorker(ctx context.Context, workerID string, c transport.Consumer) {
	queues := []string{b.cfg.TaskName}
	for ctx.Err() == nil {
		ds, err := c.Receive(ctx, queues, 1, rawPollWait)
		if err != nil {
			b.failed(ctx, fmt.Errorf("receive a wake-up: %w", err))
			continue
		}
		for _, d := range ds {
			b.internalTask(ctx, workerID, d)
		}
	}
}

// internalTask claims and completes the task of one wake-up. A wake-up whose claim or report
// failed stays unacknowledged, for the transport to deliver again.
func (b *bench) internalTask(ctx context.Context, workerID string, d transport.Delivery) {
	var ans taskClaimAnswer
	start := time.Now()
	if err := b.post(ctx, b.cfg.InternalURL+pathTaskClaim, taskClaimRequest{TaskID: d.TaskID(), WorkerID: workerID}, &ans); err != nil {
		b.failed(ctx, err)
		return
	}
	if ans.Status == "Claimed" {
		got := time.Now()
		rec := b.rec.cur()
		t := ref{ans.Task.Job.JobID, ans.Task.TaskKey}
		rec.claimed(got.Sub(start))
		rec.started(d.TaskID(), t, parentKeys(ans.Task.DependencyOutputs), got)
		done := taskCompleteRequest{TaskID: d.TaskID(), Attempt: ans.Attempt, LeaseToken: ans.LeaseToken, Status: "Completed"}
		if !b.report(ctx, b.cfg.InternalURL+pathTaskComplete, done) {
			return
		}
		rec.completed(t, time.Now())
	}
	// Claimed and completed, or NotClaimed (a duplicate or stale wake-up): settled either way.
	if err := d.Ack(ctx); err != nil {
		b.failed(ctx, fmt.Errorf("acknowledge a wake-up: %w", err))
	}
}

// report sends a completion until the server answers it: true once it acknowledged it, false
// when the bench stops or the server refused it for good (409, 410, 404: the attempt is no longer
// this worker's, which a no-op bench never causes but reports as an error).
func (b *bench) report(ctx context.Context, url string, body any) bool {
	for ctx.Err() == nil {
		err := b.post(ctx, url, body, nil)
		if err == nil {
			return true
		}
		b.failed(ctx, err)
		var e *statusError
		if errors.As(err, &e) && e.status < 500 && e.status != http.StatusTooManyRequests {
			return false
		}
	}
	return false
}

// failed counts a failed request, unless the bench is stopping, and pauses.
func (b *bench) failed(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	b.rec.cur().failed(err)
	b.cfg.Log.WarnContext(ctx, "bench worker request failed", "err", err)
	select {
	case <-ctx.Done():
	case <-time.After(retryPause):
	}
}

// statusError is a non-2xx answer.
type statusError struct {
	url    string
	status int
	body   string
}

func (e *statusError) Error() string { return fmt.Sprintf("POST %s: %d: %s", e.url, e.status, e.body) }

// post sends body as JSON and decodes a 2xx answer into out, unless out is nil.
func (b *bench) post(ctx context.Context, url string, body, out any) error {
	return b.postHeader(ctx, url, "", body, out)
}

func (b *bench) postHeader(ctx context.Context, url, authorization string, body, out any) error {
	raw, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(raw))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	res, err := b.hc.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	ans, err := io.ReadAll(io.LimitReader(res.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("POST %s: read the answer: %w", url, err)
	}
	if res.StatusCode/100 != 2 {
		return &statusError{url: url, status: res.StatusCode, body: string(bytes.TrimSpace(ans[:min(len(ans), 300)]))}
	}
	if out != nil {
		if err := json.Unmarshal(ans, out); err != nil {
			return fmt.Errorf("POST %s: decode the answer: %w", url, err)
		}
	}
	return nil
}
