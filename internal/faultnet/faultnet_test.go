package faultnet_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/faultnet"
)

// echoServer echoes every connection back and passes on an orderly end (half-close); it counts
// the connections it accepted and the bytes it received, and records how each connection ended.
type echoServer struct {
	ln       net.Listener
	accepted atomic.Int64
	received atomic.Int64
	ends     chan error // the read error that ended each connection (io.EOF for an orderly end)
	wg       sync.WaitGroup
}

func newEcho(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echoServer{ln: ln, ends: make(chan error, 100)}
	e.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.accepted.Add(1)
			e.wg.Go(func() {
				defer c.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					e.received.Add(int64(n))
					if n > 0 {
						if _, werr := c.Write(buf[:n]); werr != nil {
							e.ends <- werr
							return
						}
					}
					if err != nil {
						if errors.Is(err, io.EOF) {
							c.(*net.TCPConn).CloseWrite()
						}
						e.ends <- err
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() { ln.Close(); e.wg.Wait() })
	return e
}

func (e *echoServer) addr() string { return e.ln.Addr().String() }

// nextEnd waits for how the next connection of the echo server ended.
func (e *echoServer) nextEnd(t *testing.T) error {
	t.Helper()
	select {
	case err := <-e.ends:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("the echo server's connection did not end")
		return nil
	}
}

func newProxy(t *testing.T, target string) *faultnet.Proxy {
	t.Helper()
	p, err := faultnet.Listen("127.0.0.1:0", target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes msg and reads it back within the deadline.
func roundTrip(c net.Conn, msg []byte, deadline time.Duration) error {
	if _, err := c.Write(msg); err != nil {
		return err
	}
	c.SetReadDeadline(time.Now().Add(deadline))
	defer c.SetReadDeadline(time.Time{})
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if !bytes.Equal(got, msg) {
		return errors.New("echo differs from what was sent")
	}
	return nil
}

func mustEcho(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	if err := roundTrip(c, []byte(msg), 10*time.Second); err != nil {
		t.Fatalf("echo %q: %v", msg, err)
	}
}

// silent asserts that nothing arrives on c for a short while: the only way to see that a held
// byte stays held.
func silent(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(150 * time.Millisecond))
	defer c.SetReadDeadline(time.Time{})
	var b [1]byte
	n, err := c.Read(b[:])
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read during the partition: %d bytes, %v; want nothing until the deadline", n, err)
	}
}

// wantReset asserts that the next read of c fails with a TCP reset.
func wantReset(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.ReadAll(c)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after the reset: %v; want ECONNRESET", err)
	}
}

func TestForwardsBothWaysAndHalfClose(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, e.addr())
	c := dial(t, p.Addr())
	mustEcho(t, c, "hello")
	big := make([]byte, 3<<20)
	rand.Read(big)
	done := make(chan error, 1)
	go func() { _, err := c.Write(big); done <- err }()
	got := make([]byte, len(big))
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, big) {
		t.Fatal("3 MiB came back altered")
	}
	// An orderly end passes through: the echo server sees EOF, ends its side, the client reads EOF.
	c.(*net.TCPConn).CloseWrite()
	if err := e.nextEnd(t); !errors.Is(err, io.EOF) {
		t.Fatalf("echo server's end: %v, want EOF", err)
	}
	if rest, err := io.ReadAll(c); err != nil || len(rest) != 0 {
		t.Fatalf("after the half-close: %q, %v; want EOF", rest, err)
	}
}

func TestLatencyDelaysEachDirection(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, e.addr())
	c := dial(t, p.Addr())
	mustEcho(t, c, "warm")
	const d = 100 * time.Millisecond
	p.SetLatency(d)
	start := time.Now()
	mustEcho(t, c, "slow")
	if took := time.Since(start); took < 2*d {
		t.Fatalf("round trip with %s latency each way took %s, want at least %s", d, took, 2*d)
	}
	// Chunks in flight together arrive together: ten writes in a row take one delay, not ten.
	start = time.Now()
	for range 10 {
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	got := make([]byte, 10)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 2*d || took > 8*d {
		t.Fatalf("ten pipelined writes took %s, want about %s", took, 2*d)
	}
	p.SetLatency(0)
	mustEcho(t, c, "fast again")
}

