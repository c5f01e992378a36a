package bench

import (
	"encoding/json"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/client"
)

func TestBenchShapes(t *testing.T) {
	t.Parallel()
	edges := func(tasks []client.Task) string {
		var b strings.Builder
		for _, tk := range tasks {
			b.WriteString(tk.TaskID + "<" + strings.Join(tk.DependsOn, ",") + " ")
		}
		return strings.TrimSpace(b.String())
	}
	for _, c := range []struct {
		shape string
		n     int
		want  string
	}{
		{Flat, 3, "t0< t1< t2<"},
		{Chain, 4, "t0< t1<t0 t2<t1 t3<t2"},
		{Fanout, 4, "t0< t1<t0 t2<t0 t3<t0"},
		{Diamond, 5, "t0< t1<t0 t2<t0 t3<t0 t4<t1,t2,t3"},
		{Diamond, 2, "t0< t1<t0"}, // too small for a diamond: what fits
		{Diamond, 1, "t0<"},
		{Chain, 1, "t0<"},
	} {
		if got := edges(shapeTasks(c.shape, c.n, "x", "")); got != c.want {
			t.Errorf("%s of %d: %s, want %s", c.shape, c.n, got, c.want)
		}
	}
}

// A DAG larger than a job is several jobs of its shape, the last one holding the rest.
func TestBenchJobsSplitTheDAG(t *testing.T) {
	t.Parallel()
	jobs, err := buildJobs(Diamond, 250, 100, "bench-x", "push", "run")
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int
	for i, body := range jobs {
		var req client.SubmitJobRequest
		if err := json.Unmarshal(body, &req); err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, len(req.Tasks))
		sink := req.Tasks[len(req.Tasks)-1]
		if len(sink.DependsOn) != len(req.Tasks)-2 || sink.Runtime != "push" || sink.Name != "bench-x" {
			t.Errorf("job %d: sink %+v", i, sink)
		}
		if want := "run-" + string(rune('0'+i)); req.Name != want {
			t.Errorf("job %d named %q, want %q", i, req.Name, want)
		}
	}
	if !slices.Equal(sizes, []int{100, 100, 50}) {
		t.Errorf("job sizes %v", sizes)
	}
}

func TestBenchPercentilesAreNearestRank(t *testing.T) {
	t.Parallel()
	if percentiles(nil) != nil {
		t.Error("percentiles of nothing should be nil (n/a)")
	}
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	if got := *percentiles(ds); got != (Latency{P50: 50, P95: 95, P99: 99, Samples: 100}) {
		t.Errorf("1..100 ms: %+v", got)
	}
	if got := *percentiles([]time.Duration{1500 * time.Microsecond}); got != (Latency{P50: 1.5, P95: 1.5, P99: 1.5, Samples: 1}) {
		t.Errorf("one sample: %+v", got)
	}
}

// A hand-off runs from the acknowledgement of the child's last parent; a child got before that
// acknowledgement arrived counts zero, and roots count nothing.
func TestBenchHandoffFromTheLastParent(t *testing.T) {
	t.Parallel()
	r := newRecorder(4)
	t0 := time.Now()
	r.started("id-a", ref{"j", "a"}, nil, t0)
	r.started("id-b", ref{"j", "b"}, nil, t0)
	r.completed(ref{"j", "a"}, t0.Add(1*time.Millisecond))
	r.completedID("id-b", t0.Add(3*time.Millisecond))
	r.completedID("id-b", t0.Add(9*time.Millisecond)) // a repeated report: not a second completion
	r.started("id-c", ref{"j", "c"}, []string{"a", "b"}, t0.Add(7*time.Millisecond))
	r.started("id-d", ref{"j", "d"}, []string{"a"}, t0)
	r.completed(ref{"j", "c"}, t0.Add(8*time.Millisecond))
	select {
	case <-r.done:
		t.Fatal("done after 3 of 4 tasks")
	default:
	}
	r.completed(ref{"j", "d"}, t0.Add(10*time.Millisecond))
	<-r.done
	if got := *r.handoffLatency(); got.Samples != 2 || got.P50 != 0 || got.P99 != 4 {
		t.Errorf("hand-offs %+v, want 0 ms and 4 ms", got)
	}
	if !r.lastAck().Equal(t0.Add(10 * time.Millisecond)) {
		t.Errorf("last acknowledgement %v", r.lastAck().Sub(t0))
	}
}

func TestBenchReadsProcStats(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc on this system")
	}
	busy := time.Now().Add(30 * time.Millisecond)
	for time.Now().Before(busy) {
	}
	st, err := ReadProcStats(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if st.CPUSeconds <= 0 || st.PeakRSSBytes < 1<<20 {
		t.Errorf("%+v", st)
	}
	if _, err := ReadProcStats(1 << 30); err == nil {
		t.Error("no error for a process that does not exist")
	}
}

func TestBenchConfigValidate(t *testing.T) {
	t.Parallel()
	ok := Config{Tasks: 1, DAG: Flat, Via: ViaSDK, Workers: 1, Batch: 1, JobSize: 1}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		change func(*Config)
		want   string
	}{
		{func(c *Config) { c.DAG = "zigzag" }, `--dag "zigzag"`},
		{func(c *Config) { c.Tasks = 0 }, "--tasks must be at least 1"},
		{func(c *Config) { c.JobSize = 0 }, "--job-size must be at least 1"},
		{func(c *Config) { c.Batch = 0 }, "--batch must be at least 1"},
		{func(c *Config) { c.Via = ViaInternal }, "--via internal needs --transport redis or --transport nats"},
		{func(c *Config) { c.Via, c.Transport = ViaInternal, "store" }, "--via internal needs"},
		{func(c *Config) { c.Rate = -1 }, "--rate must be 0 (no limit) or a number of tasks per second above 0, got -1"},
		{func(c *Config) { c.Rate = math.NaN() }, "--rate must be 0 (no limit) or a number of tasks per second above 0, got NaN"},
		{func(c *Config) { c.Rate = math.Inf(1) }, "--rate must be 0 (no limit) or a number of tasks per second above 0, got +Inf"},
	} {
		cfg := ok
		c.change(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", cfg, err, c.want)
		}
	}
	ok.Via, ok.Transport = ViaInternal, "nats"
	if err := ok.Validate(); err != nil {
		t.Error(err)
	}
	for _, rate := range []float64{0, 0.5, 2000} {
		ok.Rate = rate
		if err := ok.Validate(); err != nil {
			t.Errorf("--rate %v: %v", rate, err)
		}
	}
}
