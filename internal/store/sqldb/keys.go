// Credentials (store.Keys): producer API keys with their use, and token signing keys.

package sqldb

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/sqldb/sqltext"
)

const keyCols = `id, tenant, name, secret_hash, prefix, created_at, revoked_at`

func scanKey(row rowScanner) (*store.APIKey, error) {
	var (
		k       store.APIKey
		created int64
		revoked sql.NullInt64
	)
	if err := row.Scan(&k.ID, &k.Tenant, &k.Name, &k.SecretHash, &k.Prefix, &created, &revoked); err != nil {
		return nil, notFound(err)
	}
	k.CreatedAt = sqltext.Time(sql.NullInt64{Int64: created, Valid: true})
	k.RevokedAt = sqltext.Time(revoked)
	return &k, nil
}

// APIKeyInsert implements store.Keys.
func (db *DB) APIKeyInsert(ctx context.Context, k *store.APIKey) error {
	return db.insertKey(ctx, "insert api key", `INSERT INTO api_keys (`+keyCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		k.ID, k.Tenant, k.Name, k.SecretHash, k.Prefix, sqltext.Millis(k.CreatedAt), sqltext.Millis(k.RevokedAt))
}

// insertKey runs insert in a write transaction: a key already there is store.ErrConflict; label
// names the insert in other errors.
func (db *DB) insertKey(ctx context.Context, label, insert string, args ...any) error {
	err := db.writeTx(ctx, func(t *tx) error {
		_, err := t.exec(ctx, insert, args...)
		return err
	})
	if err != nil {
		if db.dialect.IsUnique(err) {
			return store.ErrConflict
		}
		return fmt.Errorf("%s: %w", label, err)
	}
	return nil
}

// APIKeyGetByHash implements store.Keys.
func (db *DB) APIKeyGetByHash(ctx context.Context, secretHash string) (*store.APIKey, error) {
	return scanKey(db.q.queryRow(ctx, `SELECT `+keyCols+` FROM api_keys WHERE secret_hash = $1`, secretHash))
}

// APIKeyList implements store.Keys.
func (db *DB) APIKeyList(ctx context.Context) ([]*store.APIKey, error) {
	rows, err := db.q.query(ctx, `SELECT `+keyCols+` FROM api_keys ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	return collect(rows, scanKey)
}

// APIKeyRevoke implements store.Keys.
func (db *DB) APIKeyRevoke(ctx context.Context, id string, at time.Time) error {
	return db.endKey(ctx, "revoke api key", `UPDATE api_keys SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL`,
		`SELECT count(*) FROM api_keys WHERE id = $1`, id, at)
}

// endKey runs update ($1 the key, $2 at) in a write transaction; when it changes no row, a key
// that count ($1 the key) does not find is store.ErrNotFound, and one that it finds had ended
// already. label names the update in its error.
func (db *DB) endKey(ctx context.Context, label, update, count, id string, at time.Time) error {
	return db.writeTx(ctx, func(t *tx) error {
		res, err := t.exec(ctx, update, id, at.UnixMilli())
		if err != nil {
			return fmt.Errorf("%s: %w", label, err)
		}
		if n, _ := res.RowsAffected(); n > 0 {
			return nil
		}
		var exists int
		if err := t.queryRow(ctx, count, id).Scan(&exists); err != nil {
			return err
		}
		if exists == 0 {
			return store.ErrNotFound
		}
		return nil
	})
}

// APIKeyCountRequest implements store.Keys.
func (db *DB) APIKeyCountRequest(ctx context.Context, keyID, day string) (int64, error) {
	var n int64
	err := db.writeTx(ctx, func(t *tx) error {
		return t.queryRow(ctx, `INSERT INTO api_key_usage (key_id, day, count) VALUES ($1, $2, 1)
			ON CONFLICT (key_id, day) DO UPDATE SET count = api_key_usage.count + 1 RETURNING count`, keyID, day).Scan(&n)
	})
	if err != nil {
		return 0, fmt.Errorf("count request: %w", err)
	}
	return n, nil
}

// SigningKeyInsert implements store.Keys.
func (db *DB) SigningKeyInsert(ctx context.Context, k *store.SigningKey) error {
	return db.insertKey(ctx, "insert signing key", `INSERT INTO signing_keys (kid, secret, created_at, retired_at)
		VALUES ($1, $2, $3, $4)`, k.KID, string(k.Secret), sqltext.Millis(k.CreatedAt), sqltext.Millis(k.RetiredAt))
}

// SigningKeyList implements store.Keys.
func (db *DB) SigningKeyList(ctx context.Context) ([]*store.SigningKey, error) {
	rows, err := db.q.query(ctx, `SELECT kid, secret, created_at, retired_at FROM signing_keys
		ORDER BY created_at DESC, kid DESC`)
	if err != nil {
		return nil, fmt.Errorf("list signing keys: %w", err)
	}
	return collect(rows, func(row rowScanner) (*store.SigningKey, error) {
		var (
			k       store.SigningKey
			secret  string
			created int64
			retired sql.NullInt64
		)
		if err := row.Scan(&k.KID, &secret, &created, &retired); err != nil {
			return nil, err
		}
		k.Secret = []byte(secret)
		k.CreatedAt = time.UnixMilli(created).UTC()
		k.RetiredAt = sqltext.Time(retired)
		return &k, nil
	})
}

// SigningKeyRetire implements store.Keys.
func (db *DB) SigningKeyRetire(ctx context.Context, kid string, at time.Time) error {
	return db.endKey(ctx, "retire signing key", `UPDATE signing_keys SET retired_at = $2 WHERE kid = $1 AND retired_at IS NULL`,
		`SELECT count(*) FROM signing_keys WHERE kid = $1`, kid, at)
}
