package dataset

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/baton-dev/baton/internal/jsontext"
	"github.com/baton-dev/baton/internal/pipeline"
)

// Row is one row of a dataset: column → value, typed by the column's type (string, int64,
// float64, bool, time.Time, json.RawMessage); a column that is missing or nil is null.
type Row map[string]any

// RowError says which row of a batch is bad, and why.
type RowError struct {
	Line   int // the row's line in the batch, from 1
	Reason string
}

func (e *RowError) Error() string { return fmt.Sprintf("row %d: %s", e.Line, e.Reason) }

// ErrTooLarge: a batch longer than its limit.
var ErrTooLarge = errors.New("batch is too large")

// DefaultMaxBatchBytes is ParseBatch's limit when it is given none.
const DefaultMaxBatchBytes = 64 << 20

// ParseBatch reads a JSONL batch, one JSON object per non-empty line, of at most maxBytes
// (0: DefaultMaxBatchBytes) and checks every row against s. A row may hold the columns of s and
// nothing else but "org_id", which is dropped: the tenant comes from whoever published the batch.
// Required columns and those of the unique key must be present and not null; every value must be
// of its column's type:
//
//	string     a JSON string
//	integer    a JSON number with an integral value that fits in 64 bits (2, 2.0, 2e3), as int64
//	number     a JSON number, as float64
//	boolean    true or false
//	timestamp  an RFC 3339 string, as a time.Time in UTC truncated to microseconds (what
//	           PostgreSQL keeps)
//	json       any JSON value, as json.RawMessage
//
// and no text may hold the character U+0000, which PostgreSQL cannot store. The first bad row
// fails the whole batch with a *RowError; a batch over the limit fails with ErrTooLarge.
func ParseBatch(r io.Reader, s *pipeline.Schema, maxBytes int64) ([]Row, error) {
	if err := checkSchema(s); err != nil {
		return nil, err
	}
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBatchBytes
	}
	p := newRowParser(s)
	br := bufio.NewReaderSize(io.LimitReader(r, maxBytes+1), 64<<10)
	var (
		rows []Row
		line []byte
		size int64
	)
	for n := 1; ; n++ {
		chunk, err := br.ReadSlice('\n')
		line = append(line[:0], chunk...)
		for errors.Is(err, bufio.ErrBufferFull) {
			chunk, err = br.ReadSlice('\n')
			line = append(line, chunk...)
		}
		if size += int64(len(line)); size > maxBytes {
			return nil, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, maxBytes)
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("read batch: %w", err)
		}
		if text := bytes.TrimSpace(line); len(text) > 0 {
			row, reason := p.parse(text)
			if reason != "" {
				return nil, &RowError{Line: n, Reason: reason}
			}
			rows = append(rows, row)
		}
		if err != nil {
			return rows, nil
		}
	}
}

// rowParser checks rows against one schema.
type rowParser struct {
	s     *pipeline.Schema
	types map[string]string // column → type
}

func newRowParser(s *pipeline.Schema) *rowParser {
	p := &rowParser{s: s, types: make(map[string]string, len(s.Columns))}
	for _, c := range s.Columns {
		p.types[c.Name] = c.Type
	}
	return p
}

// parse reads one line, or says what is wrong with it.
func (p *rowParser) parse(line []byte) (Row, string) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil {
		return nil, invalidJSON(err)
	} else if tok != json.Delim('{') {
		return nil, "must be a JSON object"
	}
	row := make(Row, len(p.types))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, invalidJSON(err)
		}
		key := tok.(string) // an object's keys are strings, or Token fails
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, invalidJSON(err)
		}
		if key == "org_id" {
			continue
		}
		typ, ok := p.types[key]
		if !ok {
			return nil, fmt.Sprintf("unknown column %q", key)
		}
		if _, dup := row[key]; dup {
			return nil, fmt.Sprintf("column %q appears twice", key)
		}
		v, reason := value(typ, raw)
		if reason != "" {
			return nil, fmt.Sprintf("column %q %s", key, reason)
		}
		row[key] = v
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, invalidJSON(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, "must hold one JSON object, and nothing after it"
	}
	for _, c := range p.s.Columns {
		if !notNull(p.s, c) {
			continue
		}
		v, present := row[c.Name]
		switch {
		case !present:
			return nil, fmt.Sprintf("column %q is required", c.Name)
		case v == nil && c.Required:
			return nil, fmt.Sprintf("column %q is required and must not be null", c.Name)
		case v == nil:
			return nil, fmt.Sprintf("column %q is part of the unique key and must not be null", c.Name)
		}
	}
	return row, ""
}

