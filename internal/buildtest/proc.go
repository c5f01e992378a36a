package buildtest

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Buffer is a bytes buffer that a child process's output goroutines write while the test reads it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p to the buffer.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// FreeAddr returns a 127.0.0.1 address whose port was free a moment ago, for a child to listen on.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// WaitListening waits up to timeout, trying every 50 ms, until a TCP connect to addr succeeds,
// and fails t otherwise.
func WaitListening(t testing.TB, addr string, timeout time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(timeout); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing listens on %s", addr)
		}
	}
}

// WaitReady polls GET url every 50 ms until it answers 200 OK, and fails t, with p's output, when
// timeout passes or p (if not nil) exits first.
func WaitReady(t testing.TB, url string, timeout time.Duration, p *Proc) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if p != nil && p.Exited() {
			t.Fatalf("%s exited before %s answered: %v\n%s", p.Name, url, p.Err(), p.Output())
		}
		res, err := http.Get(url)
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return
			}
			err = fmt.Errorf("status %d", res.StatusCode)
		}
		if time.Now().After(deadline) {
			out := ""
			if p != nil {
				out = p.Output()
			}
			t.Fatalf("%s did not answer 200 OK within %s: %v\n%s", url, timeout, err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Proc is a started child process whose combined output is kept for failure messages.
type Proc struct {
	Name string // what messages call it: Options.Name, or its command line
	Cmd  *exec.Cmd
	out  *Buffer
	opts Options
	done chan struct{} // closed when the process exited; err is then its Wait error
	err  error
}

// Options says how StartWith names, owns and stops a process; the zero value is Start's.
type Options struct {
	Name    string        // the process's name in messages; "" is its command line
	Owner   testing.TB    // stops it when it ends and logs its output if it failed; nil is t
	Signals []os.Signal   // sent in order to stop it; nil is os.Interrupt alone
	Grace   time.Duration // how long Stop waits after Signals before SIGKILL; 0 is 5 s
}

// Start starts cmd with env added to the test's environment; when t ends it is stopped (SIGINT,
// then SIGKILL after 5 s) and, if t failed, its output logged.
func Start(t testing.TB, cmd *exec.Cmd, env []string) *Proc {
	t.Helper()
	return StartWith(t, cmd, env, Options{})
}

// StartWith is Start with the name, owner and way of stopping of opts; t fails if cmd cannot start.
func StartWith(t testing.TB, cmd *exec.Cmd, env []string, opts Options) *Proc {
	t.Helper()
	if opts.Owner == nil {
		opts.Owner = t
	}
	if opts.Signals == nil {
		opts.Signals = []os.Signal{os.Interrupt}
	}
	if opts.Grace == 0 {
		opts.Grace = 5 * time.Second
	}
	p := &Proc{Name: opts.Name, Cmd: cmd, out: &Buffer{}, opts: opts, done: make(chan struct{})}
	if p.Name == "" {
		p.Name = strings.Join(cmd.Args, " ")
	}
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", p.Name, err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	owner := opts.Owner
	owner.Cleanup(func() {
		p.Stop()
		if owner.Failed() {
			if opts.Name != "" {
				owner.Logf("output of %s (%s):\n%s", opts.Name, strings.Join(cmd.Args, " "), p.Output())
			} else {
				owner.Logf("output of %s:\n%s", p.Name, p.Output())
			}
		}
	})
	return p
}

// Output returns the process's combined stdout and stderr so far.
func (p *Proc) Output() string { return p.out.String() }

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err returns the process's Wait error once it has exited (nil before).
func (p *Proc) Err() error {
	if !p.Exited() {
		return nil
	}
	return p.err
}

// Signal sends sig to the process, or says it already exited.
func (p *Proc) Signal(sig os.Signal) error {
	if p.Exited() {
		return fmt.Errorf("%s already exited: %v", p.Name, p.err)
	}
	return p.Cmd.Process.Signal(sig)
}

// Stop ends the process: its Options' signals, then SIGKILL after their grace time.
func (p *Proc) Stop() {
	if p.Exited() {
		return
	}
	for _, sig := range p.opts.Signals {
		_ = p.Cmd.Process.Signal(sig)
	}
	select {
	case <-p.done:
	case <-time.After(p.opts.Grace):
		_ = p.Cmd.Process.Kill()
		<-p.done
	}
}

// Wait waits up to timeout for the process to exit and returns its exit status; a process killed
// by a signal is an error.
func (p *Proc) Wait(timeout time.Duration) (int, error) {
	select {
	case <-p.done:
	case <-time.After(timeout):
		return 0, fmt.Errorf("%s did not exit within %s", p.Name, timeout)
	}
	var exit *exec.ExitError
	switch {
	case p.err == nil:
		return 0, nil
	case errors.As(p.err, &exit):
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return -1, fmt.Errorf("%s was killed by %s", p.Name, ws.Signal())
		}
		return exit.ExitCode(), nil
	}
	return 0, p.err
}
