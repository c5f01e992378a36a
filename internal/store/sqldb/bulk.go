package sqldb

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
)

// Set-based statements for batches of tasks: one statement for many rows, so that a batch costs
// a handful of round trips instead of several per task.

// placeholders returns "$from, $from+1, ..." for n parameters.
func placeholders(from, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("$" + strconv.Itoa(from+i))
	}
	return b.String()
}

// padded is the size class of a list of n items: the next power of two. Lists are padded to it
// with items that match nothing, so that each statement has a few texts, prepared once and
// cached (by the SQLite store's statement cache and by pgx), instead of one per length.
func padded(n int) int {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len(uint(n-1))
}

// stringArgs returns ss as arguments, padded with "" (no task has the empty id).
func stringArgs(ss []string) []any {
	args := make([]any, padded(len(ss)))
	for i := range args {
		args[i] = ""
		if i < len(ss) {
			args[i] = ss[i]
		}
	}
	return args
}

// TaskLockMany implements store.Tx.
func (t *tx) TaskLockMany(ctx context.Context, ids []string) ([]*store.Task, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	cond, args := t.in("id", 1, ids)
	rows, err := t.query(ctx, `SELECT `+taskCols+` FROM tasks WHERE `+cond+` ORDER BY id`+t.d.LockRow, args...)
	if err != nil {
		return nil, fmt.Errorf("lock tasks: %w", err)
	}
	return collectTasks(rows)
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
		rows[i] = []any{d.ID, jsonArg(d.Output), d.Attempt}
	}
	from, arg, err := jsonRows(2, "c", []string{"c_id", "c_output", "c_attempt"}, rows)
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
	for rows.Next() {
		var (
			child string
			n     int
		)
		if err := rows.Scan(&child, &n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("release children: %w", err)
		}
		children = append(children, child)
		byCount[n] = append(byCount[n], child)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
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
	from, arg, err := jsonRows(2, "c", []string{"c_id", "c_token", "c_worker"}, rows)
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
	return collectTasks(res)
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
	for rows.Next() {
		var (
			id, key string
			limit   int
		)
		if err := rows.Scan(&id, &key, &limit); err != nil {
			rows.Close()
			return nil, err
		}
		if groups[key] == nil {
			groups[key] = &group{limit: limit, ids: map[string]bool{}}
		}
		groups[key].ids[id] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
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

// RowsLock implements store.Tx: one statement locks the tasks in id order, a second the jobs of
// s.Jobs in id order (see store.LockSet for why that order). Each kind of row set is a part of a
// UNION ALL under "id IN", which the planner turns into index lookups; an OR of the kinds would
// have it scan the table.
func (t *tx) RowsLock(ctx context.Context, s store.LockSet) error {
	if t.d.LockRow == "" || s.Empty() {
		return nil
	}
	if len(s.Keys) > 0 && t.d.LockKeys != "" {
		// The keys in one order: the locks are taken after the sort.
		if _, err := t.exec(ctx, t.d.LockKeys, s.Keys); err != nil {
			return fmt.Errorf("lock idempotency keys: %w", err)
		}
	}
	if len(s.Tasks)+len(s.Releasing)+len(s.Ending)+len(s.Jobs) == 0 {
		return nil
	}
	var (
		args  []any
		with  string
		parts []string
	)
	in := func(col string, ids []string) string {
		cond, a := t.in(col, len(args)+1, ids)
		args = append(args, a...)
		return cond
	}
	if len(s.Tasks) > 0 {
		parts = append(parts, `SELECT id FROM tasks WHERE `+in("id", s.Tasks))
	}
	if len(s.Releasing) > 0 {
		parts = append(parts, `SELECT child_id FROM task_deps WHERE `+in("parent_id", s.Releasing))
	}
	if len(s.Ending) > 0 {
		with = `WITH RECURSIVE below(id) AS (
			SELECT child_id FROM task_deps WHERE ` + in("parent_id", s.Ending) + `
			UNION
			SELECT d.child_id FROM task_deps d JOIN below b ON d.parent_id = b.id
		) `
		parts = append(parts, `SELECT id FROM below`)
	}
	if len(s.Jobs) > 0 {
		parts = append(parts, `SELECT id FROM tasks WHERE `+in("job_id", s.Jobs))
	}
	if _, err := t.ids(ctx, with+`SELECT id FROM tasks WHERE id IN (`+strings.Join(parts, " UNION ALL ")+`)
		ORDER BY id`+t.d.LockRow, args...); err != nil {
		return fmt.Errorf("lock tasks: %w", err)
	}
	if len(s.Jobs) == 0 {
		return nil
	}
	cond, jobs := t.in("id", 1, s.Jobs)
	if _, err := t.ids(ctx, `SELECT id FROM jobs WHERE `+cond+` ORDER BY id`+t.d.LockRow, jobs...); err != nil {
		return fmt.Errorf("lock jobs: %w", err)
	}
	return nil
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
	return collectTasks(rows)
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
