package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/baton-dev/baton/client"
)

// PipelineReport is what the pipeline round saw (see pipeline.go).
type PipelineReport struct {
	Done   bool // every step of the round was done
	Events int  // partitions fed
	// Tasks are the pipeline's tasks checked, by version ("v1", "v2") and job; Built are those
	// of v2's build, created before its activation.
	Tasks map[string]map[string]int
	Built int
	// Executions are the executions of its tasks the children recorded: more than the tasks when
	// a worker died, or stalled past its lease, after its child ran.
	Executions int
	// The invariants: each must be 0.
	Missing    int // routings expected (an event on a job of a version that routes it) with no completed task
	Duplicate  int // routings with more than one task, or tasks with more than one Task Completed event
	Unexpected int // tasks of a routing no version should have made, or that did not complete
	Late       int // tasks of a version created, completed, or whose events were accepted, after it was replaced
	// Wrong: outputs not from the committed attempt, tasks that read or wrote other dataset
	// versions than their version's, steps after which the pipeline was not as expected.
	Wrong    int
	Pointers int // datasets whose current version was not the expected one after a step
	// ServerErrors are 5xx answers other than 503 to the round's requests and its tasks' reports;
	// Unavailable the 503 answers (the database was unavailable), retried.
	ServerErrors, Unavailable int
}

// ok reports whether the round's invariants held.
func (p *PipelineReport) ok() bool {
	return p.Done && p.Missing == 0 && p.Duplicate == 0 && p.Unexpected == 0 && p.Late == 0 && p.Wrong == 0 &&
		p.Pointers == 0 && p.ServerErrors == 0
}

func (p *PipelineReport) String() string {
	var tasks []string
	for _, v := range slices.Sorted(maps.Keys(p.Tasks)) {
		var jobs []string
		for _, j := range slices.Sorted(maps.Keys(p.Tasks[v])) {
			jobs = append(jobs, fmt.Sprintf("%s:%d", j, p.Tasks[v][j]))
		}
		tasks = append(tasks, v+"("+strings.Join(jobs, ",")+")")
	}
	return fmt.Sprintf("pipeline: done=%v events=%d tasks=%s built=%d executions=%d missing=%d duplicate=%d unexpected=%d late=%d "+
		"wrong=%d pointers=%d server-errors=%d unavailable=%d", p.Done, p.Events, strings.Join(tasks, ","), p.Built, p.Executions,
		p.Missing, p.Duplicate, p.Unexpected, p.Late, p.Wrong, p.Pointers, p.ServerErrors, p.Unavailable)
}

// routingKey names one routing of the round: an event (a partition) on a job of a version.
type routingKey struct{ version, job, partition string }

// expected is every routing the round's steps make, once each:
//
//   - v1 routes every partition fed while it is active (before the build, during it, and after
//     the rollback) to all its jobs;
//   - v2's build routes the partitions fed before and during it to the jobs it rebuilds, middle
//     and tail; once active, v2 routes what is fed to all its jobs;
//   - the rollback routes again to v1's middle and tail, whose datasets move back, what v2 ran on
//     them while active.
func (p *pipelineRound) expected() map[routingKey]bool {
	want := map[routingKey]bool{}
	add := func(version string, jobs []string, phases ...string) {
		for _, ph := range phases {
			for _, part := range p.parts[ph] {
				for _, j := range jobs {
					want[routingKey{version, j, part}] = true
				}
			}
		}
	}
	all := []string{"middle", "tail", "side"}
	add(p.v1, all, phaseBefore, phaseBuilding, phaseRolled)
	add(p.v2, []string{"middle", "tail"}, phaseBefore, phaseBuilding)
	add(p.v2, all, phaseActive)
	if !p.rollbackSent.IsZero() {
		add(p.v1, []string{"middle", "tail"}, phaseActive)
	}
	return want
}

