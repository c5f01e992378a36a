package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/baton-dev/baton/internal/transport"
	"github.com/baton-dev/baton/internal/transport/dial"
)

// Fault kinds.
const (
	KillWorker    = "kill-worker"    // SIGKILL a `baton worker` (its children die with it), start it again
	ZombieWorker  = "zombie-worker"  // SIGSTOP a worker past its lease, then SIGCONT: it wakes up and reports late
	KillServer    = "kill-server"    // SIGKILL a server, start it again
	PGTerminate   = "pg-terminate"   // pg_terminate_backend every connection to the run's database
	NetLatency    = "net-latency"    // delay everything between a server and PostgreSQL
	NetReset      = "net-reset"      // reset every connection between a server and PostgreSQL
	NetPartition  = "net-partition"  // cut a server off PostgreSQL for a while
	KillTransport = "kill-transport" // SIGKILL the Redis or NATS server, start it again
	DupWakeups    = "dup-wakeups"    // publish duplicated, reordered and stale wake-ups
	// CrashAll is the last fault of every run: every process at once, right after the last job
	// was accepted, so that recovery is measured from a state with work in flight.
	CrashAll = "crash-all"
)

// fault is one kind of fault and how to inject it: inject returns once the fault is healed, or
// (a zombie) once it is under way, to heal by itself within the run's zombies.
type fault struct {
	kind   string
	inject func(ctx context.Context) error
}

// faultsOf are the faults that apply to the run's topology.
func (r *run) faultsOf() []fault {
	fs := []fault{
		{KillWorker, r.killWorker},
		{ZombieWorker, r.zombieWorker},
		{KillServer, r.killServer},
	}
	if r.pg != nil {
		fs = append(fs,
			fault{PGTerminate, r.pgTerminate},
			fault{NetLatency, r.netLatency},
			fault{NetReset, r.netReset},
			fault{NetPartition, r.netPartition})
	}
	if r.transport != nil {
		fs = append(fs, fault{KillTransport, r.killTransport}, fault{DupWakeups, r.dupWakeups})
	}
	return fs
}

// injectFaults injects random faults, one after the other, for the run's Duration, and then
// while the pipeline round has yet to feed its last events (pipelineGoing). It returns when the
// last one has healed, except for zombies still stopped: r.zombies waits for those.
func (r *run) injectFaults(ctx context.Context) error {
	faults := r.faultsOf()
	for time.Now().Before(r.end) || r.pipelineGoing() {
		r.pause(ctx, 300*time.Millisecond, 1500*time.Millisecond)
		if err := ctx.Err(); err != nil {
			return err
		}
		f := faults[r.rng.IntN(len(faults))]
		if err := f.inject(ctx); err != nil {
			return fmt.Errorf("chaos: fault %s: %w\n%s", f.kind, err, r.outputs())
		}
		r.count(f.kind)
	}
	return nil
}

// crashAll SIGKILLs every process of the run at once, starts them all again, and returns when
// they are up.
func (r *run) crashAll(ctx context.Context) (time.Time, error) {
	r.logf("%s: SIGKILL every process", CrashAll)
	var procs []*proc
	if r.transport != nil {
		procs = append(procs, r.transport)
	}
	for _, s := range r.servers {
		procs = append(procs, s.proc)
	}
	for _, w := range r.workers {
		procs = append(procs, w.proc)
	}
	for _, p := range procs {
		p.kill()
	}
	r.pause(ctx, 200*time.Millisecond, time.Second)
	for _, p := range procs { // the transport first, then the servers, then the workers
		if err := p.start(ctx); err != nil {
			return time.Time{}, fmt.Errorf("chaos: %s: %w\n%s", CrashAll, err, r.outputs())
		}
	}
	r.count(CrashAll)
	return time.Now(), nil
}

