package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"time"

	"github.com/baton-dev/baton/worker"
)

// workSDK runs one worker of the public SDK with a no-op handler. The SDK has no hooks, so the
// bench watches it from its HTTP client: a claim that returned a task is timed as a claim, a
// completion answered 2xx is the acknowledgement; the handler's call is when the worker got the
// task.
func (b *bench) workSDK(ctx context.Context) error {
	hc := &http.Client{Transport: &sdkHook{base: b.hc.Transport, b: b}}
	opts := []worker.Option{
		worker.WithConcurrency(b.cfg.Workers),
		worker.WithBatchSize(b.cfg.Batch),
		worker.WithHTTPClient(hc),
		worker.WithWorkerID(b.cfg.TaskName + "-sdk"),
		worker.WithLogger(b.cfg.Log),
		worker.WithShutdownTimeout(5 * time.Second),
	}
	if b.cfg.wakeups() {
		opts = append(opts, worker.WithWakeups(b.cfg.Transport, b.cfg.TransportURL), worker.WithWakeupNamespace(b.cfg.TransportNamespace))
	}
	w, err := worker.New(b.cfg.InternalURL, opts...)
	if err != nil {
		return err
	}
	output := json.RawMessage(`{}`)
	w.Handle(b.cfg.TaskName, func(ctx context.Context, t *worker.Task) (any, error) {
		b.observer().started(t.ID, ref{t.JobID, t.Key}, parentKeys(t.DependencyOutputs), time.Now())
		return output, nil
	})
	return w.Run(ctx)
}

// sdkObserver hears what the SDK's workers do: the recorder of the phase that runs, or a steady
// run's log.
type sdkObserver interface {
	claimed(d time.Duration)
	started(id string, t ref, parents []string, at time.Time)
	completedID(id string, at time.Time)
}

// observer is the steady run's log if there is one, else the phase's recorder.
func (b *bench) observer() sdkObserver {
	if b.steady != nil {
		return b.steady
	}
	return b.rec.cur()
}

// The requests the hook looks at: the SDK's claims and completions, per task (stream-worker,
// and internal after a wake-up) and in batches.
const (
	pathStreamClaim    = "/internal/worker/claim"
	pathClaimBatch     = "/internal/worker/claim-batch"
	pathTaskClaim      = "/internal/task-claim"
	pathStreamComplete = "/internal/worker/complete"
	pathReportBatch    = "/internal/worker/report-batch"
	pathTaskComplete   = "/internal/task-complete"
)

// sdkHook watches the SDK's requests: it times the claims that returned tasks (one sample per
// task) and sees completions acknowledged. It reads the answers it looks at, which are small
// and complete once their headers arrive (the server writes them after its commit), and hands
// the SDK a copy.
type sdkHook struct {
	base http.RoundTripper
	b    *bench
}

func (h *sdkHook) RoundTrip(req *http.Request) (*http.Response, error) {
	switch req.URL.Path {
	case pathStreamClaim, pathClaimBatch, pathTaskClaim:
		start := time.Now()
		res, body, err := h.roundTrip(req)
		if err != nil || body == nil {
			return res, err
		}
		took := time.Since(start)
		var ans struct {
			Claimed bool              `json:"claimed"` // stream-worker
			Status  string            `json:"status"`  // internal
			Claims  []json.RawMessage `json:"claims"`  // claim-batch
		}
		if json.Unmarshal(body, &ans) == nil {
			n := len(ans.Claims)
			if ans.Claimed || ans.Status == "Claimed" {
				n = 1
			}
			rec := h.b.observer()
			for range n {
				rec.claimed(took)
			}
		}
		return res, nil
	case pathStreamComplete, pathReportBatch:
		// What was reported: {job_id} alone, or {reports: [{type, job_id}]}.
		var sent struct {
			JobID   string `json:"job_id"` // the stream-worker dialect's name of the task id
			Reports []struct {
				Type  string `json:"type"`
				JobID string `json:"job_id"`
			} `json:"reports"`
		}
		if req.GetBody != nil {
			if rc, err := req.GetBody(); err == nil {
				_ = json.NewDecoder(rc).Decode(&sent)
				rc.Close()
			}
		}
		res, body, err := h.roundTrip(req)
		if err != nil || body == nil {
			return res, err
		}
		now := time.Now()
		rec := h.b.observer()
		if req.URL.Path == pathStreamComplete {
			if sent.JobID != "" {
				rec.completedID(sent.JobID, now)
			}
			return res, nil
		}
		var ans struct {
			Results []struct {
				Status int `json:"status"`
			} `json:"results"`
		}
		if json.Unmarshal(body, &ans) == nil && len(ans.Results) == len(sent.Reports) {
			for i, r := range sent.Reports {
				if r.Type == "complete" && ans.Results[i].Status == http.StatusOK {
					rec.completedID(r.JobID, now)
				}
			}
		}
		return res, nil
	}
	return h.base.RoundTrip(req)
}

// roundTrip sends req and, for a 200, reads the answer and puts a copy back in the response. body
// is nil for any other answer.
func (h *sdkHook) roundTrip(req *http.Request) (*http.Response, []byte, error) {
	res, err := h.base.RoundTrip(req)
	if err != nil || res.StatusCode != http.StatusOK {
		return res, nil, err
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	res.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return res, nil, nil // the SDK sees the short answer and deals with it
	}
	return res, body, nil
}
