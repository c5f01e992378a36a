package dispatch_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jonboulle/clockwork"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/dispatch/dispatchtest"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

const testTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// spansNamed returns the ended spans called name.
func spansNamed(exp *tracetest.InMemoryExporter, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// A job's traceparent is kept on each of its tasks, added ones included, and comes back with
// every claim; with group commit off each transaction of a traced caller is a span, a child of
// the caller's, and the transactions of callers without a span are none.
func TestTrace_TraceparentReachesClaimsAndTransactionsAreSpans(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	e := newEnv(t, storetest.OpenSQLite(t), func(c *dispatch.Config) {
		c.TracerProvider, c.GroupCommit.Off = tp, true
	})
	ctx, caller := tp.Tracer("test").Start(e.Ctx, "caller")
	res, err := e.D.CreateJob(ctx, dispatch.CreateJobParams{Tenant: tenant, Tasks: []lifecycle.TaskSpec{spec("a"), spec("b", "a")}, Traceparent: testTraceparent})
	caller.End()
	if err != nil {
		t.Fatal(err)
	}
	if res.Job.Traceparent != testTraceparent || e.Job(res.Job.ID).Traceparent != testTraceparent {
		t.Fatalf("job's traceparent %q (stored %q), want %q", res.Job.Traceparent, e.Job(res.Job.ID).Traceparent, testTraceparent)
	}
	if _, err := e.D.AddTasks(e.Ctx, dispatch.AddTasksParams{Tenant: tenant, JobID: res.Job.ID, Tasks: []lifecycle.TaskSpec{spec("c")}}); err != nil {
		t.Fatal(err)
	}
	claims, err := e.D.ClaimNext(ctx, dispatch.ClaimNextParams{Queues: []string{"work"}, WorkerID: "w", Limit: 10})
	if err != nil || len(claims) != 2 {
		t.Fatalf("ClaimNext: %d claims, %v; want a and c", len(claims), err)
	}
	for _, c := range claims {
		if c.Task.Traceparent != testTraceparent {
			t.Errorf("claim of %s: traceparent %q, want the job's %q", c.Task.Key, c.Task.Traceparent, testTraceparent)
		}
	}
	e.Succeed(claims[0])
	if b := e.Claim(res.Job, "b"); b.Task.Traceparent != testTraceparent {
		t.Errorf("claim of b: traceparent %q, want the job's", b.Task.Traceparent)
	}

	untraced := e.Submit(spec("u"))
	if u := e.Claim(untraced, "u"); u.Task.Traceparent != "" || e.Job(untraced.ID).Traceparent != "" {
		t.Errorf("a job submitted without a traceparent has %q (task) / %q (job)", u.Task.Traceparent, e.Job(untraced.ID).Traceparent)
	}

	// The caller's two transitions (the job, the claim) are spans, children of its span; the
	// others, whose callers have no span, are not.
	txs := spansNamed(exp, dispatch.SpanTransaction)
	if len(txs) != 2 {
		t.Fatalf("%d transaction spans, want 2: one per transition of the traced caller", len(txs))
	}
	for _, tx := range txs {
		if tx.Parent.SpanID() != caller.SpanContext().SpanID() || tx.SpanContext.TraceID() != caller.SpanContext().TraceID() {
			t.Errorf("a transaction span has parent %v, want the caller's span %v", tx.Parent.SpanID(), caller.SpanContext().SpanID())
		}
	}
	if n := len(spansNamed(exp, dispatch.SpanGroupCommit)); n != 0 {
		t.Errorf("%d group commit spans with group commit off", n)
	}
}

// A group commit is one span with the batch's size, a child of its first transition's caller and
// linked to the other callers' spans.
func TestTrace_GroupCommitIsOneSpanWithItsBatchSize(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	st := storetest.OpenSQLite(t)
	gate := &gatedStore{Store: st}
	b := &batches{}
	d, err := dispatch.New(gate, dispatch.Config{Clock: clockwork.NewFakeClockAt(epoch), Jitter: func() float64 { return 0.5 },
		Logger: quiet, TracerProvider: tp, GroupCommit: dispatch.GroupCommit{Committers: 1, Observe: b.observe}})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{&dispatchtest.Env{T: t, Ctx: context.Background(), Store: st, D: d}}
	job := e.Submit(spec("a"), spec("c"), spec("x"))
	a, c, x := e.Claim(job, "a"), e.Claim(job, "c"), e.Claim(job, "x")

	// Hold the committer with a heartbeat, then queue both reports behind it: one batch.
	gate.close()
	var wg sync.WaitGroup
	wg.Go(func() {
		_, _ = d.Heartbeat(e.Ctx, dispatch.HeartbeatParams{TaskID: x.Task.ID, Attempt: 1, LeaseToken: x.Task.LeaseToken})
	})
	gate.waitHeld(t)
	callers := make([]trace.SpanContext, 2)
	for i, cl := range []*dispatch.Claim{a, c} {
		ctx, span := tp.Tracer("test").Start(e.Ctx, "report")
		callers[i] = span.SpanContext()
		wg.Go(func() {
			defer span.End()
			if _, err := d.Complete(ctx, dispatch.CompleteParams{TaskID: cl.Task.ID, Attempt: 1, LeaseToken: cl.Task.LeaseToken,
				Outcome: store.OutcomeSucceeded}); err != nil {
				t.Error(err)
			}
		})
		waitQueued(t, d, i+1)
	}
	gate.open()
	wg.Wait()
	if b.max() != 2 {
		t.Fatalf("the reports were not committed in one batch (batch sizes %v)", b.sizes)
	}
	groups := spansNamed(exp, dispatch.SpanGroupCommit)
	if len(groups) != 1 {
		t.Fatalf("%d group commit spans, want 1", len(groups))
	}
	g := groups[0]
	size := -1
	for _, kv := range g.Attributes {
		if kv.Key == dispatch.AttrBatchSize {
			size = int(kv.Value.AsInt64())
		}
	}
	if size != 2 {
		t.Errorf("group commit span: %s = %d, want 2", dispatch.AttrBatchSize, size)
	}
	first, other := callers[0], callers[1]
	if g.Parent.SpanID() != first.SpanID() {
		first, other = other, first
	}
	if g.Parent.SpanID() != first.SpanID() {
		t.Errorf("group commit span's parent %v is neither caller's span (%v)", g.Parent.SpanID(), callers)
	}
	if len(g.Links) != 1 || g.Links[0].SpanContext.SpanID() != other.SpanID() {
		t.Errorf("group commit span's links %v, want the other caller's span %v", g.Links, other.SpanID())
	}
}