func TestResetKillsCurrentConnectionsOnly(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, e.addr())
	a, b := dial(t, p.Addr()), dial(t, p.Addr())
	mustEcho(t, a, "a")
	mustEcho(t, b, "b")
	p.Reset()
	wantReset(t, a)
	wantReset(t, b)
	for range 2 {
		if err := e.nextEnd(t); !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("echo server's end: %v, want ECONNRESET", err)
		}
	}
	c := dial(t, p.Addr())
	mustEcho(t, c, "after the reset")
}

func TestPartitionHoldsEverythingThenResets(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, e.addr())
	old := dial(t, p.Addr())
	mustEcho(t, old, "before")
	received, accepted := e.received.Load(), e.accepted.Load()

	p.Partition(true)
	// An existing connection: what it sends is held, and no answer comes.
	if _, err := old.Write([]byte("during")); err != nil {
		t.Fatalf("write into the partition: %v (a cut link takes writes)", err)
	}
	silent(t, old)
	// A new connection is accepted but never reaches the target.
	fresh := dial(t, p.Addr())
	if _, err := fresh.Write([]byte("hello?")); err != nil {
		t.Fatal(err)
	}
	silent(t, fresh)
	// Even an orderly end of the client is not passed on.
	old.(*net.TCPConn).CloseWrite()
	silent(t, old)
	if got, n := e.received.Load(), e.accepted.Load(); got != received || n != accepted {
		t.Fatalf("the target got %d more bytes and %d more connections during the partition", got-received, n-accepted)
	}
	select {
	case err := <-e.ends:
		t.Fatalf("the target's connection ended during the partition: %v", err)
	default:
	}

	p.Partition(false)
	// The held connections are reset on both sides; the held bytes are dropped.
	wantReset(t, old)
	wantReset(t, fresh)
	if err := e.nextEnd(t); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the target's end of the held connection: %v, want ECONNRESET", err)
	}
	if got := e.received.Load(); got != received {
		t.Fatalf("held bytes were delivered after the partition: %d", got-received)
	}
	// New connections work again.
	mustEcho(t, dial(t, p.Addr()), "healed")
}

func TestPartitionTwiceAndHealTwiceAreNoOps(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, e.addr())
	p.Partition(false) // not partitioned: nothing to heal, nothing reset
	c := dial(t, p.Addr())
	mustEcho(t, c, "one")
	p.Partition(true)
	p.Partition(true)
	silent(t, dial(t, p.Addr()))
	p.Partition(false)
	p.Partition(false)
	wantReset(t, c)
	mustEcho(t, dial(t, p.Addr()), "two")
}

func TestTargetDownAndClose(t *testing.T) {
	// A target that refuses: the proxy resets the client.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	p := newProxy(t, dead)
	// The reset may come before the client's connect has returned.
	if c, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second); err == nil {
		defer c.Close()
		wantReset(t, c)
	} else if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("connect through a proxy whose target refuses: %v, want a reset", err)
	}

	// Close resets live connections and stops accepting.
	e := newEcho(t)
	q, err := faultnet.Listen("127.0.0.1:0", e.addr())
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, q.Addr())
	mustEcho(t, c, "x")
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	wantReset(t, c)
	if c, err := net.DialTimeout("tcp", q.Addr(), time.Second); err == nil {
		c.Close()
		t.Fatal("the closed proxy still accepts")
	}
}

func TestTargetResetReachesClient(t *testing.T) {
	// The target resets: the client gets a reset too.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		var b [1]byte
		c.Read(b[:])
		c.(*net.TCPConn).SetLinger(0)
		c.Close()
	}()
	p := newProxy(t, ln.Addr().String())
	c := dial(t, p.Addr())
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	wantReset(t, c)
}
