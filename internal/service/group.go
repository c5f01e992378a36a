package service

import (
	"context"
	"fmt"
	"slices"
	"sync"
)

// Group is a Service made of named services: Start starts them in the order they were added, and
// stops those it started when one fails; Stop stops them in reverse order.
type Group struct {
	mu      sync.Mutex
	names   []string
	members []Service
	started bool
}

// Add adds svc under name; add every member before Start.
func (g *Group) Add(name string, svc Service) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.names = append(g.names, name)
	g.members = append(g.members, svc)
}

// Names lists the members' names in start order.
func (g *Group) Names() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.names)
}

// Start starts every member. A member that fails to start is named in the error, and the members
// started before it are stopped again. It fails with ErrStarted when called twice or after Stop.
func (g *Group) Start(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.started {
		return ErrStarted
	}
	g.started = true
	for i, svc := range g.members {
		if err := svc.Start(ctx); err != nil {
			for _, started := range slices.Backward(g.members[:i]) {
				started.Stop()
			}
			return fmt.Errorf("start service %s: %w", g.names[i], err)
		}
	}
	return nil
}

// Stop stops every member, the last started first, and waits for each.
func (g *Group) Stop() {
	g.mu.Lock()
	g.started = true // a group stopped before it started never starts
	members := slices.Clone(g.members)
	g.mu.Unlock()
	for _, svc := range slices.Backward(members) {
		svc.Stop()
	}
}
