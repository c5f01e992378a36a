package specs

import (
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/store"
)

func TestBackpressureRule(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	for _, c := range []struct {
		name    string
		lim     Limits
		backlog store.Backlog
		full    bool
		room    int
	}{
		{"below the depth", Limits{Depth: 10}, store.Backlog{Depth: 9}, false, 0},
		{"at the depth", Limits{Depth: 10}, store.Backlog{Depth: 10}, true, 0},
		{"at the low-water mark: nothing released", Limits{Depth: 10}, store.Backlog{Depth: 5}, false, 0},
		{"below the low-water mark: refill to the depth", Limits{Depth: 10}, store.Backlog{Depth: 4}, false, 6},
		{"empty", Limits{Depth: 10}, store.Backlog{}, false, 10},
		{"depth 1 releases when empty", Limits{Depth: 1}, store.Backlog{}, false, 1},
		{"depth 1, one queued", Limits{Depth: 1}, store.Backlog{Depth: 1}, true, 0},
		{"depth 3: low water 2", Limits{Depth: 3}, store.Backlog{Depth: 1}, false, 2},
		{"too old", Limits{Age: time.Minute}, store.Backlog{Depth: 1, OldestReadyAt: ago(time.Minute)}, true, 0},
		{"young enough: release all", Limits{Age: time.Minute}, store.Backlog{Depth: 1, OldestReadyAt: ago(59 * time.Second)}, false, -1},
		{"only backing off: no age", Limits{Age: time.Minute}, store.Backlog{Depth: 5}, false, -1},
		{"old though shallow", Limits{Depth: 10, Age: time.Minute}, store.Backlog{Depth: 1, OldestReadyAt: ago(time.Hour)}, true, 0},
		{"no Limits", Limits{}, store.Backlog{Depth: 1 << 20, OldestReadyAt: ago(time.Hour)}, false, -1},
	} {
		if got := c.lim.Full(c.backlog, now); got != c.full {
			t.Errorf("%s: full = %v, want %v", c.name, got, c.full)
		}
		if got := c.lim.Room(c.backlog, now); got != c.room {
			t.Errorf("%s: room = %d, want %d", c.name, got, c.room)
		}
	}
}
