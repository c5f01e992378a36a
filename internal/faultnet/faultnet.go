// Package faultnet is a TCP proxy for tests that injects the network faults a real deployment
// meets: latency, connections reset under their users, and partitions. Put it between a client
// and a server (an HTTP client and Baton, Baton and PostgreSQL) and the code under test sees the
// faults through its ordinary sockets:
//
//	p, err := faultnet.Listen("127.0.0.1:0", "127.0.0.1:5432")
//	// connect to p.Addr() instead of 127.0.0.1:5432
//	p.SetLatency(20 * time.Millisecond) // every chunk, both ways
//	p.Partition(true)                   // the network is cut
//	p.Partition(false)                  // healed: the connections it held are reset
//	p.Reset()                           // every connection is reset at once
//
// A partition behaves as a cut cable or a dropped route, not as a stopped server: nobody is told.
// While it is on, nothing is forwarded in either direction on any connection: what a side sends
// is read and held (its writes succeed until the buffers fill, as they would into a dead link),
// and nothing, not even a FIN or a reset, reaches the other side. Connections opened during the
// partition are accepted but never reach the target. (Behind a real cut a connect itself would
// hang, unanswered; here the kernel completes the handshake before the proxy sees the connection,
// so the client sees its connect succeed and then silence. Either way only the client's own
// deadlines end its wait, which is what a partition tests.)
//
// When the partition heals, every connection it held — open before it or accepted during it —
// is reset on both sides, and the bytes it held are dropped: new connections work again. That is
// how a real cut of more than a few seconds usually ends for the connections it caught: the
// clients' deadlines have fired (a driver closes a connection whose request timed out), and the
// other side's keepalives or retransmission limits kill what is left, so a server learns the
// client is gone and rolls back its open transaction. Delivering the held bytes after the fact
// would model a blip of packet loss instead, which TCP hides from both sides by retransmitting.
package faultnet

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// chunkSize is the most bytes one read of a connection forwards as one chunk.
const chunkSize = 32 << 10

// heldChunks is how many chunks a direction holds (read but not yet delivered) before it stops
// reading: then the sender's own buffers fill and its writes block, as on a slow or dead link.
const heldChunks = 16

// dialTimeout bounds the proxy's connect to the target.
const dialTimeout = 10 * time.Second

// Proxy forwards the TCP connections it accepts to a target address, with injected faults.
// Its methods are safe for concurrent use.
type Proxy struct {
	ln      net.Listener
	target  string
	latency atomic.Int64 // time.Duration

	mu          sync.Mutex
	partitioned bool
	closed      bool
	links       map[*link]struct{}
	wg          sync.WaitGroup // the accept loop and every link's goroutines
}

// Listen starts a proxy that accepts on listenAddr ("127.0.0.1:0" picks a free port) and forwards
// each connection to targetAddr.
func Listen(listenAddr, targetAddr string) (*Proxy, error) {
	ln, err := net.Listen("tcp", listenAddr)
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: targetAddr, links: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients connect to, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetLatency delays every chunk forwarded from now on, in both directions, by d: a request and
// its answer take at least 2×d more. Chunks are delayed as on a long link, not queued behind each
// other's delays: what is sent together arrives together, d later.
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(max(d, 0))) }

// Reset closes every current connection abruptly: both of its sides get a TCP reset (RST), as
// when a middlebox or the other host drops the connection's state. New connections work as
// before.
func (p *Proxy) Reset() {
	p.mu.Lock()
	links := p.takeLinks(func(*link) bool { return true })
	p.mu.Unlock()
	for _, l := range links {
		l.abort()
	}
}

// Partition cuts the network (on) or heals it (off), as the package documentation describes:
// while on, nothing is forwarded on any connection, old or new; turning it off resets every
// connection it held. Once Partition(true) returns no further byte is delivered.
func (p *Proxy) Partition(on bool) {
	p.mu.Lock()
	if p.partitioned == on {
		p.mu.Unlock()
		return
	}
	p.partitioned = on
	var healed []*link
	if on {
		for l := range p.links {
			l.cut()
		}
	} else {
		healed = p.takeLinks((*link).isCut)
	}
	p.mu.Unlock()
	for _, l := range healed {
		l.abort()
	}
}

// Close stops accepting, resets every connection and waits until the proxy's goroutines are done.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	links := p.takeLinks(func(*link) bool { return true })
	p.mu.Unlock()
	err := p.ln.Close()
	for _, l := range links {
		l.abort()
	}
	p.wg.Wait()
	return err
}

// takeLinks removes and returns the links that match; p.mu is held.
func (p *Proxy) takeLinks(match func(*link) bool) []*link {
	var out []*link
	for l := range p.links {
		if match(l) {
			out = append(out, l)
			delete(p.links, l)
		}
	}
	return out
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		l := &link{p: p, client: c, done: make(chan struct{}), cutCh: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			l.abort()
			return
		}
		p.links[l] = struct{}{}
		if p.partitioned {
			// Never reaches the target: held until the partition heals (and then reset).
			l.cut()
			p.mu.Unlock()
			continue
		}
		p.wg.Add(1)
		p.mu.Unlock()
		go l.run()
	}
}

