// Backpressure: pipeline jobs' backlogs and the routings held back while they are paused.

package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/sqldb/sqltext"
)

// PipelineJobBacklog implements store.Reader.
func (q q) PipelineJobBacklog(ctx context.Context, p store.PipelineJobBacklogParams) (store.Backlog, error) {
	var (
		b      store.Backlog
		oldest sql.NullInt64
	)
	// The queue's pending tasks (the partial index tasks_ready), each with its own job looked up
	// by id: the pipeline job's history of jobs is never read. The job's lookup names nothing but
	// its id, so that no planner, even one without statistics of freshly grown tables, reaches
	// for the index of the pipeline's jobs instead (a join did, and read every job per task).
	err := q.queryRow(ctx, `SELECT COUNT(*), MIN(CASE WHEN t.available_at <= $5 THEN t.available_at END)
		FROM tasks t WHERE t.queue = $4 AND t.status = 'pending'
		AND (SELECT j.tenant = $1 AND j.pipeline = $2 AND j.pipeline_job = $3 FROM jobs j WHERE j.id = t.job_id)`,
		p.Job.Tenant, p.Job.Pipeline, p.Job.Job, p.Queue, p.Now.UnixMilli()).Scan(&b.Depth, &oldest)
	if err != nil {
		return store.Backlog{}, fmt.Errorf("backlog of pipeline job %s.%s: %w", p.Job.Pipeline, p.Job.Job, err)
	}
	b.OldestReadyAt = sqltext.Time(oldest)
	return b, nil
}

// HeldRoutingSummary implements store.Reader.
func (q q) HeldRoutingSummary(ctx context.Context, p store.HeldSummaryParams) ([]*store.HeldSummary, error) {
	where, args := "", []any{}
	if p.Tenant != "" {
		where, args = "WHERE tenant = $1 AND pipeline = $2", []any{p.Tenant, p.Pipeline}
	}
	rows, err := q.query(ctx, `SELECT tenant, pipeline, job, COUNT(*), SUM(events), MIN(held_at), MIN(paused_since)
		FROM held_routings `+where+` GROUP BY tenant, pipeline, job ORDER BY tenant, pipeline, job`, args...)
	if err != nil {
		return nil, fmt.Errorf("summarize held routings: %w", err)
	}
	return collect(rows, func(row rowScanner) (*store.HeldSummary, error) {
		var (
			s              store.HeldSummary
			oldest, paused int64
		)
		if err := row.Scan(&s.Tenant, &s.Pipeline, &s.Job, &s.Held, &s.Events, &oldest, &paused); err != nil {
			return nil, err
		}
		s.OldestHeldAt, s.PausedSince = sqltext.UnixMilli(oldest), sqltext.UnixMilli(paused)
		return &s, nil
	})
}

// heldColumns are the columns scanHeld reads.
const heldColumns = `id, tenant, pipeline, version, job, input_index, key, event, events, held_at, paused_since`

func scanHeld(row rowScanner) (*store.HeldRouting, error) {
	var (
		h            store.HeldRouting
		event        string
		held, paused int64
	)
	if err := row.Scan(&h.ID, &h.Tenant, &h.Pipeline, &h.Version, &h.Job, &h.InputIndex, &h.Key, &event,
		&h.Events, &held, &paused); err != nil {
		return nil, notFound(err)
	}
	h.Event, h.HeldAt, h.PausedSince = []byte(event), sqltext.UnixMilli(held), sqltext.UnixMilli(paused)
	return &h, nil
}

// HeldRoutingList implements store.Reader.
func (q q) HeldRoutingList(ctx context.Context, k store.PipelineJobKey, limit int) ([]*store.HeldRouting, error) {
	rows, err := q.query(ctx, `SELECT `+heldColumns+`
		FROM held_routings WHERE tenant = $1 AND pipeline = $2 AND job = $3 ORDER BY id LIMIT $4`,
		k.Tenant, k.Pipeline, k.Job, limit)
	if err != nil {
		return nil, fmt.Errorf("list held routings of %s.%s: %w", k.Pipeline, k.Job, err)
	}
	return collect(rows, scanHeld)
}

// HeldRoutingNewest implements store.Reader.
func (q q) HeldRoutingNewest(ctx context.Context, k store.PipelineJobKey) (*store.HeldRouting, error) {
	h, err := scanHeld(q.queryRow(ctx, `SELECT `+heldColumns+`
		FROM held_routings WHERE tenant = $1 AND pipeline = $2 AND job = $3 ORDER BY id DESC LIMIT 1`,
		k.Tenant, k.Pipeline, k.Job))
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("newest held routing of %s.%s: %w", k.Pipeline, k.Job, err)
	}
	return h, err
}

// HeldRoutingByKey implements store.Reader.
func (q q) HeldRoutingByKey(ctx context.Context, k store.PipelineJobKey, key string) (*store.HeldRouting, error) {
	h, err := scanHeld(q.queryRow(ctx, `SELECT `+heldColumns+`
		FROM held_routings WHERE tenant = $1 AND pipeline = $2 AND job = $3 AND key = $4 ORDER BY id DESC LIMIT 1`,
		k.Tenant, k.Pipeline, k.Job, key))
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("held routing %s of %s.%s: %w", key, k.Pipeline, k.Job, err)
	}
	return h, err
}

// HeldRoutingInsertMany implements store.Tx: one statement per routing, so that the IDs follow
// the order given (a router holds at most a batch of them per transaction).
func (t *tx) HeldRoutingInsertMany(ctx context.Context, hs []*store.HeldRouting) error {
	for _, h := range hs {
		h.Events = max(h.Events, 1)
		err := t.queryRow(ctx, `INSERT INTO held_routings (tenant, pipeline, version, job, input_index, key, event,
			events, held_at, paused_since) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING id`,
			h.Tenant, h.Pipeline, h.Version, h.Job, h.InputIndex, h.Key, string(h.Event), h.Events, h.HeldAt.UnixMilli(),
			h.PausedSince.UnixMilli()).Scan(&h.ID)
		if err != nil {
			return fmt.Errorf("hold routing of %s.%s: %w", h.Pipeline, h.Job, err)
		}
	}
	return nil
}

// HeldRoutingCoalesce implements store.Tx.
func (t *tx) HeldRoutingCoalesce(ctx context.Context, h *store.HeldRouting) error {
	h.Events = max(h.Events, 1)
	res, err := t.exec(ctx, "UPDATE held_routings SET event = $1, events = $2 WHERE id = $3", string(h.Event), h.Events, h.ID)
	if err != nil {
		return fmt.Errorf("coalesce into held routing %d: %w", h.ID, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return fmt.Errorf("held routing %d: %w", h.ID, store.ErrNotFound)
	}
	return nil
}

// HeldRoutingDelete implements store.Tx.
func (t *tx) HeldRoutingDelete(ctx context.Context, ids []int64) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	n, err := t.execIDs(ctx, "DELETE FROM held_routings WHERE id = ANY($1)", "DELETE FROM held_routings WHERE id IN (", ids)
	if err != nil {
		return int(n), fmt.Errorf("delete held routings: %w", err)
	}
	return int(n), nil
}
