//go:build cgo

package engine

import (
	"fmt"
	"math"
	"math/big"
	"strings"
	"time"

	"github.com/duckdb/duckdb-go/v2"
)

// jsonValue is v, a value of a column of DuckDB type typ as the driver scans it, as the answer
// carries it:
//
//   - booleans, integers up to 64 bits and finite floats are JSON numbers and booleans (a
//     non-finite float is null);
//   - UBIGINT, HUGEINT, UHUGEINT and DECIMAL are strings, so that no digit is lost (a DECIMAL
//     with all the digits of its scale);
//   - TIMESTAMPTZ is an RFC 3339 string in UTC; TIMESTAMP, which has no zone, the same without
//     one (2006-01-02T15:04:05.999999999); DATE is 2006-01-02, TIME 15:04:05.999999, TIMETZ the
//     same with its offset;
//   - INTERVAL is {"months", "days", "micros"}, BLOB a base64 string, UUID its text;
//   - LIST and ARRAY are arrays, STRUCT and JSON objects are objects, MAP is an array of
//     {"key", "value"} in its order, a UNION its value;
//   - anything else is its text.
func jsonValue(typ string, v any) any {
	switch v := v.(type) {
	case nil, bool, string, int8, int16, int32, int64, uint8, uint16, uint32:
		return v
	case int:
		return v
	case uint64:
		return fmt.Sprint(v)
	case float32:
		return finite(float64(v))
	case float64:
		return finite(v)
	case *big.Int:
		return v.String()
	case duckdb.Decimal:
		return decimalText(v)
	case []byte:
		return v
	case time.Time:
		switch typ {
		case "DATE":
			return v.Format(time.DateOnly)
		case "TIME":
			return v.Format("15:04:05.999999")
		case "TIMETZ", "TIME WITH TIME ZONE":
			return v.Format("15:04:05.999999Z07:00")
		case "TIMESTAMP", "TIMESTAMP_S", "TIMESTAMP_MS", "TIMESTAMP_NS":
			return v.Format("2006-01-02T15:04:05.999999999") // no zone: the value has none
		}
		return v.UTC().Format(time.RFC3339Nano)
	case duckdb.Interval:
		return map[string]any{"months": v.Months, "days": v.Days, "micros": v.Micros}
	case duckdb.UUID:
		return v.String()
	case *duckdb.UUID:
		return v.String()
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = jsonValue("", e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = jsonValue("", e)
		}
		return out
	case duckdb.OrderedMap:
		keys, vals := v.Keys(), v.Values()
		out := make([]any, len(keys))
		for i := range keys {
			out[i] = map[string]any{"key": jsonValue("", keys[i]), "value": jsonValue("", vals[i])}
		}
		return out
	case duckdb.Union:
		return jsonValue("", v.Value)
	case fmt.Stringer:
		return v.String()
	}
	return fmt.Sprint(v)
}

func finite(f float64) any {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return nil
	}
	return f
}

// decimalText is a DECIMAL's exact digits with its scale: 1.50 as DECIMAL(5,2) is "1.50".
func decimalText(d duckdb.Decimal) string {
	digits := new(big.Int).Abs(d.Value).String()
	sign := ""
	if d.Value.Sign() < 0 {
		sign = "-"
	}
	scale := int(d.Scale)
	if scale == 0 {
		return sign + digits
	}
	if len(digits) <= scale {
		digits = strings.Repeat("0", scale-len(digits)+1) + digits
	}
	return sign + digits[:len(digits)-scale] + "." + digits[len(digits)-scale:]
}
