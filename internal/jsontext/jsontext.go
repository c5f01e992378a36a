// Package jsontext finds the string escapes of a JSON text that PostgreSQL's text and jsonb
// cannot store, so that such input is refused where it arrives instead of failing a write later.
package jsontext

import "strconv"

// BadEscape is an escape PostgreSQL refuses: \u0000, or a UTF-16 surrogate that is not a high
// one followed by a low one (\ud800 alone).
type BadEscape struct {
	Code uint16 // the escaped code unit
}

// NUL reports whether the escape is \u0000; otherwise it is an unpaired surrogate.
func (e *BadEscape) NUL() bool { return e.Code == 0 }

// Check returns the first bad escape in the strings of the JSON text b, or nil. It does not check
// the syntax: a malformed escape is left to the decoder. A text without `\u` costs one scan.
func Check(b []byte) *BadEscape {
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if !inString {
			inString = c == '"'
			continue
		}
		switch c {
		case '"':
			inString = false
		case '\\':
			if i+1 >= len(b) || b[i+1] != 'u' {
				i++ // an escaped character: skip it
				continue
			}
			v, ok := hex4(b, i+2)
			if !ok {
				return nil // malformed: the decoder says where
			}
			i += 5
			switch {
			case v == 0, v >= 0xDC00 && v < 0xE000:
				return &BadEscape{Code: v}
			case v >= 0xD800 && v < 0xDC00:
				low, ok := uint16(0), i+2 < len(b) && b[i+1] == '\\' && b[i+2] == 'u'
				if ok {
					low, ok = hex4(b, i+3)
				}
				if !ok || low < 0xDC00 || low >= 0xE000 {
					return &BadEscape{Code: v}
				}
				i += 6
			}
		}
	}
	return nil
}

// hex4 reads the four hex digits at b[at:].
func hex4(b []byte, at int) (uint16, bool) {
	if at+4 > len(b) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(b[at:at+4]), 16, 16)
	return uint16(v), err == nil
}
