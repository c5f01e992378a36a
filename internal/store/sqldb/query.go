// The Query Service's audit records.

package sqldb

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/sqldb/sqltext"
)

// QueryAuditInsert implements store.Tx.
func (t *tx) QueryAuditInsert(ctx context.Context, a *store.QueryAudit) error {
	datasets := string(a.Datasets)
	if datasets == "" {
		datasets = "[]"
	}
	return t.queryRow(ctx, `INSERT INTO query_audit (tenant, at, caller, sql_hash, datasets, status, row_count, duration_ms)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id`,
		a.Tenant, a.At.UnixMilli(), a.Caller, a.SQLHash, datasets, a.Status, a.RowCount, a.DurationMS).Scan(&a.ID)
}

// QueryAuditList implements store.Reader.
func (q q) QueryAuditList(ctx context.Context, p store.QueryAuditListParams) ([]*store.QueryAudit, error) {
	before := p.BeforeID
	if before <= 0 {
		before = 1<<63 - 1
	}
	rows, err := q.query(ctx, `SELECT id, tenant, at, caller, sql_hash, datasets, status, row_count, duration_ms
		FROM query_audit WHERE tenant = $1 AND id < $2 ORDER BY id DESC LIMIT $3`, p.Tenant, before, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("list query audit: %w", err)
	}
	return collect(rows, func(row rowScanner) (*store.QueryAudit, error) {
		var (
			a        store.QueryAudit
			at       int64
			datasets string
		)
		if err := row.Scan(&a.ID, &a.Tenant, &at, &a.Caller, &a.SQLHash, &datasets, &a.Status, &a.RowCount, &a.DurationMS); err != nil {
			return nil, err
		}
		a.At, a.Datasets = sqltext.Time(sql.NullInt64{Int64: at, Valid: true}), []byte(datasets)
		return &a, nil
	})
}
