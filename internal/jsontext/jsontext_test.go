package jsontext

import "testing"

func TestCheck(t *testing.T) {
	for _, c := range []struct {
		text string
		want int // -1: none; else the bad code unit
	}{
		{`{"a":"plain"}`, -1},
		{`{"a":"\u00e9 \ud83d\ude00"}`, -1},
		{`{"a":"\\u0000"}`, -1}, // an escaped backslash, then text
		{`{"a":"\u0000"}`, 0},
		{`{"a":"\ud83d"}`, 0xd83d},
		{`{"a":"\ud83d\u0041"}`, 0xd83d},
		{`{"a":"\ude00"}`, 0xde00},
		{`{"\u0000":1}`, 0},
		{`{"a":"\u12"}`, -1}, // malformed: the decoder's to report
	} {
		got := Check([]byte(c.text))
		switch {
		case c.want < 0 && got != nil:
			t.Errorf("%s: %+v, want none", c.text, got)
		case c.want >= 0 && (got == nil || int(got.Code) != c.want):
			t.Errorf("%s: %+v, want \\u%04x", c.text, got, c.want)
		case got != nil && got.NUL() != (c.want == 0):
			t.Errorf("%s: NUL() = %v", c.text, got.NUL())
		}
	}
}
