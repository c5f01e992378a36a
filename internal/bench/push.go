package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// PushTarget is the HTTP target the server pushes the bench's tasks to (--via callback). It
// takes every delivery at once (202) and queues it; while the bench's workers run, Workers
// goroutines report each queued task completed through the callback dialect. It must exist
// before the server starts, which is told its URL.
type PushTarget struct {
	l     net.Listener
	srv   *http.Server
	queue chan envelope
	bench atomic.Pointer[bench]
}

// envelope is what the bench reads of the push envelope (TaskEnvelope).
type envelope struct {
	TaskID            string                     `json:"taskId"`
	RunID             string                     `json:"runId"` // the job
	TaskKey           string                     `json:"taskKey"`
	Attempt           int                        `json:"attempt"`
	DependencyOutputs map[string]json.RawMessage `json:"dependencyOutputs"`
	CallbackBaseURL   string                     `json:"callbackBaseUrl"`
	TaskToken         string                     `json:"taskToken"`
}

// NewPushTarget listens on a free loopback port and serves deliveries; queue bounds how many
// deliveries may wait for a worker (more are refused with 503, which fails their attempt).
func NewPushTarget(queue int) (*PushTarget, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("push target: %w", err)
	}
	p := &PushTarget{l: l, queue: make(chan envelope, queue)}
	p.srv = &http.Server{Handler: http.HandlerFunc(p.deliver), ReadHeaderTimeout: 10 * time.Second}
	go p.srv.Serve(l)
	return p, nil
}

// URL is where the server is to POST deliveries.
func (p *PushTarget) URL() string { return "http://" + p.l.Addr().String() + "/run" }

// Close stops serving.
func (p *PushTarget) Close() error { return p.srv.Close() }

func (p *PushTarget) attach(b *bench) { p.bench.Store(b) }

func (p *PushTarget) deliver(w http.ResponseWriter, r *http.Request) {
	got := time.Now()
	var env envelope
	if r.Method != http.MethodPost {
		http.Error(w, "POST a task envelope", http.StatusMethodNotAllowed)
		return
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 4<<20)).Decode(&env); err != nil || env.TaskID == "" || env.TaskToken == "" {
		http.Error(w, "not a task envelope", http.StatusBadRequest)
		return
	}
	b := p.bench.Load()
	if b == nil {
		http.Error(w, "no bench is running", http.StatusServiceUnavailable)
		return
	}
	b.rec.cur().started(env.TaskID, ref{env.RunID, env.TaskKey}, parentKeys(env.DependencyOutputs), got)
	select {
	case p.queue <- env:
		w.WriteHeader(http.StatusAccepted)
	default:
		http.Error(w, "the bench's queue is full", http.StatusServiceUnavailable)
	}
}

type callbackCompleted struct {
	Attempt  int             `json:"attempt"`
	WorkerID string          `json:"workerId"`
	Outcome  string          `json:"outcome"`
	Output   json.RawMessage `json:"output"`
}

// work runs Workers goroutines that report queued deliveries completed, until ctx ends.
func (p *PushTarget) work(ctx context.Context, b *bench) error {
	var wg sync.WaitGroup
	for i := range b.cfg.Workers {
		workerID := fmt.Sprintf("%s-callback-%d", b.cfg.TaskName, i)
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case env := <-p.queue:
					p.complete(ctx, b, workerID, env)
				}
			}
		})
	}
	wg.Wait()
	return nil
}

func (p *PushTarget) complete(ctx context.Context, b *bench, workerID string, env envelope) {
	u := fmt.Sprintf("%s/v1/tasks/%s/completed", env.CallbackBaseURL, url.PathEscape(env.TaskID))
	body := callbackCompleted{Attempt: env.Attempt, WorkerID: workerID, Outcome: "SUCCEEDED", Output: json.RawMessage(`{}`)}
	for ctx.Err() == nil {
		err := b.postHeader(ctx, u, "Bearer "+env.TaskToken, body, nil)
		if err == nil {
			b.rec.cur().completed(ref{env.RunID, env.TaskKey}, time.Now())
			return
		}
		b.failed(ctx, err)
		var se *statusError
		if errors.As(err, &se) && se.status < 500 && se.status != http.StatusTooManyRequests {
			return
		}
	}
}
