// Package chaos runs Baton's real processes — servers, `baton worker` wrappers and their task
// children, the wake-up transport's server — under random faults, and checks through the public
// API that every job the API accepted finished with each task committed exactly once; with
// Config.Pipeline, also that a pipeline rebuilt beside its live version (a build), activated and
// rolled back under the faults ran every event exactly once per version (pipeline.go).
package chaos

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Stores and transports a run can use.
const (
	StoreSQLite   = "sqlite"
	StorePostgres = "postgres"

	TransportStore = "store"
	TransportRedis = "redis"
	TransportNATS  = "nats"
)

// The lifecycle settings of a run: short, so that faults cost seconds, not minutes.
const (
	leaseTTL          = 4 * time.Second // --heartbeat-timeout
	heartbeatInterval = time.Second
	backoffBase       = 100 * time.Millisecond
	backoffMax        = 2 * time.Second
	// RecoveryBound is what recovery after the last fault should stay under: twice the lease TTL
	// (a task held by a process that died is reclaimed within one TTL, plus the reaper's tick)
	// plus the backoff cap (the retry waits at most that long).
	RecoveryBound = 2*leaseTTL + backoffMax
	// stuckAfter is how long after the last fault, and after the last task that finished, a
	// task may still be unfinished before it counts as stuck: a hang detector, with room for the
	// four rounds' race-built processes (each child sleeps a second as it exits) sharing two cores.
	stuckAfter = 4 * time.Minute
	taskName   = "chaos"
)

// Config configures a run.
type Config struct {
	Baton string // the baton executable
	// Child is the executable `baton worker` runs per task (as /bin/sh -c Child): a program that
	// calls RunChild when EnvChild is "1". The child user (nobody, when the run is root) must be
	// able to execute it.
	Child string
	Dir   string // the run's directory: databases, logs, the execution log

	Store string // StoreSQLite (one `baton dev`) or StorePostgres (two `baton server` replicas)
	// PostgresURL, with StorePostgres, is a database URL on the PostgreSQL server to use: the run
	// creates a database of its own there, and drops it afterwards.
	PostgresURL string
	// Transport is how workers find tasks: TransportStore (long polls) or a transport whose
	// server the run starts itself, on a spare port, from RedisServer or NATSServer.
	Transport   string
	RedisServer string // the redis-server executable, for TransportRedis
	NATSServer  string // the nats-server executable, for TransportNATS

	Seed     uint64        // of every random choice; print it to replay a run
	Duration time.Duration // how long faults are injected
	Jobs     int           // jobs submitted, spread over Duration
	// TasksPerJob is each job's DAG size; every task depends on up to two earlier ones.
	TasksPerJob int
	Workers     int // `baton worker` processes
	Concurrency int // tasks each worker runs at once
	MaxSleep    time.Duration
	// Pipeline adds the pipeline round (pipeline.go) to the run: the faults and the load go on
	// until it has fed its last events, and its invariants are checked with the jobs'.
	Pipeline bool

	Log io.Writer // progress, one line per fault
}

func (c *Config) withDefaults() error {
	c.Store = cmp.Or(c.Store, StoreSQLite)
	c.Transport = cmp.Or(c.Transport, TransportStore)
	c.Duration = cmp.Or(c.Duration, 30*time.Second)
	c.Jobs = cmp.Or(c.Jobs, 20)
	c.TasksPerJob = cmp.Or(c.TasksPerJob, 30)
	c.Workers = cmp.Or(c.Workers, 3)
	c.Concurrency = cmp.Or(c.Concurrency, 4)
	c.MaxSleep = cmp.Or(c.MaxSleep, 150*time.Millisecond)
	if c.Log == nil {
		c.Log = io.Discard
	}
	switch {
	case c.Baton == "" || c.Child == "" || c.Dir == "":
		return errors.New("chaos: Baton, Child and Dir are required")
	case c.Store != StoreSQLite && c.Store != StorePostgres:
		return fmt.Errorf("chaos: unknown store %q", c.Store)
	case c.Store == StorePostgres && c.PostgresURL == "":
		return errors.New("chaos: the postgres store needs PostgresURL")
	case c.Transport == TransportRedis && c.RedisServer == "", c.Transport == TransportNATS && c.NATSServer == "":
		return fmt.Errorf("chaos: transport %s needs its server's executable", c.Transport)
	case c.Transport != TransportStore && c.Transport != TransportRedis && c.Transport != TransportNATS:
		return fmt.Errorf("chaos: unknown transport %q", c.Transport)
	case c.TasksPerJob > 50:
		return errors.New("chaos: at most 50 tasks per job")
	}
	return nil
}

