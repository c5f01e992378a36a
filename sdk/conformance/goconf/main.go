// Command goconf is the Go SDK's conformance program (sdk/conformance/README.md), written with the
// public Go SDK alone: the worker package for the worker, the client package for the producer.
//
//	goconf worker                  runs a worker until SIGTERM
//	goconf producer JOB_JSON_FILE  submits the job, follows it over SSE, prints its final view
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/baton-dev/baton/client"
	"github.com/baton-dev/baton/worker"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	switch os.Args[1] {
	case "worker":
		if len(os.Args) != 2 {
			usage()
		}
		if err := runWorker(); err != nil {
			fmt.Fprintln(os.Stderr, "goconf worker:", err)
			os.Exit(1)
		}
	case "producer":
		if len(os.Args) != 3 {
			usage()
		}
		os.Exit(runProducer(os.Args[2], os.Stdout))
	default:
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: goconf worker | goconf producer JOB_JSON_FILE")
	os.Exit(2)
}

// env is a required environment variable.
func env(name string) (string, error) {
	v := os.Getenv(name)
	if v == "" {
		return "", fmt.Errorf("the environment variable %s is not set", name)
	}
	return v, nil
}

// runWorker runs the scenario's worker until SIGTERM (or SIGINT), then shuts it down gracefully.
func runWorker() error {
	internalURL, err := env("BATON_INTERNAL_URL")
	if err != nil {
		return err
	}
	queue, err := env("BATON_CONFORMANCE_QUEUE")
	if err != nil {
		return err
	}
	dir, err := env("BATON_CONFORMANCE_DIR")
	if err != nil {
		return err
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return fmt.Errorf("BATON_CONFORMANCE_DIR %q is not a directory", dir)
	}
	opts := []worker.Option{
		worker.WithQueues(queue),
		worker.WithConcurrency(4),
		worker.WithHeartbeatInterval(500 * time.Millisecond),
		worker.WithShutdownTimeout(10 * time.Second),
		worker.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, nil))),
	}
	if id := os.Getenv("BATON_WORKER_ID"); id != "" {
		opts = append(opts, worker.WithWorkerID(id))
	}
	// BATON_BLOB_URL, the object storage of buffered batches, is the SDK's default.
	w, err := worker.New(internalURL, opts...)
	if err != nil {
		return err
	}
	h := handlers{dir: dir}
	w.Handle("conf.add", h.add)
	w.Handle("conf.flaky", h.flaky)
	w.Handle("conf.fatal", h.fatal)
	w.Handle("conf.block", h.block)
	w.Handle("conf.cancel", h.cancel)
	w.Handle("conf.kill", h.kill)
	w.Handle("conf.refused", h.refused)
	w.Handle("conf.term", h.term)
	w.Handle("conf.publish", h.publish)
	w.Handle("conf.read", h.read)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return w.Run(ctx)
}

// handlers are the scenario's handlers; each marks its start in dir.
type handlers struct{ dir string }

// mark creates the empty marker file KIND-KEY-N of the task's attempt.
func (h handlers) mark(kind string, t *worker.Task) {
	name := filepath.Join(h.dir, kind+"-"+t.Key+"-"+strconv.Itoa(t.Attempt))
	if err := os.WriteFile(name, nil, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "goconf worker: marker:", err)
	}
}

// started marks the attempt's start.
func (h handlers) started(t *worker.Task) { h.mark("started", t) }

// aborted marks the attempt's cooperative abort and returns why it was aborted.
func (h handlers) aborted(ctx context.Context, t *worker.Task) error {
	h.mark("aborted", t)
	return context.Cause(ctx)
}

// add outputs {"sum": n + Σ parent.sum}.
func (h handlers) add(ctx context.Context, t *worker.Task) (any, error) {
	h.started(t)
	var in struct {
		N *int64 `json:"n"`
	}
	if err := json.Unmarshal(t.Input, &in); err != nil || in.N == nil {
		return nil, worker.Permanent(fmt.Errorf("conf.add: input %s: want {\"n\": integer}", t.Input))
	}
	sum := *in.N
	for key, raw := range t.DependencyOutputs {
		var out struct {
			Sum *int64 `json:"sum"`
		}
		if err := json.Unmarshal(raw, &out); err != nil || out.Sum == nil {
			return nil, worker.Permanent(fmt.Errorf("conf.add: parent %s output %s: want {\"sum\": integer}", key, raw))
		}
		sum += *out.Sum
	}
	return map[string]int64{"sum": sum}, nil
}

