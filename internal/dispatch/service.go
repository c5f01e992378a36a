package dispatch

import (
	"context"
	"sync"
)

// service is the lifecycle of a background loop: start it once, then Stop cancels it and waits
// for it to return; Stop may be called more than once, and before Start.
type service struct {
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

func (s *service) start(ctx context.Context, run func(context.Context)) {
	ctx, s.cancel = context.WithCancel(ctx)
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		run(ctx)
	}()
}

// Stop stops the loop and waits for it.
func (s *service) Stop() {
	s.once.Do(func() {
		if s.cancel != nil {
			s.cancel()
			<-s.done
		}
	})
}
