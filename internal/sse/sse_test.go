package sse_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/request"
	"github.com/baton-dev/baton/internal/sse"
)

// rounds is a log that shows one list of entries per read, the last one for good, and ends with
// its last round.
type rounds struct {
	entries [][]sse.Entry
	round   int
	endless bool
}

func (l *rounds) Ended(context.Context) (bool, any, error) {
	l.round = min(l.round+1, len(l.entries))
	return !l.endless && l.round == len(l.entries), map[string]any{"done": true}, nil
}

func (l *rounds) After(_ context.Context, after int64, limit int) ([]sse.Entry, error) {
	var out []sse.Entry
	for _, e := range l.entries[l.round-1] {
		if e.ID > after && len(out) < limit {
			out = append(out, e)
		}
	}
	return out, nil
}

func entry(id int64) sse.Entry { return sse.Entry{ID: id, Event: "e", Data: map[string]int64{"n": id}} }

// An entry that commits late, below one already sent, is still sent, and no entry twice; the
// stream ends with the log's end event.
func TestFollowSendsEachEntryOnce(t *testing.T) {
	log := &rounds{entries: [][]sse.Entry{{entry(1), entry(3)}, {entry(1), entry(2), entry(3), entry(4)}}}
	rec := httptest.NewRecorder()
	if err := sse.Follow(rec, httptest.NewRequest("GET", "/", nil), log, 0, time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}
	want := "id: 1\nevent: e\ndata: {\"n\":1}\n\n" + "id: 3\nevent: e\ndata: {\"n\":3}\n\n" +
		"id: 2\nevent: e\ndata: {\"n\":2}\n\n" + "id: 4\nevent: e\ndata: {\"n\":4}\n\n" + "event: end\ndata: {\"done\":true}\n\n"
	if got := rec.Body.String(); rec.Code != http.StatusOK || got != want {
		t.Fatalf("%d\n%s\nwant\n%s", rec.Code, got, want)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "text/event-stream" || rec.Header().Get("Cache-Control") != "no-cache" {
		t.Fatalf("headers %v", rec.Header())
	}
}

// Entries up to `after` are not sent again; a closed stop ends a log that has not ended.
func TestFollowStops(t *testing.T) {
	log := &rounds{entries: [][]sse.Entry{{entry(1), entry(2)}}, endless: true}
	stop := make(chan struct{})
	close(stop)
	rec := httptest.NewRecorder()
	if err := sse.Follow(rec, httptest.NewRequest("GET", "/", nil), log, 1, time.Hour, stop); err != nil {
		t.Fatal(err)
	}
	if got := rec.Body.String(); got != "id: 2\nevent: e\ndata: {\"n\":2}\n\n" {
		t.Fatalf("%q", got)
	}
}

// noFlush is a writer that cannot stream.
type noFlush struct{ http.ResponseWriter }

func TestFollowNeedsAFlusher(t *testing.T) {
	err := sse.Follow(noFlush{httptest.NewRecorder()}, httptest.NewRequest("GET", "/", nil), &rounds{}, 0, time.Millisecond, nil)
	if e, ok := err.(*request.Error); !ok || e.Status != http.StatusNotAcceptable || !strings.Contains(e.Error(), "cannot stream") {
		t.Fatalf("%v", err)
	}
}