// flaky fails its first attempt with a retryable error of code TRANSIENT. TRANSIENT is none of
// the server's categories: the stream-worker dialect, which the worker speaks, files it as the
// error's code under the category USER_CODE.
func (h handlers) flaky(ctx context.Context, t *worker.Task) (any, error) {
	h.started(t)
	if t.Attempt == 1 {
		yes := true
		return nil, &worker.Error{Category: "TRANSIENT", Message: "flaky attempt 1", Retryable: &yes}
	}
	return map[string]int{"attempt": t.Attempt}, nil
}

// fatal fails every attempt with a non-retryable DATA_QUALITY error.
func (h handlers) fatal(ctx context.Context, t *worker.Task) (any, error) {
	h.started(t)
	no := false
	return nil, &worker.Error{Category: worker.DataQuality, Message: "bad row", Retryable: &no}
}

// block sleeps for its input's seconds without looking at its context.
func (h handlers) block(ctx context.Context, t *worker.Task) (any, error) {
	h.started(t)
	var in struct {
		Seconds *json.Number `json:"seconds"`
	}
	if err := json.Unmarshal(t.Input, &in); err != nil || in.Seconds == nil {
		return nil, worker.Permanent(fmt.Errorf("conf.block: input %s: want {\"seconds\": number}", t.Input))
	}
	s, err := in.Seconds.Float64()
	if err != nil || s < 0 {
		return nil, worker.Permanent(fmt.Errorf("conf.block: seconds %s: want a number of at least 0", *in.Seconds))
	}
	time.Sleep(time.Duration(s * float64(time.Second)))
	return map[string]json.Number{"blocked": *in.Seconds}, nil
}

// cancel waits up to 30 s for its cancellation.
func (h handlers) cancel(ctx context.Context, t *worker.Task) (any, error) {
	h.started(t)
	select {
	case <-ctx.Done():
		return nil, h.aborted(ctx, t)
	case <-time.After(30 * time.Second):
		return map[string]bool{"cancelled": false}, nil
	}
}

// kill sleeps 60 s on its first attempt, while the harness kills the worker.
func (h handlers) kill(ctx context.Context, t *worker.Task) (any, error) {
	h.started(t)
	if t.Attempt == 1 {
		time.Sleep(60 * time.Second)
	}
	return map[string]int{"attempt": t.Attempt}, nil
}

// refused waits, on its first attempt, up to 30 s for the loss of its lease.
func (h handlers) refused(ctx context.Context, t *worker.Task) (any, error) {
	h.started(t)
	if t.Attempt == 1 {
		select {
		case <-ctx.Done():
			return nil, h.aborted(ctx, t)
		case <-time.After(30 * time.Second):
			return map[string]bool{"aborted": false}, nil
		}
	}
	return map[string]int{"attempt": t.Attempt}, nil
}

// term takes 1.5 s, during which the harness sends the worker SIGTERM.
func (h handlers) term(ctx context.Context, t *worker.Task) (any, error) {
	h.started(t)
	time.Sleep(1500 * time.Millisecond)
	return map[string]bool{"done": true}, nil
}

// publish adds three rows to its pipeline job's buffered output.
func (h handlers) publish(ctx context.Context, t *worker.Task) (any, error) {
	h.started(t)
	if t.Pipeline == nil {
		return nil, worker.Permanent(errors.New("conf.publish: not a task of a pipeline job"))
	}
	dataset := ""
	for _, o := range t.Pipeline.Outputs {
		if o.WriteMode == "buffered" {
			dataset = cmp.Or(o.DatasetName, o.DatasetUUID)
			break
		}
	}
	if dataset == "" {
		return nil, worker.Permanent(errors.New("conf.publish: the task's job has no buffered output"))
	}
	rows := []map[string]any{{"k": 1, "v": "a"}, {"k": 2, "v": "b"}, {"k": 3, "v": "c"}}
	b, err := t.PublishBatch(ctx, dataset, rows)
	if err != nil {
		return nil, err
	}
	return map[string]int{"published": b.Rows}, nil
}

