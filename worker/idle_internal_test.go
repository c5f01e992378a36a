package worker

import (
	"testing"
	"time"
)

// The idle rule: a worker stops on an empty claim once nothing has run for the timeout in force,
// never while an attempt runs, and never when no timeout is in force.
func TestIdleness(t *testing.T) {
	t.Parallel()
	d := func(v time.Duration) *time.Duration { return &v }
	secs := func(v float64) *Task {
		return &Task{Pipeline: &PipelineTask{Job: PipelineJob{IdleTimeoutSeconds: &v}}}
	}
	plain := &Task{}
	tests := []struct {
		name  string
		cfg   config
		steps func(i *idleness, clock *time.Time) // what happens before the empty claim
		want  bool
	}{
		{"no timeout: stays", config{}, func(*idleness, *time.Time) {}, false},
		{"0: stops on the first empty claim", config{idleTimeout: d(0)}, func(*idleness, *time.Time) {}, true},
		{"0: not while an attempt runs", config{idleTimeout: d(0)}, func(i *idleness, _ *time.Time) { i.started(plain) }, false},
		{"0: after the attempt ended", config{idleTimeout: d(0)}, func(i *idleness, _ *time.Time) { i.started(plain); i.finished() }, true},
		{"5m: not before 5m of no work", config{idleTimeout: d(5 * time.Minute)}, func(i *idleness, c *time.Time) {
			*c = c.Add(4 * time.Minute)
			i.started(plain)
			i.finished()
			*c = c.Add(4 * time.Minute)
		}, false},
		{"5m: after 5m of no work", config{idleTimeout: d(5 * time.Minute)}, func(i *idleness, c *time.Time) {
			i.started(plain)
			i.finished()
			*c = c.Add(5 * time.Minute)
		}, true},
		{"jobs: stays before the first claim", config{jobIdle: true}, func(*idleness, *time.Time) {}, false},
		{"jobs: the claimed job's 0", config{jobIdle: true}, func(i *idleness, _ *time.Time) { i.started(secs(0)); i.finished() }, true},
		{"jobs: the claimed job's 60s, not yet", config{jobIdle: true}, func(i *idleness, c *time.Time) {
			i.started(secs(60))
			i.finished()
			*c = c.Add(59 * time.Second)
		}, false},
		{"jobs: the newest claim decides", config{jobIdle: true}, func(i *idleness, _ *time.Time) {
			i.started(secs(0))
			i.finished()
			i.started(plain)
			i.finished()
		}, false},
		{"a fixed timeout overrides the jobs'", config{jobIdle: true, idleTimeout: d(time.Hour)}, func(i *idleness, _ *time.Time) {
			i.started(secs(0))
			i.finished()
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := time.Unix(1_700_000_000, 0)
			i := newIdleness(tt.cfg, func() time.Time { return clock })
			tt.steps(i, &clock)
			if got := i.empty(); got != tt.want {
				t.Fatalf("empty() = %v, want %v", got, tt.want)
			}
			select {
			case <-i.stop:
				if !tt.want {
					t.Fatal("stop closed")
				}
			default:
				if tt.want {
					t.Fatal("stop not closed")
				}
			}
		})
	}
}
