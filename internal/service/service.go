// Package service is the start-and-stop contract of the background loops a Baton process runs,
// and Loop, which keeps it for a loop that is one goroutine.
package service

import (
	"context"
	"errors"
	"sync"
)

// Service is a background part of a process: Start launches it and returns at once; Stop ends it
// and returns when it has ended. Stop is safe to call more than once, and before Start (it then
// does nothing). A stopped service is not started again.
type Service interface {
	Start(ctx context.Context) error
	Stop()
}

// ErrStarted is Start's answer for a service that was already started, or already stopped.
var ErrStarted = errors.New("service: started more than once")

// Loop keeps the Service contract for a loop that runs in one goroutine until its context ends.
// Embed it and implement Start as a call to Run with the loop's body.
type Loop struct {
	mu      sync.Mutex
	cancel  context.CancelFunc
	done    chan struct{}
	started bool
}

// Run starts run in a goroutine with a context that Stop cancels. It fails with ErrStarted on a
// second call, and after Stop.
func (l *Loop) Run(ctx context.Context, run func(ctx context.Context)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.started {
		return ErrStarted
	}
	l.started = true
	ctx, l.cancel = context.WithCancel(ctx)
	l.done = make(chan struct{})
	go func() {
		defer close(l.done)
		run(ctx)
	}()
	return nil
}

// Stop cancels the loop's context and waits for it to return. Calling it again, or before Run,
// does nothing more.
func (l *Loop) Stop() {
	l.mu.Lock()
	cancel, done := l.cancel, l.done
	l.started = true // a loop stopped before it started never starts
	l.cancel = nil
	l.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// Stopped returns a channel that is closed once the loop has returned; nil before Run.
func (l *Loop) Stopped() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.done
}

// Func is a Service that runs fn in one goroutine until its context ends.
func Func(fn func(ctx context.Context)) Service { return &funcService{fn: fn} }

type funcService struct {
	Loop
	fn func(ctx context.Context)
}

func (f *funcService) Start(ctx context.Context) error { return f.Run(ctx, f.fn) }
