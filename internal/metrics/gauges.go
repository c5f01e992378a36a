package metrics

import (
	"context"
	"log/slog"
	"time"

	"github.com/baton-dev/baton/internal/store"
)

// DefaultRefreshEvery is how often RefreshLoop counts the tasks, the outbox and the routings
// backpressure holds.
const DefaultRefreshEvery = 15 * time.Second

// Counts is what the periodic gauges are read from: a store.
type Counts interface {
	TaskCounts(ctx context.Context) ([]store.TaskCount, error)
	OutboxBacklog(ctx context.Context) (store.OutboxBacklog, error)
	HeldRoutingSummary(ctx context.Context, p store.HeldSummaryParams) ([]*store.HeldSummary, error)
}

// RefreshLoop sets the tasks and outbox gauges from st at once and then every every (default
// DefaultRefreshEvery) until ctx ends: a scrape reads the last counts and never queries the
// database itself. A failed count is logged and the gauges keep their previous values.
func (m *Metrics) RefreshLoop(ctx context.Context, st Counts, every time.Duration, log *slog.Logger) {
	if m == nil {
		return
	}
	if every <= 0 {
		every = DefaultRefreshEvery
	}
	if log == nil {
		log = slog.Default()
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := m.Refresh(ctx, st); err != nil && ctx.Err() == nil {
			log.WarnContext(ctx, "metrics: counting tasks and outbox failed; the gauges keep their last values", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Refresh sets the tasks and outbox gauges from st once. A queue and state counted before and
// not now is set to 0 rather than dropped, so that graphs fall to zero instead of ending.
func (m *Metrics) Refresh(ctx context.Context, st Counts) error {
	if m == nil {
		return nil
	}
	counts, err := st.TaskCounts(ctx)
	if err != nil {
		return err
	}
	backlog, err := st.OutboxBacklog(ctx)
	if err != nil {
		return err
	}
	held, err := st.HeldRoutingSummary(ctx, store.HeldSummaryParams{})
	if err != nil {
		return err
	}
	m.setTasks(counts)
	total, longest := 0, 0.0
	for _, h := range held {
		total += h.Events
		longest = max(longest, time.Since(h.PausedSince).Seconds())
	}
	m.heldRoutings.Set(float64(total))
	m.pausedJobs.Set(float64(len(held)))
	m.longestPause.Set(longest)
	m.outboxUnsent.Set(float64(backlog.Unsent))
	age := 0.0
	if !backlog.OldestAvailableAt.IsZero() {
		age = max(time.Since(backlog.OldestAvailableAt).Seconds(), 0)
	}
	m.outboxOldest.Set(age)
	return nil
}

// setTasks sets baton_tasks.
func (m *Metrics) setTasks(counts []store.TaskCount) {
	m.tasksMu.Lock()
	defer m.tasksMu.Unlock()
	seen := make(map[[2]string]bool, len(counts))
	for _, c := range counts {
		k := [2]string{c.Queue, c.State}
		seen[k] = true
		m.taskSeries[k] = true
		m.tasks.WithLabelValues(c.Queue, c.State).Set(float64(c.N))
	}
	for k := range m.taskSeries {
		if !seen[k] {
			m.tasks.WithLabelValues(k[0], k[1]).Set(0)
		}
	}
}
