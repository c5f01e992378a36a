package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// Events returns a page of a job's audit log: up to 1000 events with an id greater than after,
// oldest first, and the id to pass as after for the next page (after itself when there are no
// new events).
func (c *Client) Events(ctx context.Context, jobID string, after int64) ([]Event, int64, error) {
	var out struct {
		Events    []Event `json:"events"`
		NextAfter int64   `json:"nextAfter"`
	}
	path := jobPath(jobID) + "/events?after=" + strconv.FormatInt(after, 10)
	if _, err := c.do(ctx, get(path), &out); err != nil {
		return nil, 0, err
	}
	return out.Events, out.NextAfter, nil
}

// StreamEvents follows a job's audit log live, over Server-Sent Events: fn sees every event with
// an id greater than after as it is recorded, in order. StreamEvents returns nil once the job has
// finished and every event has been delivered, fn's error if fn returns one, and an error if the
// stream breaks first; to pick up where a broken stream stopped, call again with the last ID fn
// saw.
func (c *Client) StreamEvents(ctx context.Context, jobID string, after int64, fn func(Event) error) error {
	r := request{method: http.MethodGet, path: jobPath(jobID) + "/events?after=" + strconv.FormatInt(after, 10)}
	res, err := c.send(ctx, r, "text/event-stream")
	if err != nil {
		return err
	}
	if res.StatusCode/100 != 2 {
		return readAPIError(res)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		return fmt.Errorf("baton: GET %s: expected an event stream, got %q", r.path, ct)
	}
	last := after
	var fnErr error
	err = readSSE(res.Body, func(m sseMessage) error {
		if m.event == "end" {
			return errStreamEnd
		}
		var e Event
		if err := json.Unmarshal([]byte(m.data), &e); err != nil {
			return fmt.Errorf("baton: event %s of job %s: %w", m.id, jobID, err)
		}
		last = e.ID
		fnErr = fn(e)
		return fnErr
	})
	switch {
	case errors.Is(err, errStreamEnd):
		return nil
	case fnErr != nil:
		return fnErr
	case err == nil, errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("baton: event stream of job %s ended before the job did (last event %d): %w", jobID, last, io.ErrUnexpectedEOF)
	case ctx.Err() != nil:
		return fmt.Errorf("baton: event stream of job %s: %w", jobID, ctx.Err())
	}
	return fmt.Errorf("baton: event stream of job %s (last event %d): %w", jobID, last, err)
}

// errStreamEnd stops reading at the server's final "end" event.
var errStreamEnd = errors.New("end of stream")

// sseMessage is one dispatched Server-Sent Event.
type sseMessage struct {
	id, event, data string
}

// readSSE parses a text/event-stream (the WHATWG format: field lines, comments starting with a
// colon, a blank line dispatching the event) and calls fn for each event with data. It returns
// fn's first error, or nil at the end of the stream.
func readSSE(body io.Reader, fn func(sseMessage) error) error {
	br := bufio.NewReader(body)
	var m sseMessage
	var data strings.Builder
	hasData := false
	for {
		line, err := br.ReadString('\n')
		if err != nil && err != io.EOF {
			return err
		}
		if err == io.EOF && line == "" {
			return nil
		}
		line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		switch {
		case line == "":
			if hasData {
				m.data = data.String()
				if err := fn(m); err != nil {
					return err
				}
			}
			m, hasData = sseMessage{}, false
			data.Reset()
		case strings.HasPrefix(line, ":"): // a comment: keep-alive
		default:
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "id":
				m.id = value
			case "event":
				m.event = value
			case "data":
				if hasData {
					data.WriteByte('\n')
				}
				data.WriteString(value)
				hasData = true
			}
		}
		if err == io.EOF {
			return nil // an event not closed by a blank line is discarded, as the format says
		}
	}
}
