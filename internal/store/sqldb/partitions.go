// The commits of partitions of datasets.

package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/sqldb/sqltext"
)

const partitionCommitCols = `id, tenant, dataset_uuid, dataset_version, partition_key, partition_start, partition_end,
	location, row_count, bytes, task_id, attempt, committed_at`

// PartitionCommitInsert implements store.Tx. The unique index on the partition and location
// makes a repeat insert nothing, whichever transaction stores it first.
func (t *tx) PartitionCommitInsert(ctx context.Context, c *store.PartitionCommit) (bool, error) {
	err := t.queryRow(ctx, `INSERT INTO partition_commits (tenant, dataset_uuid, dataset_version, partition_key,
		partition_start, partition_end, location, row_count, bytes, task_id, attempt, committed_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
		ON CONFLICT (tenant, dataset_uuid, dataset_version, partition_key, location) DO NOTHING RETURNING id`,
		c.Tenant, c.DatasetUUID, c.DatasetVersion, c.PartitionKey, c.Start, c.End, c.Location, sqltext.NullInt(c.RowCount),
		c.Bytes, c.TaskID, c.Attempt, sqltext.Millis(c.CommittedAt)).Scan(&c.ID)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("insert the commit of partition %s of dataset %s: %w", c.PartitionKey, c.DatasetUUID, err)
	}
	return true, nil
}

// PartitionCommitListCurrent implements store.Reader. It walks the version's commits in the
// order of the partitions (the index partition_commits_order) and keeps each one that no newer
// commit of its partition follows, so that a page costs its length, not the version's history.
func (q q) PartitionCommitListCurrent(ctx context.Context, p store.PartitionCommitListParams) ([]*store.PartitionCommit, error) {
	rows, err := q.query(ctx, `SELECT `+sqltext.Prefixed("c.", partitionCommitCols)+` FROM partition_commits c
		WHERE c.tenant = $1 AND c.dataset_uuid = $2 AND c.dataset_version = $3
		AND NOT EXISTS (SELECT 1 FROM partition_commits n WHERE n.tenant = c.tenant AND n.dataset_uuid = c.dataset_uuid
			AND n.dataset_version = c.dataset_version AND n.partition_start = c.partition_start
			AND n.partition_end = c.partition_end AND n.partition_key = c.partition_key AND n.id > c.id)
		ORDER BY c.partition_start, c.partition_end, c.partition_key LIMIT $4`,
		p.Tenant, p.DatasetUUID, p.DatasetVersion, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("list the partitions of dataset %s version %s: %w", p.DatasetUUID, p.DatasetVersion, err)
	}
	return collect(rows, scanPartitionCommit)
}

// PartitionCommitHistory implements store.Reader.
func (q q) PartitionCommitHistory(ctx context.Context, k store.PartitionRef, limit int) ([]*store.PartitionCommit, error) {
	rows, err := q.query(ctx, `SELECT `+partitionCommitCols+` FROM partition_commits
		WHERE tenant = $1 AND dataset_uuid = $2 AND dataset_version = $3 AND partition_key = $4
		ORDER BY id DESC LIMIT $5`, k.Tenant, k.DatasetUUID, k.DatasetVersion, k.PartitionKey, limit)
	if err != nil {
		return nil, fmt.Errorf("list the commits of partition %s of dataset %s: %w", k.PartitionKey, k.DatasetUUID, err)
	}
	return collect(rows, scanPartitionCommit)
}

// PartitionCommitAttempts implements store.Reader.
func (q q) PartitionCommitAttempts(ctx context.Context, datasetUUID string) ([]store.PartitionAttempt, error) {
	rows, err := q.query(ctx, `SELECT DISTINCT task_id, attempt FROM partition_commits WHERE dataset_uuid = $1`, datasetUUID)
	if err != nil {
		return nil, fmt.Errorf("list the attempts that committed partitions of dataset %s: %w", datasetUUID, err)
	}
	return collect(rows, func(row rowScanner) (store.PartitionAttempt, error) {
		var a store.PartitionAttempt
		err := row.Scan(&a.TaskID, &a.Attempt)
		return a, err
	})
}

func scanPartitionCommit(row rowScanner) (*store.PartitionCommit, error) {
	var (
		c         store.PartitionCommit
		rowCount  sql.NullInt64
		committed int64
	)
	if err := row.Scan(&c.ID, &c.Tenant, &c.DatasetUUID, &c.DatasetVersion, &c.PartitionKey, &c.Start, &c.End,
		&c.Location, &rowCount, &c.Bytes, &c.TaskID, &c.Attempt, &committed); err != nil {
		return nil, err
	}
	c.RowCount, c.CommittedAt = sqltext.FromNullInt(rowCount), sqltext.UnixMilli(committed)
	return &c, nil
}
