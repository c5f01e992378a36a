package dataset

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/baton-dev/baton/internal/pipeline"
)

// alertSchema is the schema of the example pipeline's buffered dataset alert_events.
func alertSchema() *pipeline.Schema {
	return &pipeline.Schema{
		Columns: []pipeline.Column{
			{Name: "dedupe_key", Type: pipeline.TypeString, Required: true},
			{Name: "chain", Type: pipeline.TypeString, Required: true},
			{Name: "block", Type: pipeline.TypeInteger, Required: true},
			{Name: "severity", Type: pipeline.TypeString, Required: true},
			{Name: "message", Type: pipeline.TypeString},
			{Name: "seen_at", Type: pipeline.TypeTimestamp},
		},
		Unique: []string{"dedupe_key"},
	}
}

// FuzzParseBatch parses fuzzed JSONL batches against a schema with a column of every type (or
// the example's alert_events) with a fuzzed size limit (0: the default). It must not panic, must
// fail only with a *RowError naming a line of the batch or with ErrTooLarge, and every row it
// accepts must be one both databases can store as it is: only the schema's columns, the required
// and unique ones present and not null, each value of its column's Go type, text valid UTF-8
// without U+0000, timestamps in UTC to the microsecond, and JSON values that PostgreSQL's jsonb
// takes (compact, valid UTF-8, no \u0000, no unpaired UTF-16 surrogate escape).
func FuzzParseBatch(f *testing.F) {
	f.Add([]byte(`{"id": "a", "name": "x", "n": 42, "f": 1.5, "ok": true, "at": "2025-03-01T11:00:00.123456789+01:00", "doc": {"k": [1, 2]}}`), false, uint16(0))
	f.Add([]byte("\n{\"id\": \"a\", \"name\": \"x\"}\r\n\n  \n{\"id\": \"b\", \"name\": \"y\", \"org_id\": {\"not\": \"a string\"}}"), false, uint16(0))
	f.Add([]byte(`{"id": "a", "name": "x", "n": -1.5e3, "f": 1e400, "doc": "\ud83d\ude00"}`), false, uint16(0))
	f.Add([]byte(`{"id": "a", "name": "x", "n": 100000000000000000000e-2, "doc": ["\\u0000", "\u00e9"]}`), false, uint16(0))
	f.Add([]byte(`{"id": "a", "name": "x\u0000y"}`), false, uint16(0))
	f.Add([]byte(`{"id": "a", "name": "x", "id": "b"}`), false, uint16(40))
	f.Add([]byte(`{"id": null, "name": "x"} {"id": "b", "name": "y"}`), false, uint16(0))
	f.Add([]byte(`{"dedupe_key": "a1", "chain": "mainnet", "block": 1000001, "severity": "high", "message": "reorg", "seen_at": "2025-01-15T10:00:00Z"}
{"dedupe_key": "a2", "chain": "sepolia", "block": 1000002, "severity": "low", "org_id": "acme"}
`), true, uint16(0))
	f.Add([]byte(`{"dedupe_key": "a1", "chain": "mainnet", "block": 9223372036854775808, "severity": "high"}`), true, uint16(100))
	f.Fuzz(func(t *testing.T, data []byte, alerts bool, limit uint16) {
		s := everyType()
		if alerts {
			s = alertSchema()
		}
		rows, err := ParseBatch(bytes.NewReader(data), s, int64(limit))
		if err != nil {
			var re *RowError
			switch {
			case rows != nil:
				t.Fatalf("rows with an error: %v", err)
			case errors.As(err, &re):
				if re.Line < 1 || re.Line > bytes.Count(data, []byte("\n"))+1 || re.Reason == "" {
					t.Fatalf("row error %+v in a batch of %d lines", re, bytes.Count(data, []byte("\n"))+1)
				}
			case errors.Is(err, ErrTooLarge):
				if limit == 0 || len(data) <= int(limit) {
					t.Fatalf("a batch of %d bytes is too large for the limit %d", len(data), limit)
				}
			default:
				t.Fatalf("not a row error: %v", err)
			}
			return
		}
		if limit > 0 && len(data) > int(limit) {
			t.Fatalf("a batch of %d bytes passed the limit %d", len(data), limit)
		}
		if len(rows) > bytes.Count(data, []byte("\n"))+1 {
			t.Fatalf("%d rows from %d lines", len(rows), bytes.Count(data, []byte("\n"))+1)
		}
		types := map[string]pipeline.Column{}
		for _, c := range s.Columns {
			types[c.Name] = c
		}
		for i, row := range rows {
			for _, c := range s.Columns {
				if v, ok := row[c.Name]; notNull(s, c) && (!ok || v == nil) {
					t.Fatalf("row %d: column %q is missing or null", i, c.Name)
				}
			}
			for k, v := range row {
				c, ok := types[k]
				if !ok {
					t.Fatalf("row %d: column %q is not in the schema", i, k)
				}
				if v == nil {
					continue
				}
				if why := storable(c.Type, v); why != "" {
					t.Fatalf("row %d: column %q = %#v: %s", i, k, v, why)
				}
			}
		}
	})
}

