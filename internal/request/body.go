package request

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"unicode/utf8"

	"github.com/baton-dev/baton/internal/jsontext"
)

// ReadBody reads the whole request body (the caller caps its size with http.MaxBytesReader),
// refusing text no store can keep (CheckJSONText), once for the whole body. A body over the cap
// is the reader's *http.MaxBytesError, for the caller to answer.
func ReadBody(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(r.Body)
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return nil, err
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// The listener's read timeout passed before the whole body came (a client too slow, or
		// one that stopped sending): the connection is closed after this answer.
		return nil, Errorf(http.StatusRequestTimeout, "the request body did not arrive within the server's read timeout")
	}
	if err != nil {
		return nil, Errorf(http.StatusBadRequest, "could not read the request body: %v", err)
	}
	if err := CheckJSONText(b); err != nil {
		return nil, err
	}
	return b, nil
}

// CheckJSONText refuses a JSON text that PostgreSQL's text and jsonb could not store: invalid
// UTF-8, a \u0000 escape, or an unpaired UTF-16 surrogate escape (\ud800 alone). It does not
// check the syntax (the decoder does); it only looks at string escapes, and only when there are
// any, so a body without \u costs one UTF-8 scan.
func CheckJSONText(b []byte) error {
	if !utf8.Valid(b) {
		return Errorf(http.StatusBadRequest, "request body must be valid UTF-8")
	}
	if !bytes.Contains(b, []byte(`\u`)) {
		return nil
	}
	if e := jsontext.Check(b); e != nil {
		if e.NUL() {
			return Errorf(http.StatusBadRequest, `request body must not contain \u0000 (a NUL character) in a string`)
		}
		return Errorf(http.StatusBadRequest, `request body has an unpaired UTF-16 surrogate escape (\u%04x)`, e.Code)
	}
	return nil
}

// ReadObject reads the request body (ReadBody) as one JSON object (DecodeObject).
func ReadObject(r *http.Request) (map[string]json.RawMessage, error) {
	body, err := ReadBody(r)
	if err != nil {
		return nil, err
	}
	return DecodeObject(body)
}

// DecodeObject parses body as one JSON object and returns its members, numbers kept exact.
func DecodeObject(body []byte) (map[string]json.RawMessage, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, Errorf(http.StatusBadRequest, "request body is empty: send a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var obj map[string]json.RawMessage
	if err := dec.Decode(&obj); err != nil {
		return nil, malformed(err)
	}
	if obj == nil {
		return nil, Errorf(http.StatusBadRequest, "request body must be a JSON object, not null")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, Errorf(http.StatusBadRequest, "malformed JSON: unexpected data after the top-level object")
	}
	return obj, nil
}

func malformed(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return Errorf(http.StatusBadRequest, "malformed JSON at byte %d: %v", syn.Offset, syn)
	case errors.As(err, &typ):
		return Errorf(http.StatusBadRequest, "request body must be a JSON object, not %s", typ.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return Errorf(http.StatusBadRequest, "malformed JSON: unexpected end of input")
	}
	return Errorf(http.StatusBadRequest, "malformed JSON: %v", err)
}

// NoBody accepts no body, an empty object or null, so that `curl -X POST` and clients that
// always send {} both work.
func NoBody(r *http.Request) error {
	b, err := ReadBody(r)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	var v map[string]json.RawMessage
	if json.Unmarshal(b, &v) != nil || len(v) > 0 {
		return Errorf(http.StatusBadRequest, "this endpoint takes no request body (send nothing, {} or null)")
	}
	return nil
}

// IsNull reports whether raw is the JSON null.
func IsNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// Compact returns raw without insignificant space, or raw itself if it is not valid JSON.
func Compact(raw json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return raw
	}
	return b.Bytes()
}

// Fields reads typed members of one object, keeping the first type error in Err. Where names
// the object in messages ("body.attempt must be an integer"). An absent or null member reads as
// the zero value (a string) or nil (a number).
type Fields struct {
	Obj   map[string]json.RawMessage
	Where string
	Err   error
}

// Fail records that member name is not what it must be (want, such as "a string"), unless an
// earlier member already failed.
func (f *Fields) Fail(name, want string) {
	if f.Err == nil {
		f.Err = Errorf(http.StatusBadRequest, "%s.%s must be %s", f.Where, name, want)
	}
}

// Str reads a string member.
func (f *Fields) Str(name string) string {
	raw, ok := f.Obj[name]
	if !ok || IsNull(raw) {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		f.Fail(name, "a string")
	}
	return s
}

// Required reads a string member that must be present and not empty.
func (f *Fields) Required(name string) string {
	v := f.Str(name)
	if v == "" && f.Err == nil {
		f.Err = Errorf(http.StatusBadRequest, "%s.%s is required: a non-empty string", f.Where, name)
	}
	return v
}

// Bool reads a boolean member.
func (f *Fields) Bool(name string) *bool {
	raw, ok := f.Obj[name]
	if !ok || IsNull(raw) {
		return nil
	}
	var b bool
	if json.Unmarshal(raw, &b) != nil {
		f.Fail(name, "true or false")
		return nil
	}
	return &b
}

// Int64 reads an integer member.
func (f *Fields) Int64(name string) *int64 {
	raw, ok := f.Obj[name]
	if !ok || IsNull(raw) {
		return nil
	}
	n, err := strconv.ParseInt(string(bytes.TrimSpace(raw)), 10, 64)
	if err != nil {
		f.Fail(name, "an integer")
		return nil
	}
	return &n
}

// Int reads an integer member in the 32-bit range.
func (f *Fields) Int(name string) *int {
	n := f.Int64(name)
	if n == nil {
		return nil
	}
	if *n < -1<<31 || *n > 1<<31-1 {
		f.Fail(name, "an integer in the 32-bit range")
		return nil
	}
	v := int(*n)
	return &v
}
