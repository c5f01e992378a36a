package reads

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/scope"
)

// TaskRowQuery is what a task asks of the rows of one of its buffered datasets.
type TaskRowQuery struct {
	// Where is the caller's own filter, with the rules of an input's where. It is ANDed with the
	// input's where, which the caller cannot widen.
	Where map[string]any
	// Cursor, when set, selects the rows of the batch with this dataset cursor (0: every batch).
	// Unset, an input reads the rows of the batch whose event started the task (of the batches
	// whose events backpressure coalesced into it), and an input that did not start it, or an
	// output, reads every batch.
	Cursor *int64
	After  int64 // the page after the one whose Next this is
	Limit  int   // 1 to 1000; default 100
}

// TaskRows reads a page of the rows of a buffered dataset that the attempt f reads (an input of
// its job, at the cursor its route pinned) or writes (an output of its job), named by its name or
// uuid; the attempt must be the current one, running under a live lease. An input's rows are
// filtered by the input's where, and by q.Where on top of it. Any other dataset is refused with
// a *dispatch.ForbiddenError that names it: this is how an untrusted task reads data, with
// nothing but its capability token.
func (rd *Reader) TaskRows(ctx context.Context, f dispatch.Fence, dataset string, q TaskRowQuery) (RowPage, error) {
	sc, err := scope.Running(ctx, rd.d, f)
	if err != nil {
		return RowPage{}, err
	}
	d, ok := sc.Readable(dataset)
	if !ok {
		return RowPage{}, &dispatch.ForbiddenError{Message: fmt.Sprintf(
			"dataset %q is not one this task reads or writes: a task reads only its job's inputs and outputs", dataset)}
	}
	uuid, in := d.UUID, d.Input
	rq := RowQuery{Where: q.Where, After: q.After, Limit: q.Limit}
	if q.Cursor != nil {
		rq.Cursor = *q.Cursor
	} else if in != nil && in.Cursor != nil && in.PartitionKey == "" {
		rq.Cursor = *in.Cursor
		if in.CursorEnd != nil {
			rq.CursorEnd = *in.CursorEnd // backpressure coalesced the events of these cursors
		}
	}
	if in != nil && len(in.Where) > 0 {
		var edge map[string]any
		if err := decodeWhere(in.Where, &edge); err != nil {
			return RowPage{}, fmt.Errorf("task %s: decode input %d's where: %w", sc.TaskID, in.InputIndex, err)
		}
		var empty bool
		if rq.Where, empty = andWhere(edge, q.Where); empty {
			return RowPage{}, nil // the two filters exclude each other: no row can match
		}
	}
	return rd.DatasetRows(ctx, sc.Tenant, uuid, rq)
}

// decodeWhere decodes an input's where as a caller's where is read: numbers keep every digit.
func decodeWhere(raw json.RawMessage, where *map[string]any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	return dec.Decode(where)
}

// andWhere is the where clause that holds where both edge and caller hold: a column either names
// is kept, and one both name keeps the values both allow (a value is one value or a list of
// them). empty says that some column is left with no value, so that no row can match.
func andWhere(edge, caller map[string]any) (where map[string]any, empty bool) {
	out := make(map[string]any, len(edge)+len(caller))
	for k, v := range edge {
		out[k] = v
	}
	for k, v := range caller {
		e, both := out[k]
		if !both {
			out[k] = v
			continue
		}
		allowed := make(map[string]bool)
		for _, a := range values(e) {
			allowed[jsonKey(a)] = true
		}
		var keep []any
		for _, x := range values(v) {
			if allowed[jsonKey(x)] {
				keep = append(keep, x)
			}
		}
		switch len(keep) {
		case 0:
			return nil, true
		case 1:
			out[k] = keep[0]
		default:
			out[k] = keep
		}
	}
	return out, false
}

// values is a where value as a list: its items, or itself.
func values(v any) []any {
	if list, ok := v.([]any); ok {
		return list
	}
	return []any{v}
}

// jsonKey is v as JSON, to compare where values by: a value that does not marshal (none does,
// they were decoded from JSON) matches nothing.
func jsonKey(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "\x00unmarshalable"
	}
	return string(b)
}