// pause sleeps for a random duration in [min, max).
func (r *run) pause(ctx context.Context, min, max time.Duration) {
	d := min + time.Duration(r.rng.Int64N(int64(max-min)))
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// idleWorker picks a worker no other fault holds, and marks it held.
func (r *run) idleWorker() *worker {
	r.mu.Lock()
	defer r.mu.Unlock()
	var idle []*worker
	for _, w := range r.workers {
		if !w.busy {
			idle = append(idle, w)
		}
	}
	if len(idle) == 0 {
		return nil
	}
	w := idle[r.rng.IntN(len(idle))]
	w.busy = true
	return w
}

func (r *run) release(w *worker) {
	r.mu.Lock()
	w.busy = false
	r.mu.Unlock()
}

func (r *run) killWorker(ctx context.Context) error {
	w := r.idleWorker()
	if w == nil {
		return nil
	}
	defer r.release(w)
	r.logf("%s: SIGKILL %s", KillWorker, w.name)
	w.kill()
	r.pause(ctx, 0, time.Second)
	return w.start(ctx)
}

// zombieWorker stops a worker for longer than a lease, so that its tasks are reclaimed and run
// elsewhere, then lets it go on: it reports what it finished, late, and must be refused.
func (r *run) zombieWorker(ctx context.Context) error {
	w := r.idleWorker()
	if w == nil {
		return nil
	}
	stopFor := leaseTTL + time.Second + time.Duration(r.rng.Int64N(int64(2*time.Second)))
	r.logf("%s: SIGSTOP %s for %s", ZombieWorker, w.name, stopFor.Round(time.Millisecond))
	if err := w.signal(syscall.SIGSTOP); err != nil {
		r.release(w)
		if errors.Is(err, os.ErrProcessDone) {
			// The worker exited by itself (one started while the transport was down gives up):
			// there is nothing to stop, and the fault is skipped.
			r.logf("%s: %s has exited; skipped", ZombieWorker, w.name)
			return nil
		}
		return err
	}
	r.zombies.Add(1)
	go func() {
		defer r.zombies.Done()
		defer r.release(w)
		select {
		case <-ctx.Done():
		case <-time.After(stopFor):
		}
		_ = w.signal(syscall.SIGCONT)
	}()
	return nil
}

func (r *run) killServer(ctx context.Context) error {
	s := r.servers[r.rng.IntN(len(r.servers))]
	r.logf("%s: SIGKILL %s", KillServer, s.name)
	s.kill()
	r.pause(ctx, 0, 1500*time.Millisecond)
	return s.start(ctx)
}

func (r *run) killTransport(ctx context.Context) error {
	r.logf("%s: SIGKILL %s", KillTransport, r.transport.name)
	r.transport.kill()
	r.pause(ctx, 500*time.Millisecond, 2*time.Second)
	return r.transport.start(ctx)
}

// dupWakeups publishes, in a shuffled order, two wake-ups for every task of a few accepted
// jobs, whatever state the tasks are in: a transport may duplicate, reorder and delay its
// messages, and none of that may make a task run twice at once or complete twice.
func (r *run) dupWakeups(ctx context.Context) error {
	jobs := r.load.jobs()
	if len(jobs) == 0 {
		return nil
	}
	tr, err := dial.Open(ctx, r.cfg.Transport, r.transportURL, dial.DefaultNamespace)
	if err != nil {
		return err
	}
	defer tr.Close()
	c := r.clientOf(r.servers[0])
	var msgs []transport.Wakeup
	for range 3 {
		j := jobs[r.rng.IntN(len(jobs))]
		got, err := c.GetJob(ctx, j.id)
		if err != nil {
			return nil // the server is busy recovering; this fault is a bonus, not the point
		}
		for _, t := range got.Tasks {
			for range 2 {
				msgs = append(msgs, transport.Wakeup{ID: int64(len(msgs) + 1), Queue: taskName, TaskID: t.ID})
			}
		}
	}
	r.rng.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
	r.logf("%s: %d wake-ups", DupWakeups, len(msgs))
	pubCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	tr.Publish(pubCtx, msgs) // what it cannot publish is not published: fine either way
	return nil
}