// verifyPipeline checks, through the public API and the execution log, what the pipeline round
// made: every task of the pipeline, found by listing the jobs, completed once, from a recorded
// execution; the feed runs made one task each, under the version active when they were asked for;
// every other task is one routing the round's steps make (expected), and each of those has one;
// each task read and wrote the dataset versions of its version (a build's task the build's);
// no task of v1 was created, completed or had its events accepted between the activation of v2 and
// the rollback, and none of v2 after the rollback.
func (r *run) verifyPipeline(ctx context.Context, c *client.Client, p *pipelineRound, execs []execution, rep *Report) error {
	pr := &PipelineReport{Done: p.done, Tasks: map[string]map[string]int{}, Wrong: p.states, Pointers: p.pointers, ServerErrors: p.serverErrors,
		Unavailable: p.unavailable}
	rep.Pipeline = pr
	for _, pb := range p.problems {
		rep.problem("%s", pb)
	}
	if p.err != nil {
		rep.problem("pipeline round: stopped before its last step: %v (steps done: %s)", p.err, strings.Join(p.steps, "; "))
	}
	for _, ph := range phases {
		pr.Events += len(p.parts[ph])
	}
	if p.v1 == "" {
		return nil // nothing was deployed
	}
	// The pipeline's tasks' executions, by job id and task key, and the 5xx their reports met.
	byTask := map[[2]string][]execution{}
	for _, e := range execs {
		if e.Pipeline == nil {
			continue
		}
		pr.Executions++
		byTask[[2]string{e.Job, e.Task}] = append(byTask[[2]string{e.Job, e.Task}], e)
		for _, s := range e.Pipeline.Retried {
			switch {
			case s == 503:
				pr.Unavailable++
			case s >= 500:
				pr.ServerErrors++
				rep.problem("pipeline round: task %s (%s of %s) attempt %d: its events were answered %d", e.Pipeline.TaskID, e.Pipeline.Job,
					p.label(e.Pipeline.Version), e.Attempt, s)
			}
		}
	}
	ids, err := pipelineJobs(ctx, c)
	if err != nil {
		return err
	}
	runs := map[string]*feedRun{}
	for _, fr := range p.runs {
		runs[fr.jobID] = fr
	}
	seenRuns := map[string]bool{}
	got := map[routingKey][]string{} // → the job ids of its tasks
	replaced := func(version string, at int64) bool {
		t := time.UnixMilli(at)
		switch version {
		case p.v1:
			return !p.activateSent.IsZero() && !t.Before(p.activateSent) && (p.rollbackSent.IsZero() || t.Before(p.rollbackSent))
		case p.v2:
			return !p.rollbackSent.IsZero() && !t.Before(p.rollbackSent)
		}
		return false
	}
	for _, id := range ids {
		job, err := c.GetJob(ctx, id)
		if err != nil {
			return fmt.Errorf("chaos: GET /jobs/%s: %w", id, err)
		}
		if len(job.Tasks) != 1 {
			pr.Unexpected++
			rep.problem("pipeline round: job %s (%s) has %d tasks, want 1", id, job.Name, len(job.Tasks))
			continue
		}
		t := job.Tasks[0]
		if t.Status != client.TaskCompleted {
			pr.Unexpected++
			rep.problem("pipeline round: job %s (%s) ended %s (%+v), want completed", id, job.Name, t.Status, t.Error)
			continue
		}
		var out Output
		if err := json.Unmarshal(t.Output, &out); err != nil || out.Version == "" {
			pr.Wrong++
			rep.problem("pipeline round: job %s (%s): output %s is not a chaos pipeline output", id, job.Name, t.Output)
			continue
		}
		label := p.label(out.Version)
		if pr.Tasks[label] == nil {
			pr.Tasks[label] = map[string]int{}
		}
		pr.Tasks[label][out.Job]++
		if out.Version == p.v2 && !p.activateSent.IsZero() && time.UnixMilli(job.CreatedAt).Before(p.activateSent) {
			pr.Built++
		}
		completions, err := r.completions(ctx, c, id)
		if err != nil {
			return err
		}
		if n := len(completions[t.TaskID]); n != 1 {
			pr.Duplicate++
			rep.problem("pipeline round: job %s (%s of %s): %d Task Completed events, want 1", id, out.Job, label, n)
		}
		ex := byTask[[2]string{id, t.TaskID}]
		var committed *pipelineExecution
		for _, e := range ex {
			if e.Attempt == out.Attempt && e.Nonce == out.Nonce {
				committed = e.Pipeline
			}
		}
		if committed == nil || out.Attempt != t.Attempt || out.Task != t.TaskID {
			pr.Wrong++
			rep.problem("pipeline round: job %s (%s of %s): output of %s attempt %d, but the task's attempt is %d, and no recorded execution produced it",
				id, out.Job, label, out.Task, out.Attempt, t.Attempt)
			continue
		}
		// Nothing of a version once it was replaced: no task created, completed, or whose
		// events were accepted.
		at := map[string]int64{"created": job.CreatedAt}
		if job.CompletedAt != nil {
			at["completed"] = *job.CompletedAt
		}
		for _, e := range ex {
			if e.Pipeline.Accepted > 0 {
				at[fmt.Sprintf("events of attempt %d accepted", e.Attempt)] = e.Pipeline.Accepted
			}
		}
		for what, ms := range at {
			if replaced(out.Version, ms) {
				pr.Late++
				rep.problem("pipeline round: job %s (%s of %s): %s at %s, after %s was replaced", id, out.Job, label, what,
					time.UnixMilli(ms).Format(time.StampMilli), label)
			}
		}
		if !p.versionsRight(rep, id, label, out.Version, committed) {
			pr.Wrong++
		}
		if out.Job == "feed" {
			fr := runs[id]
			switch {
			case fr == nil:
				pr.Unexpected++
				rep.problem("pipeline round: job %s: a feed run the round did not ask for (%v under %s)", id, out.Partitions, label)
			case out.Version != fr.version || !slices.Equal(out.Partitions, fr.partitions):
				pr.Wrong++
				rep.problem("pipeline round: feed run %s (job %s) emitted %v under %s, want %v under %s", fr.key, id, out.Partitions,
					label, fr.partitions, p.label(fr.version))
			}
			seenRuns[id] = true
			continue
		}
		if len(out.Partitions) != 1 {
			pr.Wrong++
			rep.problem("pipeline round: job %s (%s of %s) handled partitions %v, want one", id, out.Job, label, out.Partitions)
			continue
		}
		k := routingKey{out.Version, out.Job, out.Partitions[0]}
		got[k] = append(got[k], id)
	}
	for _, fr := range p.runs {
		if !seenRuns[fr.jobID] {
			pr.Missing++
			rep.problem("pipeline round: feed run %s (job %s, %s) has no completed task", fr.key, fr.jobID, fr.phase)
		}
	}
	want := p.expected()
	for _, k := range slices.SortedFunc(maps.Keys(want), compareKeys) {
		switch n := len(got[k]); {
		case n == 0:
			pr.Missing++
			rep.problem("pipeline round: partition %s was not handled by %s of %s", k.partition, k.job, p.label(k.version))
		case n > 1:
			pr.Duplicate++
			rep.problem("pipeline round: partition %s was handled by %d tasks of %s of %s: jobs %v", k.partition, n, k.job, p.label(k.version), got[k])
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(got), compareKeys) {
		if !want[k] {
			pr.Unexpected++
			rep.problem("pipeline round: partition %s was handled by %s of %s, which should not route it: jobs %v", k.partition, k.job, p.label(k.version), got[k])
		}
	}
	return nil
}

func compareKeys(a, b routingKey) int {
	return strings.Compare(a.version+"\x00"+a.job+"\x00"+a.partition, b.version+"\x00"+b.job+"\x00"+b.partition)
}

// versionsRight checks the dataset versions a task's committed execution read and wrote: those
// current under its version, the build's for v2's rebuilt datasets.
func (p *pipelineRound) versionsRight(rep *Report, id, label, version string, e *pipelineExecution) bool {
	versions := p.original
	if version == p.v2 {
		versions = p.after(p.candidate)
	}
	ok := true
	check := func(what string, got map[string]string) {
		for ds, v := range got {
			if v != versions[ds] {
				ok = false
				rep.problem("pipeline round: job %s (%s of %s) %s dataset %s at version %s, want %s", id, e.Job, label, what, ds, v, versions[ds])
			}
		}
	}
	check("read", e.Read)
	check("wrote", e.Wrote)
	want := map[string]int{"feed": 1, "middle": 1, "tail": 1, "side": 0}[e.Job]
	if len(e.Wrote) != want || (e.Job != "feed" && len(e.Read) != 1) {
		ok = false
		rep.problem("pipeline round: job %s (%s of %s) read %v and wrote %v", id, e.Job, label, e.Read, e.Wrote)
	}
	return ok
}

// pipelineJobs lists the ids of the round's pipeline's jobs: each task a pipeline makes is a job
// of its own, named pipeline.job.
func pipelineJobs(ctx context.Context, c *client.Client) ([]string, error) {
	var ids []string
	cursor := ""
	for {
		page, err := c.ListJobs(ctx, client.ListOptions{Limit: 100, Cursor: cursor})
		if err != nil {
			return nil, fmt.Errorf("chaos: GET /jobs: %w", err)
		}
		for _, j := range page.Jobs {
			if strings.HasPrefix(j.Name, buildPipeline+".") {
				ids = append(ids, j.JobID)
			}
		}
		if page.NextCursor == "" {
			return ids, nil
		}
		cursor = page.NextCursor
	}
}
