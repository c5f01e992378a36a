//go:build cgo

package engine

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/baton-dev/baton/internal/query"
)

// The server and a query worker speak frames over the worker's stdin and stdout: a 4-byte
// big-endian length, a kind byte, then that many bytes.
//
//	worker → server  'Y' ready: started, waiting for its job
//	server → worker  'J' the job (JSON)
//	server → worker  'R' rows of the next buffered relation (rowCodec), then 'E' at its end
//	worker → server  'A' the answer (JSON), after which it exits
const (
	frameReady  byte = 'Y'
	frameJob    byte = 'J'
	frameRows   byte = 'R'
	frameEnd    byte = 'E'
	frameAnswer byte = 'A'
)

// maxFrame bounds a frame from the other side: a job names at most MaxSQLBytes of SQL and the
// files of its relations; an answer holds at most query.MaxBytes of rows.
const maxFrame = 64 << 20

func writeFrame(w io.Writer, kind byte, payload []byte) error {
	var head [5]byte
	binary.BigEndian.PutUint32(head[:4], uint32(len(payload)))
	head[4] = kind
	if _, err := w.Write(head[:]); err != nil {
		return err
	}
	_, err := w.Write(payload)
	return err
}

// readFrame reads one frame, reusing buf when it is large enough.
func readFrame(r io.Reader, buf []byte) (kind byte, payload []byte, err error) {
	var head [5]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(head[:4])
	if n > maxFrame {
		return 0, nil, fmt.Errorf("a frame of %d bytes", n)
	}
	if uint32(cap(buf)) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return head[4], buf, nil
}

// job is what a worker runs: one checked statement over its relations, within its limits.
type job struct {
	SQL         string        `json:"sql"`
	Threads     int           `json:"threads"`
	MemoryLimit string        `json:"memory_limit"` // DuckDB's spelling
	SpillLimit  int64         `json:"spill_limit"`  // bytes of DuckDB's temporary files
	Dir         string        `json:"dir"`          // the worker's own directory; DuckDB's temporary files go to Dir/tmp
	Rows        int           `json:"rows"`
	Bytes       int           `json:"bytes"`
	Relations   []jobRelation `json:"relations"`
}

// jobRelation is one relation of a job: buffered (its Columns' rows follow the job, in the
// order of the relations), or a view over Files.
type jobRelation struct {
	Name     string         `json:"name"`
	Version  string         `json:"version,omitempty"`
	Buffered bool           `json:"buffered,omitempty"`
	Columns  []query.Column `json:"columns,omitempty"`
	Files    []jobFile      `json:"files,omitempty"`
}

// jobFile is a Parquet file: where the worker reads it, and its key in the object storage,
// which messages name instead of the local path.
type jobFile struct {
	Path string `json:"path"`
	Key  string `json:"key"`
}

// answer is a worker's answer: the statement's columns and rows, or why it has none.
type answer struct {
	Columns   []query.ResultColumn `json:"columns,omitempty"`
	Rows      []json.RawMessage    `json:"rows,omitempty"` // each a JSON array
	Truncated bool                 `json:"truncated,omitempty"`
	Error     *answerError         `json:"error,omitempty"`
}

// answerError is a statement that did not run to its end, by kind: failed (query.FailedError),
// too_large (query.TooLargeError), not_readable (query.NotReadableError) or internal (Baton's).
type answerError struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

const (
	errFailed      = "failed"
	errTooLarge    = "too_large"
	errNotReadable = "not_readable"
	errInternal    = "internal"
)

// err is the error a server answers for e.
func (e *answerError) err() error {
	switch e.Kind {
	case errFailed:
		return &query.FailedError{Message: e.Message}
	case errTooLarge:
		return &query.TooLargeError{Message: e.Message}
	case errNotReadable:
		return &query.NotReadableError{Message: e.Message}
	}
	return fmt.Errorf("query: %s", e.Message) // internal: Baton's failure, not the caller's
}

// The values of a buffered relation's rows travel as a tag byte and its bytes: strings (and
// JSON text) with their length, integers as varints, floats as 8 bytes, times as seconds and
// nanoseconds since the epoch.
const (
	tagNull byte = iota
	tagString
	tagInt
	tagFloat
	tagFalse
	tagTrue
	tagTime
)

// appendValue appends v (a value a query.RowSource yields) to b.
func appendValue(b []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return append(b, tagNull), nil
	case string:
		b = append(b, tagString)
		b = binary.AppendUvarint(b, uint64(len(v)))
		return append(b, v...), nil
	case []byte:
		b = append(b, tagString)
		b = binary.AppendUvarint(b, uint64(len(v)))
		return append(b, v...), nil
	case int64:
		return binary.AppendVarint(append(b, tagInt), v), nil
	case int:
		return binary.AppendVarint(append(b, tagInt), int64(v)), nil
	case float64:
		return binary.LittleEndian.AppendUint64(append(b, tagFloat), math.Float64bits(v)), nil
	case bool:
		if v {
			return append(b, tagTrue), nil
		}
		return append(b, tagFalse), nil
	case time.Time:
		b = binary.AppendVarint(append(b, tagTime), v.Unix())
		return binary.AppendUvarint(b, uint64(v.Nanosecond())), nil
	}
	return b, fmt.Errorf("a value of type %T", v)
}

// valueReader reads the values appendValue wrote.
type valueReader struct {
	b   []byte
	err error
}

func (r *valueReader) value() any {
	if len(r.b) == 0 {
		r.err = io.ErrUnexpectedEOF
		return nil
	}
	tag := r.b[0]
	r.b = r.b[1:]
	switch tag {
	case tagNull:
		return nil
	case tagString:
		n := r.uvarint()
		if r.err != nil || uint64(len(r.b)) < n {
			r.err = io.ErrUnexpectedEOF
			return nil
		}
		s := string(r.b[:n])
		r.b = r.b[n:]
		return s
	case tagInt:
		return r.varint()
	case tagFloat:
		if len(r.b) < 8 {
			r.err = io.ErrUnexpectedEOF
			return nil
		}
		f := math.Float64frombits(binary.LittleEndian.Uint64(r.b))
		r.b = r.b[8:]
		return f
	case tagFalse:
		return false
	case tagTrue:
		return true
	case tagTime:
		sec, nsec := r.varint(), r.uvarint()
		return time.Unix(sec, int64(nsec)).UTC()
	}
	r.err = fmt.Errorf("a value tagged %d", tag)
	return nil
}

func (r *valueReader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = io.ErrUnexpectedEOF
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *valueReader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = io.ErrUnexpectedEOF
		return 0
	}
	r.b = r.b[n:]
	return v
}
