// Conversions of Go values to the arguments of statements and back from the columns they read.

package sqldb

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/baton-dev/baton/internal/store"
)

// Times are stored as Unix milliseconds; NULL is the zero time.

func ms(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMilli()
}

func fromMs(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return time.UnixMilli(n.Int64).UTC()
}

// fromMillis is a NOT NULL time.
func fromMillis(n int64) time.Time { return time.UnixMilli(n).UTC() }

func nullInt(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

func fromNullInt(n sql.NullInt64) *int64 {
	if !n.Valid {
		return nil
	}
	v := n.Int64
	return &v
}

// JSON is stored verbatim as text; NULL is a nil RawMessage.

func jsonArg(b json.RawMessage) any {
	if b == nil {
		return nil
	}
	return string(b)
}

func fromJSON(s sql.NullString) json.RawMessage {
	if !s.Valid {
		return nil
	}
	return json.RawMessage(s.String)
}

func errArg(e *store.TaskError) (any, error) {
	if e == nil {
		return nil, nil
	}
	b, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

func fromErr(s sql.NullString) (*store.TaskError, error) {
	if !s.Valid {
		return nil, nil
	}
	var e store.TaskError
	if err := json.Unmarshal([]byte(s.String), &e); err != nil {
		return nil, fmt.Errorf("decode task error: %w", err)
	}
	return &e, nil
}

func strArg(s string) any {
	if s == "" {
		return nil
	}
	return s
}
