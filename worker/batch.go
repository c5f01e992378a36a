package worker

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"sync"
	"time"
)

// Batching beyond the per-task stream-worker calls: a claim asks for as many tasks as the worker
// has free slots (/internal/worker/claim-batch), and reports that are ready at the same time
// travel in one request (/internal/worker/report-batch). Each item means exactly what the per-task
// request means, and its answer is handled as that request's answer would be.
const (
	pathClaimBatch  = "/internal/worker/claim-batch"
	pathReportBatch = "/internal/worker/report-batch"
	// maxBatch is the most tasks one claim asks for and the most reports one request carries
	// (the server's limit).
	maxBatch = 256
	// reportRequests bounds the report-batch requests in flight at once.
	reportRequests = 2
)

// claimBatchAnswer is /internal/worker/claim-batch's answer.
type claimBatchAnswer struct {
	Claims []claimAnswer `json:"claims"`
}

// reportItem is a report waiting for a batch.
type reportItem struct {
	path string // pathComplete or pathFail: what the per-task request would have been
	body map[string]any
	done chan reportResult // buffered: the batch never waits for the reporter
}

type reportResult struct {
	ans map[string]any
	err error
}

// reporter sends the reports queued while a previous batch was in flight as one request.
type reporter struct {
	w        *Worker
	mu       sync.Mutex
	queue    []*reportItem
	inflight int
}

// report delivers one report through a batch and returns what the per-task request would have:
// its answer, an *apiError for a refusal, or another error when the batch got no answer.
func (r *reporter) report(ctx context.Context, path string, body map[string]any) (map[string]any, error) {
	it := &reportItem{path: path, body: body, done: make(chan reportResult, 1)}
	r.mu.Lock()
	r.queue = append(r.queue, it)
	if r.inflight < reportRequests {
		r.inflight++
		go r.loop()
	}
	r.mu.Unlock()
	select {
	case res := <-it.done:
		return res.ans, res.err
	case <-ctx.Done():
		// The report may still be applied; the caller retries it or gives up, and a repeated
		// report is answered again without a second effect.
		return nil, ctx.Err()
	}
}

func (r *reporter) loop() {
	for {
		r.mu.Lock()
		if len(r.queue) == 0 {
			r.inflight--
			r.mu.Unlock()
			return
		}
		n := min(len(r.queue), maxBatch)
		batch := make([]*reportItem, n)
		copy(batch, r.queue)
		r.queue = append(r.queue[:0], r.queue[n:]...)
		r.mu.Unlock()
		r.send(batch)
	}
}

func (r *reporter) send(batch []*reportItem) {
	reports := make([]map[string]any, len(batch))
	for i, it := range batch {
		item := maps.Clone(it.body)
		delete(item, "worker_id")
		item["type"] = "complete"
		if it.path == pathFail {
			item["type"] = "fail"
		}
		reports[i] = item
	}
	var ans struct {
		Results []map[string]any `json:"results"`
	}
	err := r.w.post(r.w.reportCtx, requestTimeout, pathReportBatch, map[string]any{"worker_id": r.w.cfg.workerID, "reports": reports}, &ans)
	if err == nil && len(ans.Results) != len(batch) {
		err = fmt.Errorf("baton worker: %s: %d results for %d reports", pathReportBatch, len(ans.Results), len(batch))
	}
	for i, it := range batch {
		if err != nil {
			it.done <- reportResult{err: err}
			continue
		}
		res := ans.Results[i]
		status, _ := res["status"].(float64)
		delete(res, "status")
		if int(status) == http.StatusOK {
			it.done <- reportResult{ans: res}
			continue
		}
		e := &apiError{Path: it.path, Status: int(status)}
		if e.Status == 0 {
			e.Status = http.StatusBadGateway // a result without a status: treat it as not decided
		}
		e.Code, _ = res["error"].(string)
		e.Message, _ = res["message"].(string)
		if secs, ok := res["retry_after"].(float64); ok && secs > 0 {
			e.RetryAfter = time.Duration(secs * float64(time.Second))
		}
		it.done <- reportResult{err: e}
	}
}