// read reads every row of its dataset input, then counts and sums them with a query.
func (h handlers) read(ctx context.Context, t *worker.Task) (any, error) {
	h.started(t)
	if t.Pipeline == nil || len(t.Pipeline.Inputs) == 0 {
		return nil, worker.Permanent(errors.New("conf.read: not a task of a pipeline job with an input"))
	}
	in := t.Pipeline.Inputs[0]
	rows := 0
	for _, err := range t.Rows(ctx, in, worker.RowsOptions{}) {
		if err != nil {
			return nil, fmt.Errorf("conf.read: rows of %s: %w", in.DatasetName, err)
		}
		rows++
	}
	// The dataset by its name, as a quoted identifier. sum() of a BIGINT is a HUGEINT, which the
	// answer writes as a string of digits (integer reads both).
	sql := `SELECT count(*) AS n, sum(k) AS s FROM "` + cmp.Or(in.DatasetName, in.DatasetUUID) + `"`
	res, err := t.Query(ctx, sql, worker.QueryOptions{})
	if err != nil {
		return nil, fmt.Errorf("conf.read: query: %w", err)
	}
	if len(res.Rows) != 1 || len(res.Rows[0]) != 2 {
		return nil, fmt.Errorf("conf.read: the query answered %d rows: %v", len(res.Rows), res.Rows)
	}
	n, err := integer(res.Rows[0][0])
	if err != nil {
		return nil, fmt.Errorf("conf.read: n: %w", err)
	}
	s, err := integer(res.Rows[0][1])
	if err != nil {
		return nil, fmt.Errorf("conf.read: s: %w", err)
	}
	return map[string]int64{"rows": int64(rows), "n": n, "s": s}, nil
}

// integer is a query's integer value: a JSON number, or a string of digits (a HUGEINT).
func integer(v any) (int64, error) {
	switch x := v.(type) {
	case json.Number:
		return x.Int64()
	case string:
		return strconv.ParseInt(x, 10, 64)
	}
	return 0, fmt.Errorf("%v (%T) is not an integer", v, v)
}

// runProducer submits the job in file, follows its events over SSE until it ends, and prints the
// final job view as one JSON line; it returns 0 when the job completed, 1 otherwise.
func runProducer(file string, stdout io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "goconf producer:", err)
		return 1
	}
	base, err := env("BATON_URL")
	if err != nil {
		return fail(err)
	}
	key, err := env("BATON_API_KEY")
	if err != nil {
		return fail(err)
	}
	body, err := os.ReadFile(file)
	if err != nil {
		return fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	c := client.New(base, key)
	sub, err := c.SubmitJobJSON(ctx, body)
	if err != nil {
		return fail(fmt.Errorf("submit: %w", err))
	}
	fmt.Fprintf(os.Stderr, "goconf producer: job %s submitted\n", sub.JobID)
	// Follow the audit log until the job ends; a broken stream is picked up where it stopped.
	var last int64
	for tries := 0; ; tries++ {
		err := c.StreamEvents(ctx, sub.JobID, last, func(e client.Event) error {
			last = e.ID
			fmt.Fprintf(os.Stderr, "goconf producer: event %d %s %s\n", e.ID, e.Type, e.TaskID)
			return nil
		})
		if err == nil {
			break
		}
		if ctx.Err() != nil || tries == 10 {
			return fail(fmt.Errorf("follow job %s: %w", sub.JobID, err))
		}
		fmt.Fprintf(os.Stderr, "goconf producer: event stream broke (%v); following again from event %d\n", err, last)
		time.Sleep(200 * time.Millisecond)
	}
	job, err := c.GetJob(ctx, sub.JobID)
	if err != nil {
		return fail(fmt.Errorf("get job %s: %w", sub.JobID, err))
	}
	line, err := json.Marshal(job)
	if err != nil {
		return fail(err)
	}
	fmt.Fprintf(stdout, "%s\n", line)
	if job.Status != client.JobCompleted {
		return 1
	}
	return 0
}
