// The dispatcher's path through a task: what is ready, claims, completions, the release of
// children and the reaper's due tasks. The batches are set-based statements, one for many rows,
// so that a batch costs a handful of round trips instead of several per task.

package sqldb

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/sqldb/sqltext"
)

// notAtCap leaves out the tasks whose concurrency key has as many tasks running as its limit:
// they are not claimable until one of those ends (see claimLimited).
const notAtCap = ` AND (concurrency_key IS NULL OR concurrency_limit > (SELECT COUNT(*) FROM tasks r
		WHERE r.concurrency_key = tasks.concurrency_key AND r.status = 'running'))`

// TaskListReadyIDs implements store.Tx.
func (t *tx) TaskListReadyIDs(ctx context.Context, p store.TaskListReadyIDsParams) ([]string, error) {
	ids, err := t.ids(ctx, `SELECT id FROM tasks WHERE status = 'pending' AND queue = $1
		AND available_at <= $2 AND runtime = 'pull'`+notAtCap+` ORDER BY priority DESC, available_at, seq LIMIT $3`+t.d.LockSkip,
		p.Queue, p.Now.UnixMilli(), p.Limit)
	if err != nil {
		return nil, fmt.Errorf("ready tasks of %s: %w", p.Queue, err)
	}
	return ids, nil
}

// TaskListReadyPushIDs implements store.Tx.
func (t *tx) TaskListReadyPushIDs(ctx context.Context, p store.TaskListReadyPushIDsParams) ([]string, error) {
	deliverable, args := pushDeliverable(p.Targets, 3)
	ids, err := t.ids(ctx, `SELECT id FROM tasks WHERE status = 'pending' AND runtime = 'push'
		AND available_at <= $1`+deliverable+notAtCap+` ORDER BY priority DESC, available_at, seq LIMIT $2`+t.d.LockSkip,
		append([]any{p.Now.UnixMilli(), p.Limit}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("ready push tasks: %w", err)
	}
	return ids, nil
}

// pushDeliverable is the condition that keeps the push tasks a deliverer with targets may
// deliver (store.TaskListReadyPushIDsParams), with its arguments, numbered from first.
func pushDeliverable(targets []string, first int) (string, []any) {
	if len(targets) == 0 {
		return ` AND route IS NULL`, nil
	}
	return ` AND (route IS NULL OR name IN (` + sqltext.Placeholders(first, len(targets)) + `))`, sqltext.Args(targets)
}

// TaskNextAvailableAt implements store.Reader.
func (q q) TaskNextAvailableAt(ctx context.Context, queues []string) (time.Time, bool, error) {
	if len(queues) == 0 {
		return time.Time{}, false, nil
	}
	var at sql.NullInt64
	err := q.queryRow(ctx, `SELECT min(available_at) FROM tasks WHERE status = 'pending'
		AND runtime = 'pull' AND queue IN (`+sqltext.Placeholders(1, len(queues))+`)`+notAtCap, sqltext.Args(queues)...).Scan(&at)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("next available: %w", err)
	}
	return sqltext.Time(at), at.Valid, nil
}

// TaskNextPushAvailableAt implements store.Reader.
func (q q) TaskNextPushAvailableAt(ctx context.Context, targets []string) (time.Time, bool, error) {
	var at sql.NullInt64
	deliverable, args := pushDeliverable(targets, 1)
	err := q.queryRow(ctx, `SELECT min(available_at) FROM tasks WHERE status = 'pending' AND runtime = 'push'`+deliverable+notAtCap, args...).Scan(&at)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("next push available: %w", err)
	}
	return sqltext.Time(at), at.Valid, nil
}

// TaskReadyCounts implements store.Reader.
func (q q) TaskReadyCounts(ctx context.Context, before time.Time) (map[string]int, error) {
	counts := map[string]int{}
	err := q.each(ctx, "ready counts", `SELECT queue, count(*) FROM tasks WHERE status = 'pending'
		AND runtime = 'pull' AND available_at <= $1 GROUP BY queue`, []any{before.UnixMilli()}, func(rows *sql.Rows) error {
		var (
			queue string
			n     int
		)
		if err := rows.Scan(&queue, &n); err != nil {
			return fmt.Errorf("ready counts: %w", err)
		}
		counts[queue] = n
		return nil
	})
	if err != nil {
		return nil, err
	}
	return counts, nil
}