// Report is what a run saw.
type Report struct {
	Store, Transport string
	Seed             uint64
	Jobs, Tasks      int            // accepted by the API
	Faults           map[string]int // by kind
	Executions       int            // task executions that produced an output
	// DuplicateExecutions are executions beyond the first of a task: at-least-once execution
	// allows them (a worker died, or its lease expired, after the child ran).
	DuplicateExecutions int
	// The invariants: each must be 0.
	DuplicateCompletions int // tasks with more than one "Task Completed" event
	Lost                 int // accepted jobs or tasks the API does not know, or tasks that failed
	Stuck                int // tasks not finished when no task had finished for stuckAfter
	Wrong                int // outputs not from the committed attempt; children handed other outputs than their parents' committed ones
	// Recovery is the time from the restart after the last fault (CrashAll) until the last job
	// finished; Backlog the tasks that were not finished at that restart, and Resumed the time
	// from the restart to the first of them to finish. A Recovery much longer than Resumed is
	// the backlog being worked off, not the faults' aftermath.
	Recovery, Resumed time.Duration
	Backlog           int
	Pipeline          *PipelineReport // with Config.Pipeline
	Problems          []string        // the first few violations, described
}

// OK reports whether every invariant held.
func (r *Report) OK() bool {
	return r.DuplicateCompletions == 0 && r.Lost == 0 && r.Stuck == 0 && r.Wrong == 0 && r.Tasks > 0 &&
		(r.Pipeline == nil || r.Pipeline.ok())
}

// String is the report as one line.
func (r *Report) String() string {
	kinds := make([]string, 0, len(r.Faults))
	total := 0
	for k, n := range r.Faults {
		kinds = append(kinds, fmt.Sprintf("%s:%d", k, n))
		total += n
	}
	slices.Sort(kinds)
	s := fmt.Sprintf("chaos: store=%s transport=%s seed=%d jobs=%d tasks=%d faults=%d(%s) executions=%d duplicate-executions=%d "+
		"duplicate-completions=%d lost=%d stuck=%d wrong=%d recovery=%.1fs backlog=%d resumed=%.1fs",
		r.Store, r.Transport, r.Seed, r.Jobs, r.Tasks, total, strings.Join(kinds, ","), r.Executions, r.DuplicateExecutions,
		r.DuplicateCompletions, r.Lost, r.Stuck, r.Wrong, r.Recovery.Seconds(), r.Backlog, r.Resumed.Seconds())
	if r.Pipeline != nil {
		s += " " + r.Pipeline.String()
	}
	return s
}

func (r *Report) problem(format string, args ...any) {
	if len(r.Problems) < 20 {
		r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
	}
}

// Run runs the processes, the load and the faults, waits for the jobs, and reports.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	r := &run{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)), faults: map[string]int{}}
	defer r.teardown()
	if err := r.setup(ctx); err != nil {
		return nil, err
	}
	fmt.Fprintf(cfg.Log, "chaos: %s/%s seed %d: %d servers, %d workers, %d jobs of %d tasks, faults for %s\n",
		cfg.Store, cfg.Transport, cfg.Seed, len(r.servers), len(r.workers), cfg.Jobs, cfg.TasksPerJob, cfg.Duration)

	// The pipeline round, when there is one, runs beside the load: until it has fed its last
	// events the faults and the load go on, so that the crash-all comes with its last tasks in
	// flight too.
	r.end = time.Now().Add(cfg.Duration)
	r.pipelineFed, r.pipelineDone = make(chan struct{}), make(chan struct{})
	if cfg.Pipeline {
		r.pipeline = newPipelineRound(r)
		pctx, stop := context.WithCancel(ctx)
		defer func() { stop(); <-r.pipelineDone }() // on a failed run, before the teardown
		go func() {
			defer close(r.pipelineDone)
			r.pipeline.run(pctx)
		}()
	} else {
		close(r.pipelineFed)
		close(r.pipelineDone)
	}
	r.load = newLoad(r, rand.New(rand.NewPCG(r.rng.Uint64(), r.rng.Uint64())))
	loadDone := make(chan error, 1)
	go func() { loadDone <- r.load.submit(ctx, cfg.Duration) }()
	if err := r.injectFaults(ctx); err != nil {
		return nil, err
	}
	if err := <-loadDone; err != nil {
		return nil, err
	}
	lastHeal, err := r.crashAll(ctx)
	if err != nil {
		return nil, err
	}
	r.zombies.Wait() // a zombie's worker died in the crash; its SIGCONT goes to the new one, harmlessly
	// Whatever a fault left behind is healed by now: every process runs again.
	rep := &Report{Store: cfg.Store, Transport: cfg.Transport, Seed: cfg.Seed, Faults: r.faults}
	if err := r.verify(ctx, lastHeal, rep); err != nil {
		return nil, err
	}
	return rep, nil
}

