// Package sse follows an append-only log as a Server-Sent Events answer, each entry sent once,
// until the log ends.
package sse

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/baton-dev/baton/internal/request"
)

// settleWindow is how long after delivering an entry the stream keeps re-reading from before it.
// On PostgreSQL ids come from a sequence, so an entry can commit after one with a higher id is
// already visible; re-reading a short window, and skipping ids already sent, catches it.
const settleWindow = 5 * time.Second

// keepAlive is how often an idle stream sends a comment so that proxies keep it open.
const keepAlive = 15 * time.Second

// page is how many entries one read asks for.
const page = 1000

// Entry is one entry of a log: its id, the event it is sent as, and its data (sent as JSON).
type Entry struct {
	ID    int64
	Event string
	Data  any
}

// Log is what a stream follows: entries with increasing ids, as they commit.
type Log interface {
	// Ended reports whether the log gets no more entries, and the data of the "end" event then.
	Ended(ctx context.Context) (ended bool, end any, err error)
	// After returns up to limit entries with ids above after, by id.
	After(ctx context.Context, after int64, limit int) ([]Entry, error)
}

// Follow sends the entries of log after `after` as Server-Sent Events (id, event, JSON data) as
// they commit, reading it every poll, and ends with an "end" event once the log has ended and
// everything is sent, or when the client leaves or stop closes. It answers a 406 when the
// connection cannot stream; once the stream is open, a failed read ends it without an error.
func Follow(w http.ResponseWriter, r *http.Request, log Log, after int64, poll time.Duration, stop <-chan struct{}) error {
	ctx := r.Context()
	flusher, ok := w.(http.Flusher)
	if !ok {
		return request.Errorf(http.StatusNotAcceptable, "this connection cannot stream events")
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	// The stream lasts until the log ends, past the listener's write timeout: each write gets
	// request.AnswerWindow instead (a keep-alive at least every 15 s extends it), so that a client
	// that stops reading is still cut off.
	request.HoldOpen(w, 0)
	w.WriteHeader(http.StatusOK)
	flusher.Flush()

	type delivered struct {
		id int64
		at time.Time
	}
	var recent []delivered // ids sent within the settle window, oldest first
	sent := map[int64]bool{}
	floor := after // every entry with id <= floor was sent (or precedes the stream)
	lastWrite := time.Now()
	ticker := time.NewTicker(poll)
	defer ticker.Stop()
	for {
		// Whether the log ended is read before its entries, so that none committed before the end
		// is missed.
		ended, end, err := log.Ended(ctx)
		if err != nil {
			return nil // the stream is open; an error status can no longer be sent
		}
		request.HoldOpen(w, 0)
		for {
			entries, err := log.After(ctx, floor, page)
			if err != nil {
				return nil
			}
			n := 0
			for _, e := range entries {
				if sent[e.ID] {
					continue
				}
				data, _ := json.Marshal(e.Data)
				if _, err := fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", e.ID, e.Event, data); err != nil {
					return nil
				}
				sent[e.ID] = true
				recent = append(recent, delivered{e.ID, time.Now()})
				n++
			}
			if n > 0 {
				flusher.Flush()
				lastWrite = time.Now()
			}
			if len(entries) < page {
				break
			}
			floor = entries[len(entries)-1].ID
		}
		// Advance the floor past ids delivered longer ago than the settle window.
		cutoff := time.Now().Add(-settleWindow)
		for len(recent) > 0 && recent[0].at.Before(cutoff) {
			if recent[0].id > floor {
				floor = recent[0].id
			}
			delete(sent, recent[0].id)
			recent = recent[1:]
		}
		if ended {
			data, _ := json.Marshal(end)
			fmt.Fprintf(w, "event: end\ndata: %s\n\n", data)
			flusher.Flush()
			return nil
		}
		if time.Since(lastWrite) >= keepAlive {
			fmt.Fprint(w, ": keep-alive\n\n")
			flusher.Flush()
			lastWrite = time.Now()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-stop:
			return nil
		case <-ticker.C:
		}
	}
}