// TaskListOldestReady implements store.Reader.
func (q q) TaskListOldestReady(ctx context.Context, p store.TaskListOldestReadyParams) ([]string, error) {
	ids, err := q.ids(ctx, `SELECT id FROM tasks WHERE status = 'pending' AND queue = $1
		AND runtime = 'pull' AND available_at <= $2 ORDER BY available_at, seq LIMIT $3`,
		p.Queue, p.Before.UnixMilli(), p.Limit)
	if err != nil {
		return nil, fmt.Errorf("oldest ready of %s: %w", p.Queue, err)
	}
	return ids, nil
}

// TaskClaim implements store.Tx. The WHERE clause is the fence: of two claims racing for one
// task, the second finds it no longer pending.
func (t *tx) TaskClaim(ctx context.Context, p store.ClaimTaskParams) (*store.Task, bool, error) {
	tasks, err := t.TaskClaimMany(ctx, []store.ClaimTaskParams{p})
	if err != nil || len(tasks) == 0 {
		return nil, false, err
	}
	return tasks[0], true, nil
}

// TaskClaimMany implements store.Tx.
func (t *tx) TaskClaimMany(ctx context.Context, ps []store.ClaimTaskParams) ([]*store.Task, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	p0 := ps[0]
	for _, p := range ps {
		if !p.Now.Equal(p0.Now) || cmp.Or(p.Runtime, "pull") != cmp.Or(p0.Runtime, "pull") {
			return nil, fmt.Errorf("claim tasks: one time and runtime per call")
		}
	}
	// Tasks without a concurrency limit, the common case, in one statement.
	claimed, err := t.claimUpdate(ctx, ps, false)
	if err != nil || len(claimed) == len(ps) {
		return claimed, err
	}
	got := make(map[string]bool, len(claimed))
	for _, c := range claimed {
		got[c.ID] = true
	}
	var rest []store.ClaimTaskParams
	for _, p := range ps {
		if !got[p.ID] {
			rest = append(rest, p)
		}
	}
	limited, err := t.claimLimited(ctx, rest)
	return append(claimed, limited...), err
}

// claimUpdate claims the claimable tasks of ps: with limited, only tasks with a concurrency key
// (whose limit the caller has checked), else only tasks without one.
func (t *tx) claimUpdate(ctx context.Context, ps []store.ClaimTaskParams, limited bool) ([]*store.Task, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	p0 := ps[0]
	runtime := cmp.Or(p0.Runtime, "pull")
	keyed := "concurrency_key IS NULL"
	if limited {
		keyed = "concurrency_key IS NOT NULL"
	}
	if t.d.Arrays {
		return t.claimUpdateArrays(ctx, ps, []any{p0.Now.UnixMilli(), runtime}, keyed)
	}
	if runtime != "pull" && runtime != "push" {
		return nil, fmt.Errorf("claim tasks: unknown runtime %q", runtime)
	}
	// The runtime is written into the statement, not bound: SQLite compares a bound value with
	// the partial indexes' conditions (runtime = 'push') and then prepares the statement again
	// whenever it is bound anew, every run.
	rows := make([][]any, 0, len(ps))
	seen := make(map[string]bool, len(ps))
	for _, p := range ps {
		if !seen[p.ID] { // a repeated id is claimed once
			seen[p.ID] = true
			rows = append(rows, []any{p.ID, p.LeaseToken, p.WorkerID})
		}
	}
	from, arg, err := sqltext.JSONRows(2, "c", []string{"c_id", "c_token", "c_worker"}, rows)
	if err != nil {
		return nil, fmt.Errorf("claim tasks: %w", err)
	}
	res, err := t.query(ctx, `UPDATE tasks SET status = 'running',
		attempt = attempt + 1, lease_token = c.c_token, worker_id = c.c_worker, `+claimSet+`
		FROM `+from+`
		WHERE tasks.id = c.c_id AND status = 'pending' AND available_at <= $1 AND runtime = '`+runtime+`'
		AND `+keyed+` RETURNING `+taskCols, p0.Now.UnixMilli(), arg)
	if err != nil {
		return nil, fmt.Errorf("claim tasks: %w", err)
	}
	return collect(res, scanTask)
}

