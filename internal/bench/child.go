package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/baton-dev/baton/internal/runner"
)

// ChildConfig is a Baton server to run as a child process: normally this very binary
// re-executed as `baton dev` or `baton server`.
type ChildConfig struct {
	Path string   // the executable
	Args []string // its arguments, the subcommand first
	Env  []string // added to this process's environment
	// ProducerURL is where the child's producer API will listen; StartChild returns once its
	// /readyz answers 200 and, with APIKey, once it takes that key (so that the server answering
	// is this child, not another that took its port first).
	ProducerURL string
	APIKey      string
	// Output, if not nil, also receives the child's stdout and stderr.
	Output io.Writer
}

// Child is a running server process.
type Child struct {
	cmd    *exec.Cmd
	tail   *tailBuffer
	exited chan struct{}
	err    error // of Wait, once exited is closed
}

// ErrAddrTaken says that another process held one of the child's addresses: the child could not
// listen there, or a server that is not the child answered there. Start it again on other ports.
var ErrAddrTaken = errors.New("another process holds the server's address")

// childReadyTimeout bounds how long a child may take to answer /readyz.
const childReadyTimeout = time.Minute

// StartChild starts the child and waits until it is ready. The child gets SIGTERM if this
// process dies (on Linux).
func StartChild(ctx context.Context, cfg ChildConfig) (*Child, error) {
	tail := &tailBuffer{max: 32 << 10}
	var out io.Writer = tail
	if cfg.Output != nil {
		out = io.MultiWriter(tail, cfg.Output)
	}
	cmd := exec.Command(cfg.Path, cfg.Args...)
	cmd.Env = append(os.Environ(), cfg.Env...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = runner.TiedToParent(syscall.SIGTERM)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the server: %w", err)
	}
	c := &Child{cmd: cmd, tail: tail, exited: make(chan struct{})}
	go func() { c.err = cmd.Wait(); close(c.exited) }()
	if err := c.awaitReady(ctx, cfg.ProducerURL, cfg.APIKey); err != nil {
		c.Stop(5 * time.Second)
		return nil, err
	}
	return c, nil
}

func (c *Child) awaitReady(ctx context.Context, producerURL, apiKey string) error {
	hc := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(childReadyTimeout)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, producerURL+"/readyz", nil)
		if err != nil {
			return err
		}
		if res, err := hc.Do(req); err == nil {
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return c.isOurs(ctx, hc, producerURL, apiKey)
			}
		}
		select {
		case <-c.exited:
			if strings.Contains(c.Output(), "address already in use") {
				return fmt.Errorf("%w: %s", ErrAddrTaken, lastLine(c.Output()))
			}
			return fmt.Errorf("the server exited before it was ready (%v); its output:\n%s", c.err, c.Output())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(25 * time.Millisecond): // a real process is starting: nothing to wait on but the port
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the server was not ready within %s; its output:\n%s", childReadyTimeout, c.Output())
		}
	}
}

// isOurs checks that the ready server at producerURL is the child: it takes the child's API key
// (a producer route, which no internal listener serves and no other server's keys open).
func (c *Child) isOurs(ctx context.Context, hc *http.Client, producerURL, apiKey string) error {
	if apiKey == "" {
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, producerURL+"/jobs?limit=1", nil)
	if err != nil {
		return err
	}
	req.Header.Set("x-api-key", apiKey)
	res, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("the server at %s answered /readyz, then: %w", producerURL, err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("%w: the server at %s answered GET /jobs with the child's key %d", ErrAddrTaken, producerURL, res.StatusCode)
	}
	return nil
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// PID is the child's process id.
func (c *Child) PID() int { return c.cmd.Process.Pid }

// Output is the tail of what the child printed.
func (c *Child) Output() string { return c.tail.String() }

// Stop asks the child to shut down (SIGTERM), kills it if it has not exited within timeout, and
// waits for it. It returns an error if the child did not exit cleanly.
func (c *Child) Stop(timeout time.Duration) error {
	select {
	case <-c.exited:
		return c.exitErr()
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
		return c.exitErr()
	case <-time.After(timeout):
		_ = c.cmd.Process.Kill()
		<-c.exited
		return fmt.Errorf("the server did not stop within %s after SIGTERM and was killed", timeout)
	}
}

func (c *Child) exitErr() error {
	if c.err != nil {
		return fmt.Errorf("the server exited: %w; its output:\n%s", c.err, c.Output())
	}
	return nil
}

// FreeAddr returns a loopback address that was free a moment ago, for a child to listen on.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
	cut bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
		t.cut = true
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimRight(string(t.b), "\n")
	if t.cut {
		s = "…" + s
	}
	return s
}