// invalidJSON says what is wrong with a line that is not JSON.
func invalidJSON(err error) string {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "invalid JSON: the line ends inside the object"
	}
	return "invalid JSON: " + err.Error()
}

// value converts one JSON value to a value of a column of type typ, or says what is wrong with it
// (after the column's name).
func value(typ string, raw json.RawMessage) (any, string) {
	if string(raw) == "null" {
		return nil, ""
	}
	isNumber := raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9'
	switch typ {
	case pipeline.TypeString:
		var s string
		if raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
			return nil, "must be a string"
		}
		if strings.IndexByte(s, 0) >= 0 {
			return nil, "must not hold the character U+0000"
		}
		return s, ""
	case pipeline.TypeInteger:
		if !isNumber {
			return nil, "must be an integer"
		}
		return integer(string(raw))
	case pipeline.TypeNumber:
		if !isNumber {
			return nil, "must be a number"
		}
		f, err := strconv.ParseFloat(string(raw), 64)
		if err != nil {
			return nil, "is out of range for a 64-bit floating point number"
		}
		return f, ""
	case pipeline.TypeBoolean:
		switch string(raw) {
		case "true":
			return true, ""
		case "false":
			return false, ""
		}
		return nil, "must be true or false"
	case pipeline.TypeTimestamp:
		var s string
		if raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
			return nil, "must be an RFC 3339 timestamp string"
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return nil, "must be an RFC 3339 timestamp string"
		}
		return t.UTC().Truncate(time.Microsecond), ""
	case pipeline.TypeJSON:
		if e := jsontext.Check(raw); e != nil {
			if e.NUL() {
				return nil, "must not hold the character U+0000"
			}
			return nil, fmt.Sprintf("must not hold an unpaired UTF-16 surrogate escape (\\u%04x)", e.Code)
		}
		if !utf8.Valid(raw) {
			return nil, "must be valid UTF-8"
		}
		var b bytes.Buffer
		if err := json.Compact(&b, raw); err != nil {
			return nil, invalidJSON(err)
		}
		return json.RawMessage(b.Bytes()), ""
	}
	return nil, "has an unknown type"
}

// integer reads a JSON number literal whose value is integral and fits in an int64. It works on
// the literal's digits, never through a float (which would round 2^53+1) nor a big number (which
// 1e999999999 would make enormous).
func integer(lit string) (any, string) {
	const (
		notIntegral = "must be an integer"
		outOfRange  = "is out of range for a 64-bit integer"
	)
	sign := ""
	if lit[0] == '-' {
		sign, lit = "-", lit[1:]
	}
	mantissa, exp := lit, int64(0)
	if i := strings.IndexAny(lit, "eE"); i >= 0 {
		mantissa = lit[:i]
		e, err := strconv.ParseInt(strings.TrimPrefix(lit[i+1:], "+"), 10, 32)
		if err != nil { // beyond ±2^31: anything but a zero is out of range or not integral
			if strings.Trim(mantissa, "0.") == "" {
				return int64(0), ""
			}
			if lit[i+1] == '-' {
				return nil, notIntegral
			}
			return nil, outOfRange
		}
		exp = e
	}
	whole, frac, _ := strings.Cut(mantissa, ".")
	digits := whole + frac
	point := int64(len(whole)) + exp // the decimal point sits after this many digits
	trimmed := strings.TrimLeft(digits, "0")
	point -= int64(len(digits) - len(trimmed))
	digits = strings.TrimRight(trimmed, "0")
	switch {
	case digits == "":
		return int64(0), ""
	case point < int64(len(digits)):
		return nil, notIntegral
	case point > 19:
		return nil, outOfRange
	}
	v, err := strconv.ParseInt(sign+digits+strings.Repeat("0", int(point)-len(digits)), 10, 64)
	if err != nil {
		return nil, outOfRange
	}
	return v, ""
}
