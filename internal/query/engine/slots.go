package engine

import (
	"context"
	"sync"
	"time"

	"github.com/baton-dev/baton/internal/query"
)

// slots are an engine's query slots, shared fairly: a tenant holds at most share of them at
// once. Waiting queries are served in the order they came, each as soon as a slot is free and
// its tenant is under its share, so that a tenant that saturates its share delays no one else.
type slots struct {
	mu      sync.Mutex
	free    int
	share   int
	held    map[string]int
	waiting []*slotWaiter
}

type slotWaiter struct {
	tenant  string
	granted chan struct{} // closed when the slot is the waiter's
}

func newSlots(n, share int) *slots {
	return &slots{free: n, share: share, held: map[string]int{}}
}

// acquire takes a slot for tenant, waiting at most wait for one (query.ErrBusy), or until ctx
// ends. release gives it back.
func (s *slots) acquire(ctx context.Context, tenant string, wait time.Duration) (release func(), err error) {
	release = func() { s.release(tenant) }
	s.mu.Lock()
	if len(s.waiting) == 0 && s.free > 0 && s.held[tenant] < s.share {
		s.take(tenant)
		s.mu.Unlock()
		return release, nil
	}
	w := &slotWaiter{tenant: tenant, granted: make(chan struct{})}
	s.waiting = append(s.waiting, w)
	s.grant() // a free slot that the waiters before were not eligible for
	s.mu.Unlock()

	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-w.granted:
		return release, nil
	case <-t.C:
		err = query.ErrBusy
	case <-ctx.Done():
		err = ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-w.granted: // granted as it gave up: give it back
		s.releaseLocked(tenant)
	default:
		for i, o := range s.waiting {
			if o == w {
				s.waiting = append(s.waiting[:i], s.waiting[i+1:]...)
				break
			}
		}
	}
	return nil, err
}

func (s *slots) release(tenant string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releaseLocked(tenant)
}

func (s *slots) releaseLocked(tenant string) {
	if s.held[tenant]--; s.held[tenant] <= 0 {
		delete(s.held, tenant)
	}
	s.free++
	s.grant()
}

func (s *slots) take(tenant string) {
	s.free--
	s.held[tenant]++
}

// grant hands free slots to the first waiters whose tenants are under their share.
func (s *slots) grant() {
	for i := 0; i < len(s.waiting) && s.free > 0; {
		w := s.waiting[i]
		if s.held[w.tenant] >= s.share {
			i++
			continue
		}
		s.take(w.tenant)
		close(w.granted)
		s.waiting = append(s.waiting[:i], s.waiting[i+1:]...)
	}
}

// inUse is how many slots are held, for tests.
func (s *slots) inUse() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, h := range s.held {
		n += h
	}
	return n
}