// storable says why v cannot be stored in a column of type typ, or "".
func storable(typ string, v any) string {
	switch typ {
	case pipeline.TypeString:
		s, ok := v.(string)
		if !ok {
			return "not a string"
		}
		if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
			return "invalid UTF-8 or U+0000"
		}
	case pipeline.TypeInteger:
		if _, ok := v.(int64); !ok {
			return "not an int64"
		}
	case pipeline.TypeNumber:
		n, ok := v.(float64)
		if !ok || math.IsInf(n, 0) || math.IsNaN(n) {
			return "not a finite float64"
		}
	case pipeline.TypeBoolean:
		if _, ok := v.(bool); !ok {
			return "not a bool"
		}
	case pipeline.TypeTimestamp:
		ts, ok := v.(time.Time)
		if !ok || ts.Location() != time.UTC || !ts.Equal(ts.Truncate(time.Microsecond)) {
			return "not a time.Time in UTC to the microsecond"
		}
	case pipeline.TypeJSON:
		raw, ok := v.(json.RawMessage)
		if !ok || !json.Valid(raw) || !utf8.Valid(raw) {
			return "not valid JSON"
		}
		var b bytes.Buffer
		if json.Compact(&b, raw) != nil || !bytes.Equal(b.Bytes(), raw) {
			return "not compact"
		}
		return jsonbEscapes(raw)
	default:
		return "unknown type"
	}
	return ""
}

// jsonbEscapes says what PostgreSQL's jsonb would refuse among the \u escapes of a JSON text: a
// \u0000, or a surrogate that is not a high one followed by a low one.
func jsonbEscapes(raw []byte) string {
	inString := false
	pendingHigh := false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if !inString {
			inString = c == '"'
			continue
		}
		if c != '\\' {
			if pendingHigh {
				return "a high surrogate escape without its low one"
			}
			if c == '"' {
				inString = false
			}
			continue
		}
		i++
		if raw[i] != 'u' {
			if pendingHigh {
				return "a high surrogate escape without its low one"
			}
			continue
		}
		var v rune
		for _, h := range raw[i+1 : i+5] {
			v <<= 4
			switch {
			case h >= '0' && h <= '9':
				v |= rune(h - '0')
			case h >= 'a' && h <= 'f':
				v |= rune(h-'a') + 10
			default:
				v |= rune(h-'A') + 10
			}
		}
		i += 4
		switch {
		case v == 0:
			return `a \u0000 escape`
		case v >= 0xD800 && v < 0xDC00:
			if pendingHigh {
				return "a high surrogate escape without its low one"
			}
			pendingHigh = true
		case v >= 0xDC00 && v < 0xE000:
			if !pendingHigh {
				return "a low surrogate escape without its high one"
			}
			pendingHigh = false
		default:
			if pendingHigh {
				return "a high surrogate escape without its low one"
			}
		}
	}
	return ""
}
