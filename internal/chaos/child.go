package chaos

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/baton-dev/baton/internal/wrapper"
)

// The child is the program `baton worker` runs once per task in a chaos run. It records every
// execution that gets as far as producing an output, one JSON line in the execution log, so that
// the verdict can tell how often each task ran, which execution's output the server committed,
// and what each execution was handed as its parents' outputs. A task of the pipeline round's
// pipeline (pipeline.go) reports, as a real worker does, one event per output and partition at the
// dataset version its route names, and its execution records what it read, wrote and when the
// server accepted its events.

// Child environment variables, handed over with `baton worker --child-env`.
const (
	EnvChild = "BATON_CHAOS_CHILD" // "1": this process is a chaos child (see RunChild)
	EnvLog   = "BATON_CHAOS_LOG"   // the execution log, appended to by every child
)

// taskInput is the input of every task of a chaos job.
type taskInput struct {
	SleepMs int `json:"sleep_ms"` // how long the execution takes
}

// Output is a task's output: which execution produced it.
type Output struct {
	Task    string `json:"task"` // the task's key in its job
	Attempt int    `json:"attempt"`
	Nonce   string `json:"nonce"` // unique to the execution
	// For a pipeline task: the pipeline version and job of its route, and the partitions it
	// handled (the one that started it; a feed run's, those it emitted).
	Version    string   `json:"version,omitempty"`
	Job        string   `json:"job,omitempty"`
	Partitions []string `json:"partitions,omitempty"`
}

// execution is one line of the execution log.
type execution struct {
	Job     string            `json:"job"`
	Task    string            `json:"task"`
	Attempt int               `json:"attempt"`
	Nonce   string            `json:"nonce"`
	Parents map[string]string `json:"parents"` // parent task key → the nonce of the output it was handed
	// Pipeline is set for a task of a pipeline job.
	Pipeline *pipelineExecution `json:"pipeline,omitempty"`
}

// pipelineExecution is what an execution of a pipeline task did.
type pipelineExecution struct {
	TaskID     string   `json:"task_id"`
	Version    string   `json:"version"` // of its route
	Job        string   `json:"job"`
	Partitions []string `json:"partitions"`
	// Read and Wrote are the dataset versions of the route's input that started the task and of
	// its outputs, by dataset uuid.
	Read  map[string]string `json:"read,omitempty"`
	Wrote map[string]string `json:"wrote,omitempty"`
	// Started is when the execution began, Accepted when the server accepted its events (Unix
	// milliseconds; 0: it had none, or they were refused).
	Started  int64 `json:"started"`
	Accepted int64 `json:"accepted,omitempty"`
	// Refused is the status that refused its events for good; Retried the 5xx and 429 answers
	// it retried before.
	Refused int   `json:"refused,omitempty"`
	Retried []int `json:"retried,omitempty"`
}

// RunChild is the child's main: it reads the task payload from stdin, works for the input's
// sleep_ms, appends its execution to the log named by BATON_CHAOS_LOG, and prints its output.
func RunChild(stdin io.Reader, stdout io.Writer) error {
	var p wrapper.Payload
	if err := json.NewDecoder(stdin).Decode(&p); err != nil {
		return fmt.Errorf("read the task payload: %w", err)
	}
	if p.Job != nil {
		return runPipelineTask(p, stdout)
	}
	var in taskInput
	if err := json.Unmarshal(p.Input, &in); err != nil {
		return fmt.Errorf("read the task input %s: %w", p.Input, err)
	}
	exec := execution{Job: p.JobID, Task: p.TaskKey, Attempt: p.Attempt, Nonce: nonce(), Parents: map[string]string{}}
	for key, raw := range p.DependencyOutputs {
		var o Output
		if err := json.Unmarshal(raw, &o); err != nil {
			return fmt.Errorf("read the output of parent %s: %w", key, err)
		}
		exec.Parents[key] = o.Nonce
	}
	time.Sleep(time.Duration(in.SleepMs) * time.Millisecond) // the work
	if err := record(exec); err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(Output{Task: p.TaskKey, Attempt: p.Attempt, Nonce: exec.Nonce})
}

