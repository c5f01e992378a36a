// The records of output resets.

package sqldb

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/sqldb/sqltext"
)

const outputResetCols = `id, tenant, pipeline, version, job, api_key, dataset_uuid, dataset_name, output_index,
	previous_version, dataset_version, rows_removed, batches_discarded, at`

// OutputResetInsertMany implements store.Tx. A deploy writes a few rows, one statement each.
func (t *tx) OutputResetInsertMany(ctx context.Context, rs []*store.OutputReset) error {
	for _, r := range rs {
		err := t.queryRow(ctx, `INSERT INTO output_resets (tenant, pipeline, version, job, api_key, dataset_uuid,
			dataset_name, output_index, previous_version, dataset_version, rows_removed, batches_discarded, at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) RETURNING id`,
			r.Tenant, r.Pipeline, r.Version, r.Job, r.APIKey, r.DatasetUUID, r.DatasetName, r.OutputIndex,
			r.PreviousVersion, r.DatasetVersion, r.RowsRemoved, r.BatchesDiscarded, r.At.UnixMilli()).Scan(&r.ID)
		if err != nil {
			return fmt.Errorf("insert output reset of dataset %s: %w", r.DatasetUUID, err)
		}
	}
	return nil
}

// OutputResetList implements store.Reader.
func (q q) OutputResetList(ctx context.Context, p store.OutputResetListParams) ([]*store.OutputReset, error) {
	where, args := "tenant = $1", []any{p.Tenant, p.Limit}
	if p.Pipeline != "" {
		args = append(args, p.Pipeline)
		where += fmt.Sprintf(" AND pipeline = $%d", len(args))
	}
	if p.DatasetUUID != "" {
		args = append(args, p.DatasetUUID)
		where += fmt.Sprintf(" AND dataset_uuid = $%d", len(args))
	}
	rows, err := q.query(ctx, `SELECT `+outputResetCols+` FROM output_resets WHERE `+where+` ORDER BY id DESC LIMIT $2`, args...)
	if err != nil {
		return nil, fmt.Errorf("list output resets: %w", err)
	}
	return collect(rows, func(row rowScanner) (*store.OutputReset, error) {
		var (
			r  store.OutputReset
			at int64
		)
		if err := row.Scan(&r.ID, &r.Tenant, &r.Pipeline, &r.Version, &r.Job, &r.APIKey, &r.DatasetUUID, &r.DatasetName,
			&r.OutputIndex, &r.PreviousVersion, &r.DatasetVersion, &r.RowsRemoved, &r.BatchesDiscarded, &at); err != nil {
			return nil, err
		}
		r.At = sqltext.Time(sql.NullInt64{Int64: at, Valid: true})
		return &r, nil
	})
}
