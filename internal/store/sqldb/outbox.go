// The outbox: messages written in the transactions that cause them, and the relay's queries:
// claim due messages, then mark them sent or schedule a retry, and prune what was sent long ago.

package sqldb

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/sqldb/sqltext"
)

const outboxCols = `id, topic, msg_key, payload, available_at, created_at`

// outboxMessages reads rows of outboxCols and then, withAttempts, the attempts column. It scans
// *sql.Rows itself, not through collect's interface, which would cost the relay's claims an
// allocation a message; the columns that are converted are read into variables of the call.
func outboxMessages(rows *sql.Rows, withAttempts bool) ([]*store.OutboxMessage, error) {
	defer rows.Close()
	var (
		out                          []*store.OutboxMessage
		payload                      string
		available, created, attempts int64
	)
	for rows.Next() {
		var m store.OutboxMessage
		dest := []any{&m.ID, &m.Topic, &m.Key, &payload, &available, &created, &attempts}
		if !withAttempts {
			dest = dest[:len(dest)-1]
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		m.Payload = []byte(payload)
		m.AvailableAt = sqltext.Time(sql.NullInt64{Int64: available, Valid: true})
		m.CreatedAt = sqltext.Time(sql.NullInt64{Int64: created, Valid: true})
		m.Attempts = int(attempts)
		out = append(out, &m)
	}
	return out, rows.Err()
}

// OutboxListAfter implements store.Reader.
func (q q) OutboxListAfter(ctx context.Context, afterID int64, limit int) ([]*store.OutboxMessage, error) {
	rows, err := q.query(ctx, `SELECT `+outboxCols+` FROM outbox WHERE id > $1 ORDER BY id LIMIT $2`, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("list outbox: %w", err)
	}
	return outboxMessages(rows, false)
}

// OutboxBacklog implements store.Reader: one pass over the partial index of unsent messages
// (outbox_unsent, on available_at).
func (q q) OutboxBacklog(ctx context.Context) (store.OutboxBacklog, error) {
	var (
		b      store.OutboxBacklog
		oldest sql.NullInt64
	)
	if err := q.queryRow(ctx, "SELECT count(*), min(available_at) FROM outbox WHERE sent_at IS NULL").Scan(&b.Unsent, &oldest); err != nil {
		return store.OutboxBacklog{}, fmt.Errorf("outbox backlog: %w", err)
	}
	if oldest.Valid {
		b.OldestAvailableAt = sqltext.Time(oldest)
	}
	return b, nil
}

// OutboxUnsentByKey implements store.Reader.
func (q q) OutboxUnsentByKey(ctx context.Context, topic string, keys []string) (int, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	args := append([]any{topic}, sqltext.StringArgs(keys)...)
	var n int
	if err := q.queryRow(ctx, `SELECT COUNT(*) FROM outbox WHERE sent_at IS NULL AND topic = $1
		AND msg_key IN (`+sqltext.Placeholders(2, len(args)-1)+`)`, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("unsent %s messages: %w", topic, err)
	}
	return n, nil
}

// OutboxInsertMany implements store.Tx.
func (t *tx) OutboxInsertMany(ctx context.Context, msgs []*store.OutboxMessage) error {
	rows := make([][]any, len(msgs))
	for i, m := range msgs {
		rows[i] = []any{m.Topic, m.Key, string(m.Payload), m.AvailableAt.UnixMilli(), m.CreatedAt.UnixMilli()}
	}
	return t.insertRows(ctx, "outbox", []string{"topic", "msg_key", "payload", "available_at", "created_at"}, rows, "")
}

// OutboxClaim implements store.Tx. The rows stay locked until the transaction ends; on
// PostgreSQL SKIP LOCKED makes a concurrent relay pass over them, on SQLite the single writer
// serialises relays.
func (t *tx) OutboxClaim(ctx context.Context, p store.OutboxClaimParams) ([]*store.OutboxMessage, error) {
	f := p.Filter
	topic := ""
	switch {
	case f.Topic != "" && f.Except:
		topic = " AND topic <> $3"
	case f.Topic != "":
		topic = " AND topic = $3"
	}
	args := []any{p.Now.UnixMilli(), p.Limit}
	if topic != "" {
		args = append(args, f.Topic)
	}
	rows, err := t.query(ctx, `SELECT `+outboxCols+`, attempts
		FROM outbox WHERE sent_at IS NULL AND available_at <= $1`+topic+` ORDER BY id LIMIT $2`+t.d.LockSkip,
		args...)
	if err != nil {
		return nil, fmt.Errorf("claim outbox: %w", err)
	}
	return outboxMessages(rows, true)
}

// OutboxMarkSent implements store.Tx.
func (t *tx) OutboxMarkSent(ctx context.Context, ids []int64, at time.Time) error {
	_, err := t.execIDs(ctx, "UPDATE outbox SET sent_at = $1 WHERE id = ANY($2)", "UPDATE outbox SET sent_at = $1 WHERE id IN (",
		ids, at.UnixMilli())
	if err != nil {
		return fmt.Errorf("mark outbox sent: %w", err)
	}
	return nil
}

// OutboxDelete implements store.Tx.
func (t *tx) OutboxDelete(ctx context.Context, ids []int64) error {
	if _, err := t.execIDs(ctx, "DELETE FROM outbox WHERE id = ANY($1)", "DELETE FROM outbox WHERE id IN (", ids); err != nil {
		return fmt.Errorf("delete outbox messages: %w", err)
	}
	return nil
}

// OutboxRetry implements store.Tx.
func (t *tx) OutboxRetry(ctx context.Context, p store.OutboxRetryParams) error {
	res, err := t.exec(ctx, `UPDATE outbox SET attempts = $1, available_at = $2 WHERE id = $3`,
		p.Attempts, p.NextAt.UnixMilli(), p.ID)
	if err != nil {
		return fmt.Errorf("retry outbox %d: %w", p.ID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return store.ErrNotFound
	}
	return nil
}

// OutboxDeleteSent implements store.Tx.
func (t *tx) OutboxDeleteSent(ctx context.Context, before time.Time, limit int) (int, error) {
	res, err := t.exec(ctx, `DELETE FROM outbox WHERE id IN (SELECT id FROM outbox
		WHERE sent_at IS NOT NULL AND sent_at < $1 ORDER BY id LIMIT $2)`, before.UnixMilli(), limit)
	if err != nil {
		return 0, fmt.Errorf("delete sent outbox: %w", err)
	}
	n, err := res.RowsAffected()
	return int(n), err
}
