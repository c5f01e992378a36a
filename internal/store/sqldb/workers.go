// Workers (store.Workers): what workers say of themselves when they claim.

package sqldb

import (
	"context"
	"fmt"

	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/sqldb/sqltext"
)

// WorkerInfoPut implements store.Workers.
func (db *DB) WorkerInfoPut(ctx context.Context, w *store.WorkerInfo) error {
	err := db.writeTx(ctx, func(t *tx) error {
		_, err := t.exec(ctx, `INSERT INTO worker_info (worker_id, isolation, seen_at) VALUES ($1, $2, $3)
			ON CONFLICT (worker_id) DO UPDATE SET isolation = excluded.isolation, seen_at = excluded.seen_at`,
			w.WorkerID, w.Isolation, w.SeenAt.UnixMilli())
		return err
	})
	if err != nil {
		return fmt.Errorf("record worker %s: %w", w.WorkerID, err)
	}
	return nil
}

// WorkerInfoList implements store.Workers.
func (db *DB) WorkerInfoList(ctx context.Context, ids []string) ([]*store.WorkerInfo, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	args := sqltext.StringArgs(ids) // padded to a size class
	rows, err := db.q.query(ctx, `SELECT worker_id, isolation, seen_at FROM worker_info WHERE worker_id IN (`+
		sqltext.Placeholders(1, len(args))+`) ORDER BY worker_id`, args...)
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	return collect(rows, func(row rowScanner) (*store.WorkerInfo, error) {
		var (
			w    store.WorkerInfo
			seen int64
		)
		if err := row.Scan(&w.WorkerID, &w.Isolation, &seen); err != nil {
			return nil, err
		}
		w.SeenAt = sqltext.UnixMilli(seen)
		return &w, nil
	})
}