// run is one chaos run's processes and state.
type run struct {
	cfg Config
	rng *rand.Rand // the fault injector's; the load has its own

	apiKey  string
	execLog string
	servers []*server
	workers []*worker
	// transport is the run's own Redis or NATS server; nil with the store transport.
	transport    *proc
	transportURL string
	pg           *pgCluster // with StorePostgres
	load         *load
	// end is when the run's Duration ends.
	end time.Time
	// pipeline is the pipeline round (with Config.Pipeline); pipelineFed is closed once it has
	// fed its last events (or stopped), pipelineDone once it is done; both at once without it.
	pipeline                  *pipelineRound
	pipelineFed, pipelineDone chan struct{}

	mu      sync.Mutex
	faults  map[string]int
	zombies sync.WaitGroup // stopped workers not yet woken up
}

// server is one Baton server process and its URLs.
type server struct {
	*proc
	producerURL, internalURL string
	// proxy carries its PostgreSQL connections (StorePostgres), for network faults.
	proxy proxy
}

// worker is one `baton worker` process.
type worker struct {
	*proc
	busy bool // a fault holds it (a zombie); guarded by run.mu
}

// pipelineFaultsFor bounds how long past the run's Duration the faults and the load go on while
// the pipeline round has not fed its last events: its own waits give up sooner when it makes no
// progress.
const pipelineFaultsFor = 5 * time.Minute

// pipelineGoing reports whether the pipeline round has yet to feed its last events, and it is
// not pipelineFaultsFor past the run's Duration: the faults and the load go on until then.
func (r *run) pipelineGoing() bool {
	select {
	case <-r.pipelineFed:
		return false
	default:
		return time.Now().Before(r.end.Add(pipelineFaultsFor))
	}
}

func (r *run) count(kind string) {
	r.mu.Lock()
	r.faults[kind]++
	r.mu.Unlock()
}

func (r *run) logf(format string, args ...any) {
	fmt.Fprintf(r.cfg.Log, "chaos: "+format+"\n", args...)
}

// setup starts the transport's server, the store, the servers and the workers.
func (r *run) setup(ctx context.Context) error {
	if err := os.MkdirAll(r.cfg.Dir, 0o755); err != nil {
		return err
	}
	// The children run as another user when the run is root: they append to the execution log.
	r.execLog = filepath.Join(r.cfg.Dir, "executions.jsonl")
	if err := os.WriteFile(r.execLog, nil, 0o666); err != nil {
		return err
	}
	if err := os.Chmod(r.execLog, 0o666); err != nil {
		return err
	}
	if err := r.startTransport(ctx); err != nil {
		return err
	}
	var err error
	switch r.cfg.Store {
	case StoreSQLite:
		err = r.startDev(ctx)
	case StorePostgres:
		err = r.startReplicas(ctx)
	}
	if err != nil {
		return err
	}
	return r.startWorkers(ctx)
}

// transportArgs are the --transport flags of servers and workers.
func (r *run) transportArgs() []string {
	switch r.cfg.Transport {
	case TransportRedis:
		return []string{"--transport", "redis", "--redis-url", r.transportURL}
	case TransportNATS:
		return []string{"--transport", "nats", "--nats-url", r.transportURL}
	}
	return []string{"--transport", "store"}
}

// serverArgs are the flags every server of the run gets.
func (r *run) serverArgs(producer, internal int) []string {
	args := []string{
		"--listen", fmt.Sprintf("127.0.0.1:%d", producer), "--internal-listen", fmt.Sprintf("127.0.0.1:%d", internal),
		"--heartbeat-timeout", leaseTTL.String(), "--heartbeat-interval", heartbeatInterval.String(),
		"--backoff-base", backoffBase.String(), "--backoff-max", backoffMax.String(),
		"--rate-limit", "0", "--daily-quota", "0", "--shutdown-timeout", "5s",
		"--reconcile-every", "2s", "--reconcile-grace", "2s",
	}
	return append(args, r.transportArgs()...)
}

