// User code bundles (store.Bundles): their records; the archives live in object storage.

package sqldb

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/sqldb/sqltext"
)

const bundleCols = `tenant, id, object_key, sha256, size, language, entrypoint, manifest, uploaded_by,
	created_at, finalized_at, disabled_at, disabled_by`

func scanBundle(row rowScanner) (*store.Bundle, error) {
	var (
		b                   store.Bundle
		manifest            string
		created             int64
		finalized, disabled sql.NullInt64
	)
	err := row.Scan(&b.Tenant, &b.ID, &b.Object, &b.SHA256, &b.Size, &b.Language, &b.Entrypoint, &manifest,
		&b.UploadedBy, &created, &finalized, &disabled, &b.DisabledBy)
	if err != nil {
		return nil, notFound(err)
	}
	if manifest != "" {
		b.Manifest = []byte(manifest)
	}
	b.CreatedAt, b.FinalizedAt, b.DisabledAt = sqltext.UnixMilli(created), sqltext.Time(finalized), sqltext.Time(disabled)
	return &b, nil
}

// BundleInsert implements store.Bundles.
func (db *DB) BundleInsert(ctx context.Context, b *store.Bundle) error {
	return db.insertKey(ctx, "insert bundle", `INSERT INTO udf_bundles (`+bundleCols+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`,
		b.Tenant, b.ID, b.Object, b.SHA256, b.Size, b.Language, b.Entrypoint, string(b.Manifest), b.UploadedBy,
		b.CreatedAt.UnixMilli(), sqltext.Millis(b.FinalizedAt), sqltext.Millis(b.DisabledAt), b.DisabledBy)
}

// BundleGet implements store.Bundles.
func (db *DB) BundleGet(ctx context.Context, tenant, id string) (*store.Bundle, error) {
	return scanBundle(db.q.queryRow(ctx, `SELECT `+bundleCols+` FROM udf_bundles WHERE tenant = $1 AND id = $2`, tenant, id))
}

// BundleList implements store.Bundles.
func (db *DB) BundleList(ctx context.Context, p store.BundleListParams) ([]*store.Bundle, error) {
	q, args := `SELECT `+bundleCols+` FROM udf_bundles WHERE tenant = $1`, []any{p.Tenant}
	if !p.BeforeCreated.IsZero() {
		q += ` AND (created_at < $2 OR (created_at = $2 AND id < $3))`
		args = append(args, p.BeforeCreated.UnixMilli(), p.BeforeID)
	}
	q += fmt.Sprintf(` ORDER BY created_at DESC, id DESC LIMIT %d`, max(p.Limit, 1))
	rows, err := db.q.query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list bundles: %w", err)
	}
	return collect(rows, scanBundle)
}

// BundleFinalize implements store.Bundles.
func (db *DB) BundleFinalize(ctx context.Context, b *store.Bundle) error {
	return db.writeTx(ctx, func(t *tx) error {
		res, err := t.exec(ctx, `UPDATE udf_bundles SET sha256 = $3, size = $4, language = $5, entrypoint = $6,
			manifest = $7, finalized_at = $8 WHERE tenant = $1 AND id = $2 AND finalized_at IS NULL`,
			b.Tenant, b.ID, b.SHA256, b.Size, b.Language, b.Entrypoint, string(b.Manifest), b.FinalizedAt.UnixMilli())
		if err != nil {
			return fmt.Errorf("finalize bundle: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return store.ErrNotFound
		}
		return nil
	})
}

// BundleDisable implements store.Bundles.
func (db *DB) BundleDisable(ctx context.Context, tenant, id, by string, at time.Time) (*store.Bundle, error) {
	var b *store.Bundle
	err := db.writeTx(ctx, func(t *tx) error {
		if _, err := t.exec(ctx, `UPDATE udf_bundles SET disabled_at = $3, disabled_by = $4
			WHERE tenant = $1 AND id = $2 AND disabled_at IS NULL`, tenant, id, at.UnixMilli(), by); err != nil {
			return fmt.Errorf("disable bundle: %w", err)
		}
		var err error
		b, err = scanBundle(t.queryRow(ctx, `SELECT `+bundleCols+` FROM udf_bundles WHERE tenant = $1 AND id = $2`, tenant, id))
		return err
	})
	return b, err
}
