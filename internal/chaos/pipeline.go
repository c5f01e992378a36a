package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// The pipeline round: while the faults go on, it deploys a pipeline, feeds it events, deploys a
// config change to its middle job (which starts a build: the middle job and what reads it are
// rebuilt beside the live version, into new versions of their datasets), keeps feeding, waits for
// the build to be ready, activates it, feeds more, rolls back and feeds more. Every step goes
// through the public API, retried as a careful client would; the workers are the run's own
// `baton worker` wrappers, whose children report their events as real workers do. verifyPipeline
// then checks what ran.
//
// Rolling back moves the datasets of middle and tail back to v1's versions, and routes again to
// v1's middle and tail what v2 ran on them since its activation (so that those versions miss
// nothing): v1's tail gets those partitions from v1's middle, which writes them into v1's version.
//
// Between steps the round waits until every task routed so far has finished, so that which
// version routes which event, and which version each task reads and writes, is known exactly. The
// faults and the load go on until it has fed its last events (run.pipelineGoing): the crash-all
// comes with their tasks in flight. The pipeline:
//
//	feed ──chaos_feed──▶ middle ──chaos_middle──▶ tail ──chaos_tail──▶
//	  └──chaos_feed──▶ side
//
// Deploying generation 2 of middle's config rebuilds middle and tail (not feed, not side).

// buildPipeline is the round's pipeline.
const buildPipeline = "chaos_build"

// Its operators: the run's workers run their tasks (queues default to the operator's name).
const (
	feedOperator = "chaos_feed"
	stepOperator = "chaos_step"
)

// buildDocument is the round's pipeline, with the given generation of middle's config.
func buildDocument(generation int) []byte {
	return fmt.Appendf(nil, `name: %s
defaults:
  max_attempts: 50
jobs:
  - name: feed
    activation: source
    runtime: ecs_platform
    operator: %s
    outputs: 1
    source: {kind: manual}
  - name: middle
    activation: reactive
    runtime: ecs_platform
    operator: %s
    outputs: 1
    execution_strategy: PerUpdate
    config: {generation: %d}
    inputs:
      - from: {dataset: chaos_feed}
  - name: tail
    activation: reactive
    runtime: ecs_platform
    operator: %s
    outputs: 1
    execution_strategy: PerPartition
    inputs:
      - from: {dataset: chaos_middle}
  - name: side
    activation: reactive
    runtime: ecs_platform
    operator: %s
    outputs: 0
    inputs:
      - from: {dataset: chaos_feed}
publish:
  chaos_feed:
    from: {job: feed, output: 0}
  chaos_middle:
    from: {job: middle, output: 0}
  chaos_tail:
    from: {job: tail, output: 0}
`, buildPipeline, feedOperator, stepOperator, generation, stepOperator, stepOperator)
}

// The round's phases, each fed runsPerPhase runs of partsPerRun partitions.
const (
	phaseBefore   = "before"   // v1 active
	phaseBuilding = "building" // v2 building beside v1
	phaseActive   = "active"   // v2 active
	phaseRolled   = "rolled"   // v1 active again
	runsPerPhase  = 3
	partsPerRun   = 2
	// callTimeout bounds how long one request of the round may take to be answered: longer
	// than any fault lasts.
	callTimeout = 2 * time.Minute
)

var phases = []string{phaseBefore, phaseBuilding, phaseActive, phaseRolled}

// pipelineRound is the round's state: what it did, for verifyPipeline.
type pipelineRound struct {
	r  *run
	hc *http.Client

	// v1 is the version deployed first, v2 the one with middle's changed config.
	v1, v2 string
	// The datasets, by job: the uuid of the dataset each job's output 0 writes.
	feedDS, middleDS, tailDS string
	// original are the current versions of the datasets under v1, candidate those v2's build
	// makes of the datasets it rebuilds.
	original, candidate map[string]string
	runs                []*feedRun
	parts               map[string][]string // the partitions fed in each phase
	// activateSent and rollbackSent are when the round first asked for the activation and the
	// rollback; zero until it did.
	activateSent, rollbackSent time.Time
	fedOnce                    sync.Once
	steps                      []string // the steps done, in order
	done                       bool     // every step was done
	err                        error    // why the round stopped early

	pointers     int // datasets found at another version than expected after a step
	states       int // steps after which the pipeline was not as expected
	serverErrors int // 5xx answers other than 503
	unavailable  int // 503 answers (the database was unavailable), retried
	retried      int // connection errors, timeouts and 429 answers, retried
	problems     []string
}