// newServer makes a server process (not started) on fresh ports.
func (r *run) newServer(name string, args, env []string) (*server, error) {
	producer, err := freePort()
	if err != nil {
		return nil, err
	}
	internal, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &server{producerURL: fmt.Sprintf("http://127.0.0.1:%d", producer), internalURL: fmt.Sprintf("http://127.0.0.1:%d", internal)}
	s.proc = &proc{name: name, path: r.cfg.Baton, args: append(args, r.serverArgs(producer, internal)...), env: env,
		out: filepath.Join(r.cfg.Dir, name+".log"), ready: httpReady(s.producerURL + "/readyz")}
	return s, nil
}

// startDev starts one `baton dev` on a SQLite file.
func (r *run) startDev(ctx context.Context) error {
	r.apiKey = "chaos-" + nonce()
	s, err := r.newServer("server-0", []string{"dev", "--data-dir", filepath.Join(r.cfg.Dir, "data"), "--sink=false", "--metrics-listen="},
		[]string{"BATON_API_KEY=" + r.apiKey})
	if err != nil {
		return err
	}
	r.servers = []*server{s}
	return s.start(ctx)
}

// startWorkers starts the `baton worker` processes, spread over the servers.
func (r *run) startWorkers(ctx context.Context) error {
	tasks := []string{"--task", taskName}
	if r.cfg.Pipeline {
		// The pipeline round's tasks too, from queues of their operators' names. A worker claims
		// from its queues in order (the first with a ready task wins; without --queue, the task
		// names sorted): these come first, or the load's backlog would hold back the round's few
		// tasks for as long as it lasts.
		tasks = []string{"--task", taskName, "--task", feedOperator, "--task", stepOperator,
			"--queue", feedOperator, "--queue", stepOperator, "--queue", taskName}
	}
	for i := range r.cfg.Workers {
		s := r.servers[i%len(r.servers)]
		name := fmt.Sprintf("worker-%d", i)
		args := append([]string{"worker"}, tasks...)
		args = append(args, "--exec", r.cfg.Child,
			"--internal-url", s.internalURL, "--url", s.producerURL, "--worker-id", name,
			"--concurrency", fmt.Sprint(r.cfg.Concurrency), "--poll-wait", "2s", "--shutdown-timeout", "2s",
			"--child-env", EnvChild+"=1", "--child-env", EnvLog+"="+r.execLog,
			// A child built with the race detector (this test program, when the test is) sleeps a
			// second as it exits, for the detector's reports: with hundreds of children a round,
			// that second was most of a task's time.
			"--child-env", "GORACE=atexit_sleep_ms=0",
			// The child is this program, and logs its executions: the sandbox grants both.
			"--child-exec", r.cfg.Child, "--child-write", r.execLog)
		args = append(args, r.transportArgs()...)
		w := &worker{proc: &proc{name: name, path: r.cfg.Baton, args: args, out: filepath.Join(r.cfg.Dir, name+".log")}}
		if err := w.start(ctx); err != nil {
			return err
		}
		r.workers = append(r.workers, w)
	}
	return nil
}

// teardown stops every process and removes what the run made outside its directory.
func (r *run) teardown() {
	for _, w := range r.workers {
		w.stop(5 * time.Second)
	}
	for _, s := range r.servers {
		s.stop(10 * time.Second)
		if s.proxy != nil {
			s.proxy.Close()
		}
	}
	if r.transport != nil {
		r.transport.stop(5 * time.Second)
	}
	if r.pg != nil {
		r.pg.close()
	}
}

// outputs are the tails of every process's output, for a failed run's message.
func (r *run) outputs() string {
	var b strings.Builder
	for _, s := range r.servers {
		fmt.Fprintf(&b, "--- %s:\n%s\n", s.name, s.tail())
	}
	for _, w := range r.workers {
		fmt.Fprintf(&b, "--- %s:\n%s\n", w.name, w.tail())
	}
	return b.String()
}

// proxy is a fault-injecting TCP proxy between a server and PostgreSQL.
type proxy interface {
	SetLatency(time.Duration)
	Reset()
	Partition(on bool)
	Close() error
}