// record appends an execution to the execution log.
func record(exec execution) error {
	line, err := json.Marshal(exec)
	if err != nil {
		return err
	}
	// One write of one line to a file opened for appending: lines of concurrent children do not
	// interleave.
	f, err := os.OpenFile(os.Getenv(EnvLog), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("open the execution log: %w", err)
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("record the execution: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("record the execution: %w", err)
	}
	return nil
}

// runPipelineTask runs a task of the pipeline round's pipeline: it reports one event per output
// and partition, at the dataset version the route names for the output, through the task-scoped
// endpoint with the attempt's capability token, as any untrusted program under `baton worker`
// does; then it records the execution and prints its output. A feed run emits the partitions its
// trigger's input lists; any other task handles the partition of the event that started it.
func runPipelineTask(p wrapper.Payload, stdout io.Writer) error {
	ex := &pipelineExecution{TaskID: p.TaskID, Version: p.Job.Version, Job: p.Job.Name, Started: time.Now().UnixMilli(),
		Read: map[string]string{}, Wrote: map[string]string{}}
	if len(p.Inputs) == 0 {
		var trigger struct {
			Input struct {
				Partitions []string `json:"partitions"`
			} `json:"input"`
		}
		if err := json.Unmarshal(p.Trigger, &trigger); err != nil {
			return fmt.Errorf("read the trigger %s: %w", p.Trigger, err)
		}
		ex.Partitions = trigger.Input.Partitions
	}
	for _, in := range p.Inputs {
		if in.PartitionKey != "" {
			ex.Partitions = append(ex.Partitions, in.PartitionKey)
			ex.Read[in.DatasetUUID] = in.DatasetVersion
		}
	}
	var events []map[string]any
	for _, o := range p.Outputs {
		ex.Wrote[o.DatasetUUID] = o.DatasetVersion
		for _, part := range ex.Partitions {
			events = append(events, map[string]any{"dataset_uuid": o.DatasetUUID, "dataset_version": o.DatasetVersion, "partition_key": part})
		}
	}
	time.Sleep(time.Duration(mrand.IntN(50)) * time.Millisecond) // the work
	exec := execution{Job: p.JobID, Task: p.TaskKey, Attempt: p.Attempt, Nonce: nonce(), Parents: map[string]string{}, Pipeline: ex}
	var refused error
	if len(events) > 0 {
		refused = reportEvents(p, events, ex)
	}
	if err := record(exec); err != nil {
		return err
	}
	if refused != nil {
		return refused
	}
	return json.NewEncoder(stdout).Encode(Output{Task: p.TaskKey, Attempt: p.Attempt, Nonce: exec.Nonce,
		Version: ex.Version, Job: ex.Job, Partitions: ex.Partitions})
}

// reportEvents posts events to /v1/task/events until the server accepts them, for at most a
// minute: a connection error, a timeout, a 5xx, 408 or 429 is retried with backoff (the server
// answers a report repeated after a lost answer again, storing nothing twice); any other answer
// refuses them for good (409, 410, 404: the attempt is no longer this one's).
func reportEvents(p wrapper.Payload, events []map[string]any, ex *pipelineExecution) error {
	body, err := json.Marshal(map[string]any{"task_id": p.TaskID, "attempt": p.Attempt, "lease_token": p.LeaseToken, "events": events})
	if err != nil {
		return err
	}
	url := strings.TrimRight(os.Getenv(wrapper.EnvPublicURL), "/") + "/v1/task/events"
	hc := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(time.Minute)
	pause := 100 * time.Millisecond
	for {
		status, err := post(hc, url, body)
		switch {
		case err == nil && status == http.StatusOK:
			ex.Accepted = time.Now().UnixMilli()
			return nil
		case err == nil && status >= 500, status == http.StatusRequestTimeout, status == http.StatusTooManyRequests:
			ex.Retried = append(ex.Retried, status)
		case err == nil:
			ex.Refused = status
			return fmt.Errorf("the events of %s attempt %d were refused: %d", p.TaskID, p.Attempt, status)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the events of %s attempt %d were not accepted within a minute (last: %d %v)", p.TaskID, p.Attempt, status, err)
		}
		time.Sleep(pause)
		pause = min(2*pause, 2*time.Second)
	}
}

// post sends body to a task-scoped endpoint with the attempt's capability token and returns the
// answer's status.
func post(hc *http.Client, url string, body []byte) (int, error) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Trace-Task-Capability", os.Getenv(wrapper.EnvCapability))
	res, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	return res.StatusCode, nil
}

func nonce() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// readLog reads the execution log.
func readLog(path string) ([]execution, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var execs []execution
	dec := json.NewDecoder(bytes.NewReader(data))
	for dec.More() {
		var e execution
		if err := dec.Decode(&e); err != nil {
			return nil, fmt.Errorf("read the execution log: %w", err)
		}
		execs = append(execs, e)
	}
	return execs, nil
}
