package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// WorkerCommand is a worker program the bench runs as a child process (--worker-command
// LABEL=CMD), in whatever language: `sh -c CMD` with the environment of CommandEnv.
type WorkerCommand struct {
	Label   string // names its row
	Command string // for sh -c
}

// labelRe is what a label may be: it names a row and goes into the task name of its phase.
var labelRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$`)

// ParseWorkerCommand parses LABEL=CMD.
func ParseWorkerCommand(s string) (WorkerCommand, error) {
	label, cmd, ok := strings.Cut(s, "=")
	label, cmd = strings.TrimSpace(label), strings.TrimSpace(cmd)
	switch {
	case !ok || cmd == "":
		return WorkerCommand{}, fmt.Errorf("want LABEL=COMMAND, e.g. python='python3 bench_worker.py', got %q", s)
	case !labelRe.MatchString(label):
		return WorkerCommand{}, fmt.Errorf("the label %q must be 1 to 32 letters, digits, '.', '_' or '-', starting with a letter or digit", label)
	}
	return WorkerCommand{Label: label, Command: cmd}, nil
}

// The environment of a worker command: where the server is, and what to work.
const (
	EnvURL         = "BATON_URL"               // the producer API (public listener)
	EnvInternalURL = "BATON_INTERNAL_URL"      // the internal listener, where workers claim
	EnvAPIKey      = "BATON_API_KEY"           // a producer API key
	EnvTask        = "BATON_BENCH_TASK"        // the task name of every task of the phase; its queue has the same name
	EnvConcurrency = "BATON_BENCH_CONCURRENCY" // how many tasks the worker runs at once (--workers)
)

// commandGrace is how long a worker command has to exit after SIGTERM before it is killed.
const commandGrace = 10 * time.Second

// workerProcess is a running worker command: `sh -c CMD`, leading a process group of its own.
type workerProcess struct {
	cmd     *exec.Cmd
	tail    *tailBuffer
	started time.Time
	exited  chan struct{}
	err     error // of Wait, once exited is closed
}

// startWorkerCommand starts wc with the given task name, its output kept (and copied to output,
// if not nil). The command's process group gets SIGTERM should the bench die (on Linux, through
// sh, which passes it on only if the command does not replace it).
func (b *bench) startWorkerCommand(wc WorkerCommand, task string) (*workerProcess, error) {
	tail := &tailBuffer{max: 16 << 10}
	var out io.Writer = tail
	if b.cfg.CommandOutput != nil {
		out = io.MultiWriter(tail, &prefixWriter{w: b.cfg.CommandOutput, prefix: wc.Label + ": "})
	}
	cmd := exec.Command("/bin/sh", "-c", shellCommand(wc.Command))
	cmd.Env = append(os.Environ(),
		EnvURL+"="+b.cfg.ProducerURL,
		EnvInternalURL+"="+b.cfg.InternalURL,
		EnvAPIKey+"="+b.cfg.APIKey,
		EnvTask+"="+task,
		EnvConcurrency+"="+strconv.Itoa(b.cfg.Workers),
	)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = commandSysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("worker command %s: start sh -c %q: %w", wc.Label, wc.Command, err)
	}
	p := &workerProcess{cmd: cmd, tail: tail, started: time.Now(), exited: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	return p, nil
}

// pid is the command's process id, which leads its process group.
func (p *workerProcess) pid() int { return p.cmd.Process.Pid }

// exitedEarly is the error for a command that exited while it should have been working.
func (p *workerProcess) exitedEarly(label string) error {
	how := "with status 0"
	if p.err != nil {
		how = "(" + p.err.Error() + ")"
	}
	return fmt.Errorf("worker command %s exited %s before its tasks were done; its output:\n%s", label, how, p.tail.String())
}

// stop sends SIGTERM to the command's process group and, unless the whole group has exited
// within grace, SIGKILL; it says how the command ended: the exit of its first process (sh, or
// the program sh became), or that it had to be killed.
func (p *workerProcess) stop(grace time.Duration) string {
	select {
	case <-p.exited:
		_ = syscall.Kill(-p.pid(), syscall.SIGKILL) // what of its group outlived it
		return "exited before SIGTERM: " + exitText(p.err)
	default:
	}
	_ = syscall.Kill(-p.pid(), syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for {
		select {
		case <-p.exited:
			if !groupAlive(p.pid()) {
				return exitText(p.err)
			}
		default:
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
			<-p.exited
			return fmt.Sprintf("killed: still running %s after SIGTERM", grace)
		}
		time.Sleep(10 * time.Millisecond) // processes exiting: nothing to wait on for a group
	}
}

// groupAlive says whether any process of the group runs (or is a zombie not yet reaped).
func groupAlive(pgid int) bool { return syscall.Kill(-pgid, 0) == nil }

// shellCommand is what sh -c runs for a command: the command itself, after exec when it is one
// simple command, so that the program replaces the shell (some shells do it themselves, dash
// does not): its exit is then the command's, and it gets SIGTERM should the bench die.
func shellCommand(cmd string) string {
	if simpleCommandRe.MatchString(cmd) && !reservedWordRe.MatchString(cmd) {
		return "exec " + cmd
	}
	return cmd
}

// simpleCommandRe is a command of plain words: no list, pipe, redirection, grouping,
// substitution, quoting, comment or variable assignment before the program.
var (
	simpleCommandRe = regexp.MustCompile(`^[A-Za-z0-9_./][A-Za-z0-9_./:@%+,=-]*( +[A-Za-z0-9_./:@%+,=-]+)*$`)
	reservedWordRe  = regexp.MustCompile(`^((if|then|else|elif|fi|case|esac|for|while|until|do|done|exec|exit|cd|export|set|eval|\.)( |$)|[A-Za-z_][A-Za-z0-9_]*=)`)
)

// exitText says how a process ended, from its Wait error.
func exitText(err error) string {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return "exit 0"
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		return fmt.Sprintf("exit %d", ee.ExitCode())
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "signal: " + ws.Signal().String()
		}
	}
	return err.Error()
}

// prefixWriter writes each line with a prefix (a worker command's output in the bench's).
type prefixWriter struct {
	w       io.Writer
	prefix  string
	midLine bool
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	var sb strings.Builder
	for _, c := range string(b) {
		if !p.midLine {
			sb.WriteString(p.prefix)
			p.midLine = true
		}
		sb.WriteRune(c)
		if c == '\n' {
			p.midLine = false
		}
	}
	if _, err := io.WriteString(p.w, sb.String()); err != nil {
		return 0, err
	}
	return len(b), nil
}

// sleep waits for d or until the command exits, whichever comes first; it returns the
// early-exit error in the second case, and ctx's error if it ends.
func (p *workerProcess) sleep(ctx context.Context, label string, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-p.exited:
		return p.exitedEarly(label)
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