// feedRun is one run of the feed job: a task that emits partitions.
type feedRun struct {
	phase, key, jobID, version string
	partitions                 []string
}

func newPipelineRound(r *run) *pipelineRound {
	return &pipelineRound{r: r, hc: &http.Client{Timeout: 10 * time.Second}, original: map[string]string{},
		candidate: map[string]string{}, parts: map[string][]string{}}
}

// fedAll closes r.pipelineFed, once.
func (p *pipelineRound) fedAll() {
	p.fedOnce.Do(func() { close(p.r.pipelineFed) })
}

func (p *pipelineRound) problem(format string, args ...any) {
	if len(p.problems) < 20 {
		p.problems = append(p.problems, "pipeline round: "+fmt.Sprintf(format, args...))
	}
}

func (p *pipelineRound) step(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	p.steps = append(p.steps, s)
	p.r.logf("pipeline round, %.1fs in: %s", time.Since(p.r.end.Add(-p.r.cfg.Duration)).Seconds(), s)
}

// run runs the round's steps; an error stops it (verifyPipeline reports it). It closes
// r.pipelineFed once it has fed its last events, or stopped.
func (p *pipelineRound) run(ctx context.Context) {
	defer p.fedAll()
	if err := p.scenario(ctx); err != nil {
		p.err = err
		p.r.logf("pipeline round stopped: %v", err)
		return
	}
	p.done = true
}

func (p *pipelineRound) scenario(ctx context.Context) error {
	// v1, and what it writes.
	d, err := p.deploy(ctx, buildDocument(1))
	if err != nil {
		return err
	}
	if d.ActiveVersion != d.Version { // a repeat, after an answer lost, says activated: false
		return fmt.Errorf("the first deploy: version %s, but active %s; want it active", d.Version, d.ActiveVersion)
	}
	p.v1 = d.Version
	for _, j := range d.Jobs {
		if len(j.Outputs) == 0 {
			continue
		}
		switch j.Name {
		case "feed":
			p.feedDS = j.Outputs[0].DatasetUUID
		case "middle":
			p.middleDS = j.Outputs[0].DatasetUUID
		case "tail":
			p.tailDS = j.Outputs[0].DatasetUUID
		}
	}
	for _, ds := range []string{p.feedDS, p.middleDS, p.tailDS} {
		v, err := p.current(ctx, ds)
		if err != nil {
			return err
		}
		p.original[ds] = v
	}
	p.step("deployed v1 %s", p.v1)

	want := map[string]int{}
	if err := p.feed(ctx, phaseBefore, p.v1, want); err != nil {
		return err
	}
	if _, err := p.await(ctx, phaseBefore, want, false); err != nil {
		return err
	}

	// v2: middle's config changes, so middle and tail are rebuilt beside v1.
	d, err = p.deploy(ctx, buildDocument(2))
	if err != nil {
		return err
	}
	if d.Activated || d.ActiveVersion != p.v1 || d.BuildingVersion != d.Version || d.Build == nil || d.Build.Base != p.v1 {
		return fmt.Errorf("the changed deploy: version %s active %s building %s activated %v build %+v; want it building on v1 %s",
			d.Version, d.ActiveVersion, d.BuildingVersion, d.Activated, d.Build, p.v1)
	}
	p.v2 = d.Version
	var rebuilt []string
	for _, j := range d.Build.Jobs {
		rebuilt = append(rebuilt, j.Name)
	}
	slices.Sort(rebuilt)
	if !slices.Equal(rebuilt, []string{"middle", "tail"}) {
		p.states++
		p.problem("the build of v2 rebuilds %v, want middle and tail", rebuilt)
	}
	for _, ds := range d.Build.Datasets {
		p.candidate[ds.DatasetUUID] = ds.CandidateVersion
		if ds.CurrentVersion != p.original[ds.DatasetUUID] {
			p.states++
			p.problem("the build of v2 shows dataset %s at %s, want v1's %s", ds.DatasetUUID, ds.CurrentVersion, p.original[ds.DatasetUUID])
		}
	}
	if len(p.candidate) != 2 || p.candidate[p.middleDS] == "" || p.candidate[p.tailDS] == "" {
		return fmt.Errorf("the build of v2 rebuilds datasets %v; want middle's %s and tail's %s", p.candidate, p.middleDS, p.tailDS)
	}
	p.step("deployed v2 %s: building middle and tail into %s", p.v2, describe(p.candidate))

	// The build routes the events fed before it to the rebuilt jobs again, and the events fed
	// during it reach both versions.
	for _, j := range []string{"middle", "tail"} {
		want[j] += len(p.parts[phaseBefore])
	}
	if err := p.feed(ctx, phaseBuilding, p.v1, want); err != nil {
		return err
	}
	for _, j := range []string{"middle", "tail"} {
		want[j] += len(p.parts[phaseBuilding])
	}
	if _, err := p.await(ctx, phaseBuilding, want, true); err != nil {
		return err
	}
	p.expectCurrent(ctx, "the build was ready", p.original)

	if err := p.activate(ctx); err != nil {
		return err
	}
	p.expectCurrent(ctx, "the activation", p.after(p.candidate))

	if err := p.feed(ctx, phaseActive, p.v2, want); err != nil {
		return err
	}
	if _, err := p.await(ctx, phaseActive, want, false); err != nil {
		return err
	}

	if err := p.rollback(ctx); err != nil {
		return err
	}
	p.expectCurrent(ctx, "the rollback", p.original)
	// The datasets of middle and tail move back to v1's versions: what v2 ran on those jobs
	// since its activation is routed again to them, under v1.
	for _, j := range []string{"middle", "tail"} {
		want[j] += len(p.parts[phaseActive])
	}

	if err := p.feed(ctx, phaseRolled, p.v1, want); err != nil {
		return err
	}
	p.fedAll() // the faults end, with the crash-all: these tasks recover from it
	_, err = p.await(ctx, phaseRolled, want, false)
	return err
}

