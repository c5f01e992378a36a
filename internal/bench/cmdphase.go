package bench

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/baton-dev/baton/client"
)

// WorkerRow is the work-only phase as one kind of worker ran it: the in-process workers of
// Config.Via first, then each worker command, on fresh jobs of the same size and shape.
type WorkerRow struct {
	// Worker is "go " and the path (the in-process workers, e.g. "go sdk") or a command's label.
	Worker  string `json:"worker"`
	Command string `json:"command,omitempty"` // sh -c COMMAND; empty for the in-process workers
	Task    string `json:"task"`              // the task name (and queue) of the row's jobs

	SubmitSeconds float64 `json:"submit_seconds"`
	// Seconds is the measured span. In-process: from the workers' start to the last completion
	// acknowledged, as the work-only phase. A command: from the first claim of one of its tasks
	// to the last completion, as the server recorded them (its events' times, to the
	// millisecond), so that the command's start-up does not count.
	Seconds     float64 `json:"seconds"`
	TasksPerSec float64 `json:"tasks_per_second"`
	// ReadySeconds is, for a command, the time from its start to the first claim of one of its
	// tasks: the interpreter's start, the SDK's import, the first claim request.
	ReadySeconds *float64 `json:"ready_seconds"`
	// CPUSeconds is the workers' CPU time: a command's process tree from its start to its last
	// task (start-up included); for the in-process workers, the bench process's over the phase
	// (its submitters are idle by then).
	CPUSeconds *float64 `json:"cpu_seconds"`
	// PeakRSSBytes is a command's peak resident memory: the sum of each of its processes'
	// peaks (VmHWM), read before it is stopped; nil for the in-process workers, whose process
	// holds the bench as well.
	PeakRSSBytes *int64 `json:"peak_rss_bytes"`
	// ServerCPUSeconds is the server's CPU time over the row's phase, nil when unknown.
	ServerCPUSeconds *float64 `json:"server_cpu_seconds"`
	// Stop is how a command ended when asked to (SIGTERM, then SIGKILL after a grace).
	Stop string `json:"stop,omitempty"`
}

// serverCPU is the server's CPU time so far, nil when unknown.
func (b *bench) serverCPU() *float64 {
	if b.cfg.ServerPID == 0 {
		return nil
	}
	st, err := ReadProcStats(b.cfg.ServerPID)
	if err != nil {
		return nil
	}
	return &st.CPUSeconds
}

// delta is after − before rounded, nil unless both are known.
func delta(before, after *float64) *float64 {
	if before == nil || after == nil {
		return nil
	}
	d := round(*after-*before, 2)
	return &d
}

// selfCPU is this process's CPU time so far, nil when unknown.
func selfCPU() *float64 {
	st, err := ReadProcStats(os.Getpid())
	if err != nil {
		return nil
	}
	return &st.CPUSeconds
}

// commandTask is the task name of command i's phase: its own queue, so that nothing left of
// another phase (nor another worker) can take its tasks.
func commandTask(run string, i int) string { return fmt.Sprintf("%s-cmd%d", run, i+1) }