// forget removes l from the proxy once it ended by itself.
func (p *Proxy) forget(l *link) {
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// link is one proxied connection: the accepted client side and the dialled server side.
type link struct {
	p      *Proxy
	client net.Conn

	server   atomic.Pointer[net.Conn] // set once dialled
	mu       sync.Mutex               // guards cutFlag and every write, so that cut is immediate
	cutFlag  bool
	cutCh    chan struct{} // closed when cut
	done     chan struct{} // closed when the link is torn down
	doneOnce sync.Once
}

func (l *link) cut() {
	l.mu.Lock() // waits for a write in progress (writeSlice at most): then nothing more is delivered
	defer l.mu.Unlock()
	if !l.cutFlag {
		l.cutFlag = true
		close(l.cutCh)
	}
}

func (l *link) isCut() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cutFlag
}

// abort tears the link down with a reset on both sides.
func (l *link) abort() {
	l.doneOnce.Do(func() {
		close(l.done)
		rst(l.client)
		if s := l.server.Load(); s != nil {
			rst(*s)
		}
	})
}

// finish tears the link down after both directions ended cleanly.
func (l *link) finish() {
	l.doneOnce.Do(func() {
		close(l.done)
		l.client.Close()
		if s := l.server.Load(); s != nil {
			(*s).Close()
		}
	})
}

// rst closes c so that its peer gets a TCP reset rather than an orderly end.
func rst(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// run dials the target and forwards both directions until the link ends.
func (l *link) run() {
	defer l.p.wg.Done()
	defer l.p.forget(l)
	d := net.Dialer{Timeout: dialTimeout}
	server, err := d.Dial("tcp", l.p.target)
	if err != nil {
		l.abort() // the target refused or is unreachable: so is the proxy
		return
	}
	l.server.Store(&server)
	select {
	case <-l.done: // reset or closed while dialling
		rst(server)
		return
	default:
	}
	var wg sync.WaitGroup
	wg.Go(func() { l.pipe(l.client, server) })
	wg.Go(func() { l.pipe(server, l.client) })
	wg.Wait()
	l.finish()
}

// chunk is bytes read from one side, due at the other at the time at.
type chunk struct {
	b  []byte
	at time.Time
}

// pipe forwards src to dst: a reader holds up to heldChunks chunks while a writer delivers each
// when it is due, unless the link is cut. An orderly end (EOF) is passed on as a half-close once
// everything before it is delivered; an error resets the whole link.
func (l *link) pipe(src, dst net.Conn) {
	ch := make(chan chunk, heldChunks)
	readerDone := make(chan struct{})
	// The reader ends on an error or EOF of src; once the link is torn down src is closed, so it
	// always ends. pipe returns only after it did.
	defer func() { <-readerDone }()
	go func() {
		defer close(readerDone)
		defer close(ch)
		for {
			buf := make([]byte, chunkSize)
			n, err := src.Read(buf)
			if n > 0 {
				c := chunk{b: buf[:n], at: time.Now().Add(time.Duration(l.p.latency.Load()))}
				select {
				case ch <- c:
				case <-l.done:
					return
				}
			}
			if err != nil {
				if !errors.Is(err, io.EOF) {
					l.abort()
				}
				return
			}
		}
	}()
	var timer *time.Timer
	for c := range ch {
		if wait := time.Until(c.at); wait > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			select {
			case <-timer.C:
			case <-l.done:
				return
			}
		}
		delivered, err := l.deliver(dst, c.b)
		if err != nil {
			l.abort()
			return
		}
		if !delivered {
			// Cut: hold everything until the link is torn down.
			<-l.done
			return
		}
	}
	select {
	case <-l.done:
		return
	default:
	}
	l.mu.Lock()
	cut := l.cutFlag
	l.mu.Unlock()
	if cut {
		<-l.done // a cut link passes on no end either
		return
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}

// writeSlice bounds each write, so that a receiver that does not read holds up a cut (which
// waits for the write in progress) no longer than that.
const writeSlice = 50 * time.Millisecond

// deliver writes b to dst unless the link is cut first; it reports whether it wrote all of b.
func (l *link) deliver(dst net.Conn, b []byte) (bool, error) {
	for len(b) > 0 {
		l.mu.Lock()
		if l.cutFlag {
			l.mu.Unlock()
			return false, nil
		}
		_ = dst.SetWriteDeadline(time.Now().Add(writeSlice))
		n, err := dst.Write(b)
		l.mu.Unlock()
		b = b[n:]
		if errors.Is(err, os.ErrDeadlineExceeded) {
			select {
			case <-l.done:
				return false, net.ErrClosed
			default:
				continue
			}
		}
		if err != nil {
			return false, err
		}
	}
	return true, nil
}