// after is the current versions of the pipeline's datasets once pins are current.
func (p *pipelineRound) after(pins map[string]string) map[string]string {
	out := maps.Clone(p.original)
	maps.Copy(out, pins)
	return out
}

func describe(m map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"@"+m[k])
	}
	return strings.Join(parts, ", ")
}

// feed starts the runs of a phase, under version (the active one), and adds the tasks they are
// to make to want (by job, of every version).
func (p *pipelineRound) feed(ctx context.Context, phase, version string, want map[string]int) error {
	first := 1
	for _, ph := range phases {
		first += len(p.parts[ph])
	}
	for i := range runsPerPhase {
		var parts []string
		for j := range partsPerRun {
			n := first + i*partsPerRun + j
			parts = append(parts, fmt.Sprintf("%d-%d", 100*n, 100*n+99))
		}
		body, _ := json.Marshal(map[string]any{"partitions": parts})
		key := fmt.Sprintf("chaos-%d-%s-%d", p.r.cfg.Seed, phase, i)
		status, raw, err := p.call(ctx, http.MethodPost, "/pipelines/"+buildPipeline+"/jobs/feed/run", body,
			map[string]string{"Idempotency-Key": key})
		if err != nil {
			return err
		}
		var res struct {
			JobID string `json:"job_id"`
		}
		if status/100 != 2 || json.Unmarshal(raw, &res) != nil || res.JobID == "" {
			return fmt.Errorf("run feed (%s): %d %s", phase, status, raw)
		}
		p.runs = append(p.runs, &feedRun{phase: phase, key: key, jobID: res.JobID, version: version, partitions: parts})
		p.parts[phase] = append(p.parts[phase], parts...)
		want["feed"]++
		for _, j := range []string{"middle", "tail", "side"} {
			want[j] += len(parts)
		}
	}
	p.step("fed %d partitions (%s) under %s", len(p.parts[phase]), phase, p.label(version))
	return nil
}

func (p *pipelineRound) label(version string) string {
	switch version {
	case p.v1:
		return "v1"
	case p.v2:
		return "v2"
	}
	return version
}