// runCommand runs the work-only phase once more with worker command i as the workers: it
// submits fresh jobs while nothing works their queue, starts the command, waits until every job
// has finished, reads the command's statistics, stops it, and reads the span from the jobs'
// events.
func (b *bench) runCommand(ctx context.Context, i int, wc WorkerCommand) (WorkerRow, error) {
	task := commandTask(b.cfg.TaskName, i)
	row := WorkerRow{Worker: wc.Label, Command: wc.Command, Task: task}
	jobs, err := buildJobs(b.cfg.DAG, b.cfg.Tasks, b.cfg.JobSize, task, "", task+"-work-only")
	if err != nil {
		return row, err
	}
	t0 := time.Now()
	ids, err := b.submit(ctx, jobs, nil)
	if err != nil {
		return row, err
	}
	row.SubmitSeconds = round(time.Since(t0).Seconds(), 4)

	server0 := b.serverCPU()
	p, err := b.startWorkerCommand(wc, task)
	if err != nil {
		return row, err
	}
	defer p.stop(0) // on an error: kill it
	if err := b.awaitJobs(ctx, ids, func(d time.Duration) error { return p.sleep(ctx, wc.Label, d) }); err != nil {
		return row, fmt.Errorf("worker command %s: %w", wc.Label, err)
	}
	tree, treeErr := ReadTreeStats(p.pid())
	row.ServerCPUSeconds = delta(server0, b.serverCPU())
	row.Stop = p.stop(commandGrace)
	if treeErr == nil {
		cpu := round(tree.CPUSeconds, 2)
		row.CPUSeconds, row.PeakRSSBytes = &cpu, &tree.PeakRSSBytes
	}

	if _, err := b.verify(ctx, ids); err != nil {
		return row, fmt.Errorf("worker command %s: %w", wc.Label, err)
	}
	span, err := b.eventSpan(ctx, ids)
	if err != nil {
		return row, fmt.Errorf("worker command %s: %w", wc.Label, err)
	}
	if span.completed != b.cfg.Tasks {
		return row, fmt.Errorf("worker command %s: the jobs' events record %d task completions, want %d", wc.Label, span.completed, b.cfg.Tasks)
	}
	secs := max(span.last-span.first, 1) / 1000 // a span under the events' resolution counts one millisecond
	row.Seconds = round(secs, 4)
	row.TasksPerSec = round(float64(b.cfg.Tasks)/secs, 1)
	if ready := (span.first - float64(p.started.UnixMilli())) / 1000; ready >= 0 {
		ready = round(ready, 3)
		row.ReadySeconds = &ready
	}
	return row, nil
}

// commandPoll is how often the bench looks whether a command's jobs have finished. It bounds
// only how soon the bench notices: the span comes from the server's events.
const commandPoll = 100 * time.Millisecond

// awaitJobs waits until none of the jobs is processing, looking every commandPoll through the
// list of processing jobs (one cheap request per 100 of them), with sleep between the looks.
func (b *bench) awaitJobs(ctx context.Context, ids []string, sleep func(time.Duration) error) error {
	pending := make(map[string]bool, len(ids))
	for _, id := range ids {
		pending[id] = true
	}
	for {
		still := map[string]bool{}
		for cursor := ""; ; {
			page, err := b.pc.ListJobs(ctx, client.ListOptions{Limit: 100, Status: client.JobProcessing, Cursor: cursor})
			if err != nil {
				return fmt.Errorf("list the processing jobs: %w", err)
			}
			for _, j := range page.Jobs {
				if pending[j.JobID] {
					still[j.JobID] = true
				}
			}
			if cursor = page.NextCursor; cursor == "" || len(still) == len(pending) {
				break
			}
		}
		if len(still) == 0 {
			return nil
		}
		pending = still
		if err := sleep(commandPoll); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("%d of %d jobs still processing when the bench gave up (%w)", len(pending), len(ids), err)
			}
			return err
		}
	}
}

// eventSpan is what the jobs' events say of their tasks: the first claim and the last
// completion (Unix ms) and how many tasks completed.
type eventSpanResult struct {
	first, last float64
	completed   int
}

func (b *bench) eventSpan(ctx context.Context, ids []string) (eventSpanResult, error) {
	var s eventSpanResult
	for _, id := range ids {
		done := map[string]bool{}
		for after := int64(0); ; {
			evs, next, err := b.pc.Events(ctx, id, after)
			if err != nil {
				return s, fmt.Errorf("read the events of job %s: %w", id, err)
			}
			for _, e := range evs {
				at := float64(e.At)
				switch e.Type {
				case "Task Processing Started":
					if s.first == 0 || at < s.first {
						s.first = at
					}
				case "Task Completed":
					done[e.TaskID] = true
					s.last = max(s.last, at)
				}
			}
			if len(evs) == 0 || next == after {
				break
			}
			after = next
		}
		s.completed += len(done)
	}
	if s.first == 0 || s.last == 0 {
		return s, fmt.Errorf("the jobs' events record no claim or no completion")
	}
	return s, nil
}
