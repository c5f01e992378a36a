package wire_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/baton-dev/baton/wire"
)

func TestTimesOnTheWire(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 890_000_000, time.FixedZone("CET", 3600))
	for _, c := range []struct {
		name string
		v    any
		want string
	}{
		{"seconds", wire.Time{Time: at}, `"2026-03-04T04:06:07Z"`},
		{"milliseconds", wire.MilliTime{Time: at}, `"2026-03-04T04:06:07.890Z"`},
		{"no time", wire.Time{}, `null`},
		{"no milli time", wire.MilliTime{}, `null`},
	} {
		b, err := json.Marshal(c.v)
		if err != nil || string(b) != c.want {
			t.Errorf("%s: %s, %v; want %s", c.name, b, err, c.want)
		}
	}
	for _, c := range []struct {
		in   string
		want time.Time
		bad  bool
	}{
		{in: `"2026-03-04T04:06:07Z"`, want: at.Truncate(time.Second)},
		{in: `"2026-03-04T04:06:07.890Z"`, want: at},
		{in: `"2026-03-04T05:06:07.89+01:00"`, want: at},
		{in: `"2026-03-04T04:06:07.89\u0030Z"`, want: at}, // an escaped character is decoded first
		{in: `null`},
		{in: `"yesterday"`, bad: true},
		{in: `12`, bad: true},
	} {
		var got wire.MilliTime
		err := json.Unmarshal([]byte(c.in), &got)
		if (err != nil) != c.bad || (!c.bad && !got.Equal(c.want)) {
			t.Errorf("read %s: %v, %v; want %v (refused: %v)", c.in, got.Time, err, c.want, c.bad)
		}
		var sec wire.Time
		if err := json.Unmarshal([]byte(c.in), &sec); (err != nil) != c.bad {
			t.Errorf("read %s to the second: %v", c.in, err)
		}
	}
}
