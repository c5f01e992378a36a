package chaos

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

// proc is a process the run starts, kills, stops and starts again with the same command line.
// Its output, over all its lives, goes to a file in the run's directory.
type proc struct {
	name string
	path string
	args []string
	env  []string
	out  string // file of its output
	// ready, when set, reports whether the process has become ready to serve.
	ready func() bool

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	lives  int
}

// start starts the process and waits until it is ready.
func (p *proc) start(ctx context.Context) error {
	out, err := os.OpenFile(p.out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	p.mu.Lock()
	p.lives++
	fmt.Fprintf(out, "--- chaos: life %d of %s\n", p.lives, p.name)
	cmd := exec.Command(p.path, p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = out, out
	// A process of the run dies with the test, whatever becomes of the test.
	cmd.SysProcAttr = runner.TiedToParent(syscall.SIGKILL)
	if err := cmd.Start(); err != nil {
		p.mu.Unlock()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	p.cmd, p.exited = cmd, exited
	p.mu.Unlock()
	if p.ready == nil {
		return nil
	}
	return p.awaitReady(ctx, exited)
}

// awaitReadyTimeout bounds how long a process may take to become ready.
const awaitReadyTimeout = time.Minute

func (p *proc) awaitReady(ctx context.Context, exited chan struct{}) error {
	deadline := time.Now().Add(awaitReadyTimeout)
	for !p.ready() {
		select {
		case <-exited:
			return fmt.Errorf("%s exited before it was ready; its output:\n%s", p.name, p.tail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond): // a real process is starting: nothing to wait on but its port
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s was not ready within %s; its output:\n%s", p.name, awaitReadyTimeout, p.tail())
		}
	}
	return nil
}

// httpReady reports whether url answers 200.
func httpReady(url string) func() bool {
	hc := &http.Client{Timeout: 2 * time.Second}
	return func() bool {
		res, err := hc.Get(url)
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	}
}

// portReady reports whether something listens on the loopback port.
func portReady(port int) func() bool {
	return func() bool {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err != nil {
			return false
		}
		c.Close()
		return true
	}
}

// signal sends sig to the running process.
func (p *proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return errors.New(p.name + " is not running")
	}
	return p.cmd.Process.Signal(sig)
}

// kill SIGKILLs the process and waits until it is gone.
func (p *proc) kill() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT) // a stopped process dies as well, but say so
	_ = cmd.Process.Kill()
	<-exited
}

// stop asks the process to stop (SIGTERM) and kills it after timeout.
func (p *proc) stop(timeout time.Duration) {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// tail is the end of the process's output file.
func (p *proc) tail() string {
	data, err := os.ReadFile(p.out)
	if err != nil {
		return "(no output: " + err.Error() + ")"
	}
	const max = 4 << 10
	s := strings.TrimRight(string(data), "\n")
	if len(s) > max {
		s = "…" + s[len(s)-max:]
	}
	return s
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
