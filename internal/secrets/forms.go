package secrets

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// forms returns the texts value may take in a log line, the value itself first: those the
// Redactor's documentation lists, less any shorter than MinRedactLen.
func forms(value string) []string {
	b := []byte(value)
	out := []string{value}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
		raw := enc.WithPadding(base64.NoPadding)
		out = append(out, enc.EncodeToString(b), raw.EncodeToString(b))
		for shift := range 3 {
			out = append(out, shiftedBase64(raw, b, shift))
		}
	}
	out = append(out,
		url.QueryEscape(value), url.PathEscape(value),
		jsonString(value, true), jsonString(value, false),
		unquote(strconv.Quote(value)),
		hex.EncodeToString(b), strings.ToUpper(hex.EncodeToString(b)))
	return slices.DeleteFunc(out, func(f string) bool { return len(f) < MinRedactLen })
}

// shiftedBase64 returns the characters of the base64 encoding of b behind shift bytes that b
// alone decides: a character carries six bits, so the first and last characters that b shares
// with its neighbours are trimmed.
func shiftedBase64(enc *base64.Encoding, b []byte, shift int) string {
	s := enc.EncodeToString(append(make([]byte, shift), b...))
	first := (8*shift + 5) / 6       // the first character whose six bits all lie in b
	last := 8 * (shift + len(b)) / 6 // one past the last such character
	if first >= last {
		return ""
	}
	return s[first:last]
}

// jsonString is value encoded as a JSON string, without its quotes.
func jsonString(value string, escapeHTML bool) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(escapeHTML)
	if err := enc.Encode(value); err != nil {
		return value // a string always encodes
	}
	return unquote(strings.TrimSuffix(buf.String(), "\n"))
}

// unquote drops the first and last characters of a quoted text.
func unquote(s string) string { return s[1 : len(s)-1] }
