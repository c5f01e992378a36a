package api

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/request"
)

// Batch endpoints of the stream-worker dialect, beyond its per-task calls: one request claims
// several tasks, or carries several reports. They exist for throughput (one HTTP round trip and,
// with group commit, one database commit for many tasks); each item means exactly what the
// per-task endpoint means, and the per-task endpoints are unchanged.

// batchMax bounds the tasks of one claim-batch and the reports of one report-batch.
const batchMax = 256

// POST /internal/worker/claim-batch {worker_id, streams, max_wait_ms, max_tasks}
// → {"claims": [<the /internal/worker/claim answer of each claimed task>]}
func (s *Server) streamClaimBatch(w http.ResponseWriter, r *http.Request) (any, error) {
	obj, err := request.ReadObject(r)
	if err != nil {
		return nil, err
	}
	f := request.Fields{Obj: obj, Where: "body"}
	maxTasks := f.Int("max_tasks")
	if f.Err != nil {
		return nil, f.Err
	}
	if maxTasks == nil || *maxTasks < 1 || *maxTasks > batchMax {
		return nil, request.Errorf(http.StatusBadRequest, "body.max_tasks is required: an integer from 1 to %d", batchMax)
	}
	claims, err := s.streamClaimWait(w, r, obj, *maxTasks)
	if err != nil {
		return nil, err
	}
	out, err := s.streamClaimAnswers(r.Context(), claims)
	if err != nil {
		return nil, err
	}
	return map[string]any{"claims": out}, nil
}

// okResult is report-batch's result for a report applied: what /internal/worker/complete answers
// a success with, and its status.
var okResult = json.RawMessage(`{"ack":true,"ok":true,"status":200}`)

// POST /internal/worker/report-batch {worker_id, reports: [{type: "complete"|"fail", ...the body
// of /internal/worker/complete or /fail without worker_id}]}
// → {"results": [{"status": <the status the per-task endpoint would answer>, ...its body,
// "retry_after": <its Retry-After header in seconds, when it has one>}]}
//
// The reports are applied concurrently, so group commit puts them in as few transactions as it
// can; each is fenced and idempotent exactly as alone. The request answers 200 once every report
// is decided, each result saying what became of its report, in order.
func (s *Server) streamReportBatch(w http.ResponseWriter, r *http.Request) (any, error) {
	obj, err := request.ReadObject(r)
	if err != nil {
		return nil, err
	}
	f := request.Fields{Obj: obj, Where: "body"}
	if workerID := f.Required("worker_id"); f.Err == nil && len(workerID) > streamMaxWorkerID {
		return nil, request.Errorf(http.StatusBadRequest, "body.worker_id must be at most %d bytes", streamMaxWorkerID)
	}
	if f.Err != nil {
		return nil, f.Err
	}
	var raws []json.RawMessage
	if raw, ok := obj["reports"]; !ok || request.IsNull(raw) || json.Unmarshal(raw, &raws) != nil || len(raws) == 0 {
		return nil, request.Errorf(http.StatusBadRequest, "body.reports is required: a non-empty array of reports")
	}
	if len(raws) > batchMax {
		return nil, request.Errorf(http.StatusBadRequest, "body.reports has %d reports; at most %d are allowed", len(raws), batchMax)
	}
	type item struct {
		fail bool
		obj  map[string]json.RawMessage
	}
	items := make([]item, len(raws))
	for i, raw := range raws {
		o, err := request.DecodeObject(raw)
		if err != nil {
			return nil, request.Errorf(http.StatusBadRequest, "body.reports[%d] must be a JSON object", i)
		}
		var typ string
		if t, ok := o["type"]; !ok || json.Unmarshal(t, &typ) != nil || (typ != "complete" && typ != "fail") {
			return nil, request.Errorf(http.StatusBadRequest, `body.reports[%d].type is required: "complete" or "fail"`, i)
		}
		delete(o, "type")
		items[i] = item{fail: typ == "fail", obj: o}
	}
	// Each result is a map, or okResult for a plain success (the common case, written as is
	// rather than built and encoded for every report).
	results := make([]any, len(items))
	acks := make([]bool, len(items))
	refused := func(i int, err error) {
		he := s.toHTTP(s.streamRefusal(err))
		if he.Status >= 500 {
			s.log.ErrorContext(r.Context(), "batch report failed", "index", i, "err", err)
		}
		out := map[string]any{"status": he.Status}
		for k, v := range he.Body {
			out[k] = v
		}
		// The per-task endpoint's Retry-After header (a 503 while the database is unreachable),
		// in seconds: a batch's items have no headers of their own.
		if secs, err := strconv.Atoi(he.Header.Get("Retry-After")); err == nil {
			out["retry_after"] = secs
		}
		results[i], acks[i] = out, out["ack"] == true
	}
	answered := func(i int, res any) {
		out := map[string]any{"status": http.StatusOK}
		for k, v := range res.(map[string]any) {
			out[k] = v
		}
		results[i], acks[i] = out, out["ack"] == true
	}
	// Successes go to the core together (set-based, one transaction); failures one by one,
	// concurrently, so that group commit still batches them.
	var (
		wg        sync.WaitGroup
		completes []dispatch.CompleteParams
		where     []int
	)
	for i, it := range items {
		if it.fail {
			wg.Go(func() {
				if res, err := s.streamFailObj(r.Context(), it.obj); err != nil {
					refused(i, err)
				} else {
					answered(i, res)
				}
			})
			continue
		}
		p, err := streamCompleteParams(it.obj)
		if err != nil {
			refused(i, err)
			continue
		}
		completes = append(completes, p)
		where = append(where, i)
	}
	if len(completes) > 0 {
		_, errs := s.d.CompleteMany(r.Context(), completes)
		for k, err := range errs {
			if err != nil {
				refused(where[k], err)
			} else {
				results[where[k]], acks[where[k]] = okResult, true
			}
		}
	}
	wg.Wait()
	var acked []map[string]json.RawMessage
	for i, ack := range acks {
		if ack {
			acked = append(acked, items[i].obj)
		}
	}
	s.streamSettle(r.Context(), acked...)
	return map[string]any{"results": results}, nil
}
