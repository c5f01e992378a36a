package api_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/api"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// TestLongPollsPerWorkerAreCapped: a worker id may have DefaultMaxPollsPerWorker claims waiting;
// one more is answered 429 with Retry-After in the dialect's shape, at once, while other workers,
// claims that do not wait, and the same worker once one of its polls returned, are served.
func TestLongPollsPerWorkerAreCapped(t *testing.T) {
	w := newWorkerAPI(t, storetest.OpenSQLite(t))
	claim := func(ctx context.Context, op, workerID string, waitMs int) (response, error) {
		body := map[string]any{"worker_id": workerID, "streams": []string{"capped-q"}, "max_wait_ms": waitMs}
		if op == "claim-batch" {
			body["max_tasks"] = 4
		}
		return streamSend(ctx, w.internal.URL+"/internal/worker/"+op, body)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var polls sync.WaitGroup
	answers := make(chan response, api.DefaultMaxPollsPerWorker)
	defer func() { cancel(); polls.Wait() }()
	for i := range api.DefaultMaxPollsPerWorker {
		op := "claim"
		if i%2 == 1 {
			op = "claim-batch"
		}
		polls.Go(func() {
			for {
				res, err := claim(ctx, op, "greedy", 30000)
				if err != nil {
					return
				}
				// Refused while a probe below held a place for its millisecond: again.
				if res.Status != http.StatusTooManyRequests {
					answers <- res
					return
				}
			}
		})
	}
	// Once all of them wait, one more is refused. Until then a probe that waits 1 ms is admitted
	// and returns at once.
	var refused response
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := claim(context.Background(), "claim", "greedy", 1)
		if err != nil {
			t.Fatal(err)
		}
		if res.Status == http.StatusTooManyRequests {
			refused = res
			break
		}
		if res.Status != http.StatusOK || res.Body["claimed"] != false {
			t.Fatalf("probe: %d %s", res.Status, res.Raw)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d waiting polls of one worker and still no 429", api.DefaultMaxPollsPerWorker)
		}
	}
	streamRefused(t, refused, http.StatusTooManyRequests, false, "rate_limited")
	if got := refused.Header.Get("Retry-After"); got != "1" {
		t.Fatalf("Retry-After %q, want 1", got)
	}
	start := time.Now()
	if res, _ := claim(context.Background(), "claim-batch", "greedy", 20000); res.Status != http.StatusTooManyRequests {
		t.Fatalf("claim-batch over the cap: %d %s", res.Status, res.Raw)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("the refusal took %s; want it at once", took)
	}
	// Not a long poll: served.
	if res, _ := claim(context.Background(), "claim", "greedy", 0); res.Status != http.StatusOK {
		t.Fatalf("claim without a wait: %d %s", res.Status, res.Raw)
	}
	// Another worker: served.
	if res, _ := claim(context.Background(), "claim", "modest", 1); res.Status != http.StatusOK {
		t.Fatalf("another worker's long poll: %d %s", res.Status, res.Raw)
	}

	// A task for the queue: one waiting poll claims it and returns, and the worker may poll again.
	w.submit(lifecycle.TaskSpec{Key: "t", Name: "capped-q"})
	select {
	case res := <-answers:
		if res.Status != http.StatusOK {
			t.Fatalf("waiting poll: %d %s", res.Status, res.Raw)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no waiting poll claimed the task")
	}
	if res, _ := claim(context.Background(), "claim", "greedy", 1); res.Status != http.StatusOK {
		t.Fatalf("a poll once one returned: %d %s", res.Status, res.Raw)
	}
}