// await polls the pipeline until every job has at least the tasks want counts (over all its
// versions) and none of them is unfinished, and, when ready is set, its build is ready. While
// tasks keep finishing it waits; once none has finished for stuckAfter, it gives up.
func (p *pipelineRound) await(ctx context.Context, what string, want map[string]int, ready bool) (*pipelineView, error) {
	deadline := time.Now().Add(stuckAfter)
	finished := -1
	for {
		v, err := p.view(ctx)
		if err != nil {
			return nil, err
		}
		done, now := true, 0
		for _, j := range v.Jobs {
			c := j.Counts
			now += c["completed"] + c["failed"] + c["canceled"]
			if c["routed"] < want[j.Name] || c["waiting"]+c["pending"]+c["running"] > 0 {
				done = false
			}
		}
		if ready {
			switch {
			case v.Build == nil:
				return nil, fmt.Errorf("waiting for the build of v2 (%s): the pipeline builds nothing (active %s)", what, v.ActiveVersion)
			case v.Build.State != "ready":
				done = false
			}
		}
		if done {
			p.step("%s: every task finished: %s", what, counts(v))
			return v, nil
		}
		if now > finished {
			finished, deadline = now, time.Now().Add(stuckAfter)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s: no task finished for %s: want %v; %s (build %+v)", what, stuckAfter, want, counts(v), v.Build)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func counts(v *pipelineView) string {
	var parts []string
	for _, j := range v.Jobs {
		parts = append(parts, fmt.Sprintf("%s %v", j.Name, j.Counts))
	}
	return strings.Join(parts, "; ")
}

// activate activates v2. A repeat after an activation whose answer was lost is answered 409
// (the version is no longer being built): it is done when v2 is the active version.
func (p *pipelineRound) activate(ctx context.Context) error {
	p.activateSent = time.Now()
	status, raw, err := p.call(ctx, http.MethodPost, "/pipelines/"+buildPipeline+"/versions/"+p.v2+"/activate", []byte("{}"), nil)
	if err != nil {
		return err
	}
	switch status {
	case http.StatusOK:
		var res struct {
			ActiveVersion string `json:"active_version"`
			CanceledJobs  int    `json:"canceled_jobs"`
		}
		if json.Unmarshal(raw, &res) != nil || res.ActiveVersion != p.v2 {
			return fmt.Errorf("activate v2: %s", raw)
		}
		if res.CanceledJobs != 0 { // every task of v1 had finished
			p.states++
			p.problem("activate v2 canceled %d jobs of v1, whose tasks had all finished", res.CanceledJobs)
		}
	case http.StatusConflict:
		v, err := p.view(ctx)
		if err != nil {
			return err
		}
		if v.ActiveVersion != p.v2 {
			return fmt.Errorf("activate v2: 409 %s, and v2 is not active (active %s)", raw, v.ActiveVersion)
		}
		p.r.logf("pipeline round: activate v2 answered 409 (%s): an earlier try activated it", raw)
	default:
		return fmt.Errorf("activate v2: %d %s", status, raw)
	}
	v, err := p.view(ctx)
	if err != nil {
		return err
	}
	if v.ActiveVersion != p.v2 || v.BuildingVersion != "" || v.Build != nil {
		p.states++
		p.problem("after the activation: active %s building %q build %+v; want v2 %s active and nothing building", v.ActiveVersion, v.BuildingVersion, v.Build, p.v2)
	}
	p.step("activated v2")
	return nil
}

// rollback rolls back to v1, by name: repeated, it changes nothing.
func (p *pipelineRound) rollback(ctx context.Context) error {
	p.rollbackSent = time.Now()
	body, _ := json.Marshal(map[string]string{"version": p.v1})
	status, raw, err := p.call(ctx, http.MethodPost, "/pipelines/"+buildPipeline+"/rollback", body, nil)
	if err != nil {
		return err
	}
	var res struct {
		ActiveVersion string `json:"active_version"`
		CanceledJobs  int    `json:"canceled_jobs"`
	}
	if status != http.StatusOK || json.Unmarshal(raw, &res) != nil || res.ActiveVersion != p.v1 {
		return fmt.Errorf("roll back to v1: %d %s", status, raw)
	}
	if res.CanceledJobs != 0 { // every task of v2 had finished
		p.states++
		p.problem("the rollback canceled %d jobs of v2, whose tasks had all finished", res.CanceledJobs)
	}
	v, err := p.view(ctx)
	if err != nil {
		return err
	}
	if v.ActiveVersion != p.v1 || v.BuildingVersion != "" {
		p.states++
		p.problem("after the rollback: active %s building %q; want v1 %s", v.ActiveVersion, v.BuildingVersion, p.v1)
	}
	p.step("rolled back to v1")
	return nil
}

// expectCurrent checks the current versions of the pipeline's datasets.
func (p *pipelineRound) expectCurrent(ctx context.Context, when string, want map[string]string) {
	for _, ds := range slices.Sorted(maps.Keys(want)) {
		got, err := p.current(ctx, ds)
		if err != nil {
			p.problem("after %s: dataset %s: %v", when, ds, err)
			continue
		}
		if got != want[ds] {
			p.pointers++
			p.problem("after %s: dataset %s is at version %s, want %s", when, ds, got, want[ds])
		}
	}
}

// pipelineView is the part of GET /pipelines/{name} (and of a deploy's answer) the round reads.
type pipelineView struct {
	Version         string `json:"version"` // a deploy's
	Activated       bool   `json:"activated"`
	ActiveVersion   string `json:"active_version"`
	BuildingVersion string `json:"building_version"`
	Jobs            []struct {
		Name    string `json:"name"`
		Outputs []struct {
			DatasetUUID string `json:"dataset_uuid"`
		} `json:"outputs"`
		Counts map[string]int `json:"counts"`
	} `json:"jobs"`
	Build *struct {
		Version string `json:"version"`
		State   string `json:"state"`
		Base    string `json:"base_version"`
		Jobs    []struct {
			Name   string         `json:"name"`
			Counts map[string]int `json:"counts"`
		} `json:"jobs"`
		Datasets []struct {
			DatasetUUID      string `json:"dataset_uuid"`
			CurrentVersion   string `json:"current_version"`
			CandidateVersion string `json:"candidate_version"`
		} `json:"datasets"`
	} `json:"build"`
}

// deploy deploys doc: repeated, the same text is the same version.
func (p *pipelineRound) deploy(ctx context.Context, doc []byte) (*pipelineView, error) {
	status, raw, err := p.call(ctx, http.MethodPost, "/pipelines", doc, map[string]string{"Content-Type": "application/yaml"})
	if err != nil {
		return nil, err
	}
	var v pipelineView
	if status/100 != 2 || json.Unmarshal(raw, &v) != nil || v.Version == "" {
		return nil, fmt.Errorf("deploy: %d %s", status, raw)
	}
	return &v, nil
}

func (p *pipelineRound) view(ctx context.Context) (*pipelineView, error) {
	status, raw, err := p.call(ctx, http.MethodGet, "/pipelines/"+buildPipeline, nil, nil)
	if err != nil {
		return nil, err
	}
	var v pipelineView
	if status != http.StatusOK || json.Unmarshal(raw, &v) != nil {
		return nil, fmt.Errorf("GET /pipelines/%s: %d %s", buildPipeline, status, raw)
	}
	return &v, nil
}

// current is a dataset's current version.
func (p *pipelineRound) current(ctx context.Context, uuid string) (string, error) {
	status, raw, err := p.call(ctx, http.MethodGet, "/datasets/"+url.PathEscape(uuid), nil, nil)
	if err != nil {
		return "", err
	}
	var d struct {
		CurrentVersion string `json:"current_version"`
	}
	if status != http.StatusOK || json.Unmarshal(raw, &d) != nil || d.CurrentVersion == "" {
		return "", fmt.Errorf("GET /datasets/%s: %d %s", uuid, status, raw)
	}
	return d.CurrentVersion, nil
}

// call sends a request to the servers in turn until one answers with something other than a
// transient failure (a connection error, a timeout, 503 or 429), and returns that answer. A 5xx
// other than 503 is a server error, counted as a problem, and sent again.
func (p *pipelineRound) call(ctx context.Context, method, path string, body []byte, header map[string]string) (int, []byte, error) {
	deadline := time.Now().Add(callTimeout)
	var last string
	for try := 0; ; try++ {
		s := p.r.servers[try%len(p.r.servers)]
		status, raw, err := p.send(ctx, s, method, path, body, header)
		switch {
		case err != nil:
			p.retried++
			last = err.Error()
		case status == http.StatusServiceUnavailable:
			p.unavailable++
			last = fmt.Sprintf("%d %s", status, raw)
		case status == http.StatusTooManyRequests:
			p.retried++
			last = fmt.Sprintf("%d %s", status, raw)
		case status >= 500:
			p.serverErrors++
			p.problem("%s %s to %s: %d %s", method, path, s.name, status, raw)
			last = fmt.Sprintf("%d %s", status, raw)
		default:
			return status, raw, nil
		}
		if ctx.Err() != nil {
			return 0, nil, ctx.Err()
		}
		if time.Now().After(deadline) {
			return 0, nil, fmt.Errorf("%s %s: not answered within %s (last: %s)", method, path, callTimeout, last)
		}
		select {
		case <-ctx.Done():
			return 0, nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// send sends a request once.
func (p *pipelineRound) send(ctx context.Context, s *server, method, path string, body []byte, header map[string]string) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.producerURL+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("x-api-key", p.r.apiKey)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := p.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return 0, nil, fmt.Errorf("read the answer: %w", err)
	}
	return res.StatusCode, raw, nil
}
