package service_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/baton-dev/baton/internal/service"
)

type loop struct {
	service.Loop
	runs atomic.Int32
}

func (l *loop) Start(ctx context.Context) error {
	return l.Run(ctx, func(ctx context.Context) {
		l.runs.Add(1)
		<-ctx.Done()
	})
}

var _ service.Service = (*loop)(nil)

func TestLoopRunsOnceAndStopsOnce(t *testing.T) {
	var l loop
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := l.Start(context.Background()); !errors.Is(err, service.ErrStarted) {
		t.Fatalf("second Start: %v, want ErrStarted", err)
	}
	l.Stop()
	select {
	case <-l.Stopped():
	default:
		t.Fatal("Stop returned before the loop did")
	}
	l.Stop() // a second Stop does nothing
	if n := l.runs.Load(); n != 1 {
		t.Fatalf("the loop ran %d times, want 1", n)
	}
}

func TestStopBeforeStartIsSafeAndFinal(t *testing.T) {
	var l loop
	l.Stop()
	if err := l.Start(context.Background()); !errors.Is(err, service.ErrStarted) {
		t.Fatalf("Start after Stop: %v, want ErrStarted", err)
	}
	if n := l.runs.Load(); n != 0 {
		t.Fatalf("a stopped loop ran %d times", n)
	}
}

func TestLoopEndsWithItsContext(t *testing.T) {
	var l loop
	ctx, cancel := context.WithCancel(context.Background())
	if err := l.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-l.Stopped()
	l.Stop()
}