// claimLimited claims the claimable tasks of ps that have a concurrency key, as many of each key
// as its limit leaves room for. It locks each key's row, in key order, before counting the key's
// running tasks: claims of one key on every replica count one after the other, and a claim that
// locked its key never waits for a task row, so the locks cannot deadlock.
func (t *tx) claimLimited(ctx context.Context, ps []store.ClaimTaskParams) ([]*store.Task, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	ids := make([]string, len(ps))
	for i, p := range ps {
		ids[i] = p.ID
	}
	cond, idArgs := t.in("id", 3, ids)
	args := append([]any{ps[0].Now.UnixMilli(), cmp.Or(ps[0].Runtime, "pull")}, idArgs...)
	rows, err := t.query(ctx, `SELECT id, concurrency_key, concurrency_limit FROM tasks
		WHERE `+cond+` AND concurrency_key IS NOT NULL
		AND status = 'pending' AND available_at <= $1 AND runtime = $2`, args...)
	if err != nil {
		return nil, fmt.Errorf("claim limited tasks: %w", err)
	}
	type group struct {
		limit int
		ids   map[string]bool
	}
	groups := map[string]*group{}
	if err := eachRow(rows, func(rows *sql.Rows) error {
		var (
			id, key string
			limit   int
		)
		if err := rows.Scan(&id, &key, &limit); err != nil {
			return err
		}
		if groups[key] == nil {
			groups[key] = &group{limit: limit, ids: map[string]bool{}}
		}
		groups[key].ids[id] = true
		return nil
	}); err != nil {
		return nil, err
	}
	var allowed []store.ClaimTaskParams
	for _, key := range slices.Sorted(maps.Keys(groups)) {
		g := groups[key]
		if _, err := t.exec(ctx, `INSERT INTO concurrency_groups (group_key) VALUES ($1) ON CONFLICT DO NOTHING`, key); err != nil {
			return nil, fmt.Errorf("concurrency group: %w", err)
		}
		var locked string
		if err := t.queryRow(ctx, `SELECT group_key FROM concurrency_groups WHERE group_key = $1`+t.d.LockRow, key).Scan(&locked); err != nil {
			return nil, fmt.Errorf("lock concurrency group: %w", err)
		}
		var running int
		if err := t.queryRow(ctx, `SELECT COUNT(*) FROM tasks WHERE concurrency_key = $1 AND status = 'running'`, key).Scan(&running); err != nil {
			return nil, fmt.Errorf("count running: %w", err)
		}
		room := g.limit - running
		for _, p := range ps { // in the caller's order
			if room <= 0 {
				break
			}
			if g.ids[p.ID] {
				allowed = append(allowed, p)
				room--
			}
		}
	}
	return t.claimUpdate(ctx, allowed, true)
}

// claimSet is what a claim sets besides the attempt, lease token and worker; $1 is the time.
const claimSet = `started_at = $1, heartbeat_at = $1,
		lease_expires_at = $1 + heartbeat_timeout_ms,
		deadline_at = CASE WHEN timeout_ms > 0 THEN $1 + timeout_ms ELSE NULL END,
		reap_at = CASE WHEN timeout_ms > 0 AND timeout_ms < heartbeat_timeout_ms
			THEN $1 + timeout_ms ELSE $1 + heartbeat_timeout_ms END,
		cancel_requested_at = NULL, cancel_reason = '', finished_at = NULL,
		last_event_type = 'Task Processing Started', last_event_at = $1`

