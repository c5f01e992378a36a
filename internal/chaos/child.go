package chaos

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"
)

// The child is the program `baton worker` runs once per task in a chaos run. It records every
// execution that gets as far as producing an output, one JSON line in the execution log, so that
// the verdict can tell how often each task ran, which execution's output the server committed,
// and what each execution was handed as its parents' outputs.

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
}

// execution is one line of the execution log.
type execution struct {
	Job     string            `json:"job"`
	Task    string            `json:"task"`
	Attempt int               `json:"attempt"`
	Nonce   string            `json:"nonce"`
	Parents map[string]string `json:"parents"` // parent task key → the nonce of the output it was handed
}

// payload is the part of the worker's task payload the child reads.
type payload struct {
	JobID             string                     `json:"job_id"`
	TaskKey           string                     `json:"task_key"`
	Attempt           int                        `json:"attempt"`
	Input             json.RawMessage            `json:"input"`
	DependencyOutputs map[string]json.RawMessage `json:"dependency_outputs"`
}

// RunChild is the child's main: it reads the task payload from stdin, works for the input's
// sleep_ms, appends its execution to the log named by BATON_CHAOS_LOG, and prints its output.
func RunChild(stdin io.Reader, stdout io.Writer) error {
	var p payload
	if err := json.NewDecoder(stdin).Decode(&p); err != nil {
		return fmt.Errorf("read the task payload: %w", err)
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
	return json.NewEncoder(stdout).Encode(Output{Task: p.TaskKey, Attempt: p.Attempt, Nonce: exec.Nonce})
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
