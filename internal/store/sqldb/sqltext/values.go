package sqltext

import (
	"database/sql"
	"encoding/json"
	"time"
)

// Millis is t as an argument: times are stored as Unix milliseconds, NULL for the zero time.
func Millis(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMilli()
}

// Time reads a time that may be NULL (the zero time).
func Time(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return time.UnixMilli(n.Int64).UTC()
}

// UnixMilli reads a NOT NULL time.
func UnixMilli(n int64) time.Time { return time.UnixMilli(n).UTC() }

// NullInt is p as an argument: NULL for nil.
func NullInt(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

// FromNullInt reads an integer that may be NULL (nil).
func FromNullInt(n sql.NullInt64) *int64 {
	if !n.Valid {
		return nil
	}
	v := n.Int64
	return &v
}

// JSON is b as an argument: JSON is stored verbatim as text, NULL for a nil RawMessage.
func JSON(b json.RawMessage) any {
	if b == nil {
		return nil
	}
	return string(b)
}

// FromJSON reads JSON that may be NULL (nil).
func FromJSON(s sql.NullString) json.RawMessage {
	if !s.Valid {
		return nil
	}
	return json.RawMessage(s.String)
}

// NullIfEmpty is s as an argument: NULL for "".
func NullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}