// claimUpdateArrays is claimUpdate with one array per column; args holds $1 (the time) and $2
// (the runtime). It takes two statements, so that neither plan depends on statistics the
// database may not have yet (a new table under load has none): the first picks and locks the
// claimable tasks among the ids, by the id index (its status test is written so that it cannot
// match the partial index of ready tasks, which the planner then took for cheaper than the
// lookups); the second claims exactly those, with no filter of its own, so that the planner
// goes from the claimed ids to their rows. In one statement, the filters made the planner
// expect one row and compare every task with every id: 160 ms for a claim of 256 tasks.
func (t *tx) claimUpdateArrays(ctx context.Context, ps []store.ClaimTaskParams, args []any, keyed string) ([]*store.Task, error) {
	ids := make([]string, len(ps))
	for i, p := range ps {
		ids[i] = p.ID
	}
	claimable, err := t.ids(ctx, `SELECT id FROM tasks WHERE id = ANY($3) AND (status = 'pending') IS TRUE
		AND available_at <= $1 AND runtime = $2 AND `+keyed+` ORDER BY id`+t.d.LockRow, append(args, ids)...)
	if err != nil {
		return nil, fmt.Errorf("claim tasks: %w", err)
	}
	if len(claimable) == 0 {
		return nil, nil
	}
	ok := make(map[string]bool, len(claimable))
	for _, id := range claimable {
		ok[id] = true
	}
	ids, tokens, workers := ids[:0], make([]string, 0, len(claimable)), make([]string, 0, len(claimable))
	for _, p := range ps {
		if ok[p.ID] {
			ok[p.ID] = false // a repeated id is claimed once
			ids, tokens, workers = append(ids, p.ID), append(tokens, p.LeaseToken), append(workers, p.WorkerID)
		}
	}
	rows, err := t.query(ctx, `UPDATE tasks SET status = 'running',
		attempt = attempt + 1, lease_token = c.c_token, worker_id = c.c_worker, `+claimSet+`
		FROM unnest($2::text[], $3::text[], $4::text[]) AS c(c_id, c_token, c_worker)
		WHERE tasks.id = c.c_id RETURNING `+taskCols, args[0], ids, tokens, workers)
	if err != nil {
		return nil, fmt.Errorf("claim tasks: %w", err)
	}
	return collect(rows, scanTask)
}

// TaskCompleteMany implements store.Tx.
func (t *tx) TaskCompleteMany(ctx context.Context, done []store.CompletedTask, now time.Time) error {
	if len(done) == 0 {
		return nil
	}
	if t.d.Arrays {
		return t.completeTasksArrays(ctx, done, now)
	}
	rows := make([][]any, len(done))
	for i, d := range done {
		rows[i] = []any{d.ID, sqltext.JSON(d.Output), d.Attempt}
	}
	from, arg, err := sqltext.JSONRows(2, "c", []string{"c_id", "c_output", "c_attempt"}, rows)
	if err != nil {
		return fmt.Errorf("complete tasks: %w", err)
	}
	res, err := t.exec(ctx, `UPDATE tasks SET status = 'completed', output = c.c_output,
		error = NULL, lease_expires_at = NULL, deadline_at = NULL, reap_at = NULL, finished_at = $1,
		last_event_type = 'Task Completed', last_event_at = $1
		FROM `+from+`
		WHERE tasks.id = c.c_id AND status = 'running' AND attempt = c.c_attempt`, now.UnixMilli(), arg)
	if err != nil {
		return fmt.Errorf("complete tasks: %w", err)
	}
	if n, _ := res.RowsAffected(); int(n) != len(done) {
		return store.ErrLeaseLost
	}
	return nil
}

// completeTasksArrays is TaskCompleteMany with one array per column. The fence (status and
// attempt) is a column of the rows, not a filter on the tasks: a filter whose selectivity the
// planner cannot know (no statistics yet) makes it expect one task and compare every task with
// every row (see claimUpdateArrays).
func (t *tx) completeTasksArrays(ctx context.Context, done []store.CompletedTask, now time.Time) error {
	ids, outputs, attempts := make([]string, len(done)), make([]*string, len(done)), make([]int64, len(done))
	statuses := make([]string, len(done))
	for i, d := range done {
		ids[i], attempts[i], statuses[i] = d.ID, int64(d.Attempt), string(lifecycle.Running)
		if d.Output != nil {
			o := string(d.Output)
			outputs[i] = &o
		}
	}
	res, err := t.exec(ctx, `UPDATE tasks SET status = 'completed', output = c.c_output,
		error = NULL, lease_expires_at = NULL, deadline_at = NULL, reap_at = NULL, finished_at = $1,
		last_event_type = 'Task Completed', last_event_at = $1
		FROM unnest($2::text[], $3::text[], $4::bigint[], $5::text[]) AS c(c_id, c_output, c_attempt, c_status)
		WHERE tasks.id = c.c_id AND status = c.c_status AND attempt = c.c_attempt`, now.UnixMilli(), ids, outputs, attempts, statuses)
	if err != nil {
		return fmt.Errorf("complete tasks: %w", err)
	}
	if n, _ := res.RowsAffected(); int(n) != len(done) {
		return store.ErrLeaseLost
	}
	return nil
}

