package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/baton-dev/baton/client"
)

// load submits the run's jobs while the faults go on, as a careful producer would: every job
// with an idempotency key, re-sent (to another replica, if there is one) until the API accepts
// it.
type load struct {
	r   *run
	rng *rand.Rand

	mu       sync.Mutex
	accepted []*job // in the order the API accepted them
}

// job is a job the API accepted.
type job struct {
	id    string
	tasks map[string][]string // task key → its parents' keys
}

func newLoad(r *run, rng *rand.Rand) *load { return &load{r: r, rng: rng} }

// clientOf is a client of server s; it fails requests that take over 10 s.
func (r *run) clientOf(s *server) *client.Client {
	return client.New(s.producerURL, r.apiKey, client.WithHTTPClient(&http.Client{Timeout: 10 * time.Second}))
}

// jobs returns the jobs accepted so far.
func (l *load) jobs() []*job {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*job(nil), l.accepted...)
}

// dag makes one job's request: TasksPerJob tasks, each depending on up to two earlier ones.
func (l *load) dag() (client.SubmitJobRequest, map[string][]string) {
	cfg := l.r.cfg
	req := client.SubmitJobRequest{Name: "chaos"}
	deps := map[string][]string{}
	attempts := 50 // faults cost attempts; none should run out
	for i := range cfg.TasksPerJob {
		key := fmt.Sprintf("t%02d", i)
		var parents []string
		for range l.rng.IntN(3) {
			if i == 0 {
				break
			}
			p := fmt.Sprintf("t%02d", l.rng.IntN(i))
			if !slices.Contains(parents, p) {
				parents = append(parents, p)
			}
		}
		input, _ := json.Marshal(taskInput{SleepMs: l.rng.IntN(int(cfg.MaxSleep/time.Millisecond) + 1)})
		req.Tasks = append(req.Tasks, client.Task{TaskID: key, Name: taskName, DependsOn: parents, Input: input, MaxAttempts: &attempts})
		deps[key] = parents
	}
	return req, deps
}

// submit submits the run's jobs evenly over span, the last one at its end, and then more at the
// same pace while the pipeline round has yet to feed its last events (run.pipelineGoing).
func (l *load) submit(ctx context.Context, span time.Duration) error {
	n := l.r.cfg.Jobs
	start := time.Now()
	for i := 0; i < n || l.r.pipelineGoing(); i++ {
		at := start.Add(span * time.Duration(i) / time.Duration(max(n-1, 1)))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Until(at)):
		}
		req, deps := l.dag()
		body, err := json.Marshal(req)
		if err != nil {
			return err
		}
		id, err := l.submitOne(ctx, body, fmt.Sprintf("chaos-%d-%d", l.r.cfg.Seed, i))
		if err != nil {
			return err
		}
		l.mu.Lock()
		l.accepted = append(l.accepted, &job{id: id, tasks: deps})
		l.mu.Unlock()
	}
	return nil
}

// submitTimeout bounds how long one job may take to be accepted: longer than any fault lasts.
const submitTimeout = 2 * time.Minute

// submitOne sends one job until the API accepts it: a connection error, a timeout, a 429 or a
// 5xx is retried, with the same idempotency key, on the next server; any other answer is a
// failure of the run.
func (l *load) submitOne(ctx context.Context, body []byte, key string) (string, error) {
	deadline := time.Now().Add(submitTimeout)
	var last error
	for try := 0; time.Now().Before(deadline); try++ {
		s := l.r.servers[try%len(l.r.servers)]
		res, err := l.r.clientOf(s).SubmitJobJSON(ctx, body, client.WithIdempotencyKey(key))
		if err == nil {
			return res.JobID, nil
		}
		var apiErr *client.APIError
		if errors.As(err, &apiErr) && apiErr.Status < 500 && apiErr.Status != http.StatusTooManyRequests {
			return "", fmt.Errorf("chaos: POST /jobs refused a valid job: %w", err)
		}
		last = err
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return "", fmt.Errorf("chaos: POST /jobs not accepted within %s: %w", submitTimeout, last)
}
