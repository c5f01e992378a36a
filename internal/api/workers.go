package api

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/baton-dev/baton/internal/request"
	"github.com/baton-dev/baton/internal/store"
)

// What a worker says of itself when it claims — the isolation level its untrusted children get
// (the worker SDK's WithIsolation, `baton worker`'s own) — is recorded for the dashboard's worker
// list, once per change: claims that say what the worker said before write nothing.

// maxNotedWorkers bounds the workers whose last word this server keeps in memory.
const maxNotedWorkers = 10000

// workerNotes is what each worker said last, as this server recorded it.
type workerNotes struct {
	mu   sync.Mutex
	last map[string]string
}

// readIsolation reads a claim body's optional "isolation": a level's name, at most 32 bytes.
func readIsolation(f *request.Fields) (string, error) {
	v := f.Str("isolation")
	if f.Err != nil {
		return "", f.Err
	}
	if len(v) > 32 {
		return "", request.Errorf(http.StatusBadRequest, "%s.isolation must be at most 32 bytes", f.Where)
	}
	return v, nil
}

// noteWorker records that worker id's children get isolation, unless it said so last time;
// a failure to record is logged, never the claim's.
func (s *Server) noteWorker(ctx context.Context, id, isolation string) {
	if isolation == "" || s.workers == nil {
		return
	}
	n := &s.notes
	n.mu.Lock()
	if n.last == nil || len(n.last) >= maxNotedWorkers {
		n.last = map[string]string{}
	}
	same := n.last[id] == isolation
	n.last[id] = isolation
	n.mu.Unlock()
	if same {
		return
	}
	if err := s.workers.WorkerInfoPut(ctx, &store.WorkerInfo{WorkerID: id, Isolation: isolation, SeenAt: time.Now()}); err != nil {
		s.log.WarnContext(ctx, "record a worker's isolation", "worker_id", id, "err", err)
		n.mu.Lock()
		delete(n.last, id)
		n.mu.Unlock()
	}
}