// TaskReleaseChildren implements store.Tx.
func (t *tx) TaskReleaseChildren(ctx context.Context, parentID string, now time.Time) ([]*store.TaskRef, error) {
	return t.TaskReleaseChildrenMany(ctx, []string{parentID}, now)
}

// TaskReleaseChildrenMany implements store.Tx. It counts, per child, how many of the parents it
// has, then updates the children in one statement per distinct count (usually one): a correlated
// count per updated row was quadratic in the children of a wide fan-out.
func (t *tx) TaskReleaseChildrenMany(ctx context.Context, parentIDs []string, now time.Time) ([]*store.TaskRef, error) {
	if len(parentIDs) == 0 {
		return nil, nil
	}
	cond, args := t.in("parent_id", 1, parentIDs)
	rows, err := t.query(ctx, `SELECT child_id, count(*) FROM task_deps WHERE `+cond+`
		GROUP BY child_id ORDER BY child_id`, args...)
	if err != nil {
		return nil, fmt.Errorf("release children: %w", err)
	}
	var children []string
	byCount := map[int][]string{}
	if err := eachRow(rows, func(rows *sql.Rows) error {
		var (
			child string
			n     int
		)
		if err := rows.Scan(&child, &n); err != nil {
			return err
		}
		children = append(children, child)
		byCount[n] = append(byCount[n], child)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("release children: %w", err)
	}
	if len(children) == 0 {
		return nil, nil
	}
	if t.d.LockRow != "" {
		// Lock the children in id order, as TaskReleaseChildren does, before updating them.
		cond, args := t.in("id", 1, children)
		if _, err := t.ids(ctx, `SELECT id FROM tasks WHERE `+cond+` ORDER BY id`+t.d.LockRow, args...); err != nil {
			return nil, fmt.Errorf("lock children: %w", err)
		}
	}
	counts := make([]int, 0, len(byCount))
	for n := range byCount {
		counts = append(counts, n)
	}
	slices.Sort(counts)
	var refs []*store.TaskRef
	for _, n := range counts {
		cond, ids := t.in("id", 3, byCount[n])
		args := append([]any{now.UnixMilli(), n}, ids...)
		got, err := t.refs(ctx, `UPDATE tasks SET unfinished_parents = unfinished_parents - CAST($2 AS INTEGER),
			status = CASE WHEN unfinished_parents = CAST($2 AS INTEGER) AND status = 'waiting' THEN 'pending' ELSE status END,
			available_at = CASE WHEN unfinished_parents = CAST($2 AS INTEGER) AND status = 'waiting' THEN $1 ELSE available_at END,
			last_event_type = CASE WHEN unfinished_parents = CAST($2 AS INTEGER) AND status = 'waiting' THEN 'Task Pending' ELSE last_event_type END,
			last_event_at = CASE WHEN unfinished_parents = CAST($2 AS INTEGER) AND status = 'waiting' THEN $1 ELSE last_event_at END
			WHERE `+cond+` AND unfinished_parents > 0
			RETURNING `+refCols, args...)
		if err != nil {
			return nil, fmt.Errorf("release children: %w", err)
		}
		refs = append(refs, got...)
	}
	return refs, nil
}

// TaskNextReapAt implements store.Reader.
func (q q) TaskNextReapAt(ctx context.Context) (time.Time, bool, error) {
	var at sql.NullInt64
	if err := q.queryRow(ctx, `SELECT min(reap_at) FROM tasks WHERE status = 'running'`).Scan(&at); err != nil {
		return time.Time{}, false, fmt.Errorf("next reap: %w", err)
	}
	return sqltext.Time(at), at.Valid, nil
}

// TaskListDue implements store.Reader.
func (q q) TaskListDue(ctx context.Context, now time.Time, limit int) ([]string, error) {
	return q.ids(ctx, `SELECT id FROM tasks WHERE status = 'running' AND reap_at <= $1
		ORDER BY reap_at LIMIT $2`, now.UnixMilli(), limit)
}
