//go:build cgo

package engine

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/baton-dev/baton/internal/query"
)

// The server's side of a job: what it sends a worker.

// project is the columns of a buffered relation that st may read: those it names, all of them
// when it may read columns it does not name, and at least one (a count of rows reads none).
func project(st *query.Statement, cols []query.Column) []query.Column {
	var out []query.Column
	for _, c := range cols {
		if st.Reads(c.Name) {
			out = append(out, c)
		}
	}
	if len(out) == 0 && len(cols) > 0 {
		out = cols[len(cols)-1:]
	}
	return out
}

// chunkRows is how many rows of a buffered relation go to a worker in one frame.
const chunkRows = 2048

// send writes j, then the rows of each buffered relation of rels (at most maxRows each), to the
// worker. The rows are read on a goroutine of their own and written as they come, so that
// reading from the data database and appending in the worker overlap.
func (w *worker) send(ctx context.Context, j *job, rels []query.Relation, maxRows int64) error {
	b, err := json.Marshal(j)
	if err != nil {
		return fmt.Errorf("query: encode the job: %w", err)
	}
	out := bufio.NewWriterSize(w.stdin, 256<<10)
	if err := writeFrame(out, frameJob, b); err != nil {
		return err
	}
	for i, r := range rels {
		if r.Rows == nil {
			continue
		}
		if err := sendRows(ctx, out, r, j.Relations[i].Columns, maxRows); err != nil {
			return err
		}
	}
	return out.Flush()
}

func sendRows(ctx context.Context, out *bufio.Writer, r query.Relation, cols []query.Column, maxRows int64) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = c.Name
	}
	chunks := make(chan []byte, 4)
	read := make(chan error, 1)
	go func() {
		defer close(chunks)
		var n, inChunk int64
		chunk := make([]byte, 0, 64<<10)
		flush := func() error {
			head := []byte{}
			head = binary.AppendUvarint(head, uint64(inChunk))
			select {
			case chunks <- append(head, chunk...):
			case <-ctx.Done():
				return ctx.Err()
			}
			chunk, inChunk = chunk[:0], 0
			return nil
		}
		err := r.Rows(ctx, names, func(vals []any) error {
			if n++; n > maxRows {
				return &query.TooLargeError{Message: fmt.Sprintf(
					"dataset %s holds more than %d rows, the most the query service reads of one buffered dataset", r.Name, maxRows)}
			}
			var err error
			for _, v := range vals {
				if chunk, err = appendValue(chunk, v); err != nil {
					return fmt.Errorf("query: relation %s: %w", r.Name, err)
				}
			}
			if inChunk++; inChunk == chunkRows {
				return flush()
			}
			return nil
		})
		if err == nil && inChunk > 0 {
			err = flush()
		}
		read <- err
	}()
	var werr error
	for chunk := range chunks {
		if werr == nil {
			if werr = writeFrame(out, frameRows, chunk); werr != nil {
				cancel() // the worker is gone: let the reader end
			}
		}
	}
	rerr := <-read
	var tooLarge *query.TooLargeError
	switch {
	case errors.As(rerr, &tooLarge): // the caller's to hear, whatever became of the worker
		return rerr
	case werr != nil:
		return werr
	case rerr != nil:
		return rerr
	}
	return writeFrame(out, frameEnd, nil)
}
