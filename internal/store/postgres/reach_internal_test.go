package postgres

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/store"
)

func TestParseConfigDefaults(t *testing.T) {
	cfg, err := parseConfig("postgres://u@db.example:5432/baton")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ConnectTimeout != defaultConnectTimeout {
		t.Errorf("connect timeout %s, want %s", cfg.ConnectTimeout, defaultConnectTimeout)
	}
	if got := cfg.RuntimeParams["idle_in_transaction_session_timeout"]; got != defaultIdleInTxTimeout {
		t.Errorf("idle_in_transaction_session_timeout %q, want %q", got, defaultIdleInTxTimeout)
	}
	// What the URL sets wins.
	cfg, err = parseConfig("postgres://u@db.example:5432/baton?connect_timeout=3&idle_in_transaction_session_timeout=0")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ConnectTimeout != 3*time.Second || cfg.RuntimeParams["idle_in_transaction_session_timeout"] != "0" {
		t.Errorf("URL settings not kept: connect timeout %s, idle_in_transaction_session_timeout %q",
			cfg.ConnectTimeout, cfg.RuntimeParams["idle_in_transaction_session_timeout"])
	}
}

// TestGateClosesAndRefuses: holding the database unreachable closes the connections the pool
// dialled and refuses new ones without dialling; reachable again, dialling works.
func TestGateClosesAndRefuses(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	g := newGate(discard())
	ctx := context.Background()
	c, err := g.dialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	read := make(chan error, 1)
	go func() { _, err := c.Read(make([]byte, 1)); read <- err }()
	g.setDown(errors.New("probe: timeout"))
	if err := <-read; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read on a pool connection once unreachable: %v, want it closed", err)
	}
	if _, err := g.dialContext(ctx, "tcp", ln.Addr().String()); !errors.Is(err, store.ErrUnreachable) {
		t.Fatalf("dial while unreachable: %v, want store.ErrUnreachable", err)
	}
	if !errors.Is(g.err(), store.ErrUnreachable) {
		t.Fatalf("err while unreachable: %v", g.err())
	}
	g.setUp()
	if g.err() != nil {
		t.Fatalf("err once reachable: %v", g.err())
	}
	c, err = g.dialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	g.mu.Lock()
	n := len(g.conns)
	g.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d closed connections still tracked", n)
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
