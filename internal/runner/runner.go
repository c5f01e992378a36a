// Package runner runs one attempt of a task as a child process, for `baton worker --exec`: the
// trusted wrapper holds every privileged credential (the mTLS client certificate for /internal/*,
// its own environment and secrets) and hands the untrusted child only what it needs.
//
// A run:
//
//   - makes a fresh work directory (mode 0700, owned by the child's user) that is the child's
//     working directory, HOME and (its tmp/ subdirectory) TMPDIR, and is removed afterwards;
//   - writes the task payload to payload.json in it (mode 0400, owned by the child's user), names
//     it in BATON_TASK_PAYLOAD and also opens it as the child's stdin;
//   - builds the child's environment from Spec.Env alone (the wrapper's own environment is never
//     inherited) plus HOME, TMPDIR, PWD, BATON_TASK_PAYLOAD and a default PATH;
//   - starts the child through internal/sandbox, contained as far as the system allows (Isolation
//     says how far; see below), as Spec.Credential's user when set (the wrapper must be root),
//     with no supplementary groups, in a new process group, and (on Linux) killed if the wrapper
//     dies; the child inherits only stdin, stdout and stderr (no other file descriptor: the Go
//     runtime opens every file and socket close-on-exec, and no ExtraFiles are passed);
//   - captures stdout (up to Spec.MaxStdout) and the last Spec.StderrTail bytes of stderr;
//   - when ctx ends (task cancelled, lease lost, timeout, shutdown) sends SIGTERM to the whole
//     process group, then SIGKILL once Spec.Grace has passed if anything of it is still running;
//   - when the child exits, kills whatever it left behind, so nothing of a task outlives it.
//
// On Linux, where the kernel has each layer (sandbox.Support), the child also:
//
//   - may read only the system's programs and libraries (/usr, /bin, /sbin, /lib*), which it
//     may also execute, a few files of /etc (the loader's cache, TLS certificates, name service
//     files, time zone, /etc/alternatives, /etc/python3*: see systemRead), /dev/null, /dev/zero,
//     /dev/full (also to write), /dev/random and /dev/urandom, the system's counters in /proc
//     (cpuinfo, meminfo, stat, loadavg, uptime, version) and /sys/devices/system/cpu, its own
//     program file, and Spec.Sandbox's paths; it may write only in its work directory and
//     Spec.Sandbox.ReadWrite (Landlock). Of /proc/PID it may read only the entries of the first
//     process of the child, the one Spec.Command starts (its /proc/self): Landlock grants a path
//     as the file it names when the rule is made, and /proc/self names one process; that process's
//     children have no entries they may read (a shell that runs a program with exec hands it its
//     own). Another process's /proc/PID/environ, mem and the like are doubly out of reach: the
//     ptrace access checks of the kernel (another user, or the wrapper, which HideFromSameUser
//     makes not dumpable) and Landlock's own (a sandboxed process may not inspect one outside
//     its sandbox), besides the path rules, which grant none of /proc/PID;
//   - may connect to no TCP port but Spec.Sandbox.ConnectPorts, and bind none; without ports it
//     has no network at all (a network namespace of its own); with Network, every address
//     and port;
//   - has its limits (Spec.Sandbox.Limits) and no core dumps;
//   - cannot trace (ptrace), mount, make namespaces, load BPF or modules, and the like (seccomp);
//   - runs in user and PID namespaces of its own under an init: the process group gets SIGTERM
//     and SIGKILL through that init, whose end (once the child has exited, or by SIGKILL) takes
//     every process of the namespace down, those that left the process group included, and a
//     fork bomb cannot outlive its task. Without a PID namespace, a process that leaves the group
//     with setsid escapes the killing of leftovers.
//
// The output is the last JSON value on stdout (see LastJSON). A non-zero exit, death by a signal,
// stdout that is not JSON or that exceeds the limit is a *Failure.
package runner

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"
)

// Defaults for the zero values of Spec.
const (
	DefaultGrace      = 10 * time.Second
	DefaultMaxStdout  = 16 << 20 // 16 MiB
	DefaultStderrTail = 4 << 10  // 4 KiB
	// DefaultPath is the child's PATH unless Spec.Env sets one.
	DefaultPath = "/usr/local/bin:/usr/bin:/bin"
)

// Names of the variables Run itself sets in the child's environment.
const (
	EnvPayload = "BATON_TASK_PAYLOAD"
	EnvHome    = "HOME"
	EnvTmpDir  = "TMPDIR"
	EnvPWD     = "PWD"
	EnvPath    = "PATH"
)

// PayloadFile is the payload's file name in the work directory.
const PayloadFile = "payload.json"

// pipeDrain bounds how long Run waits, once the child and its process group are gone, for its
// stdout and stderr to reach end of file (a process that escaped the group could hold them open).
const pipeDrain = 2 * time.Second

// Spec describes one run.
type Spec struct {
	// Command is the argument vector. Command[0] is an absolute path, or a name looked up in the
	// wrapper's PATH. `baton worker` runs []string{"/bin/sh", "-c", EXEC}.
	Command []string
	// Payload is written to the payload file and fed to the child's stdin.
	Payload []byte
	// Env is the child's environment besides what Run sets (HOME, TMPDIR, PWD,
	// BATON_TASK_PAYLOAD, and PATH unless Env has one). Nothing else is inherited.
	Env map[string]string
	// Credential, when set, is the user and group the child runs as (the caller must be root;
	// see LookupChild). The child has no supplementary groups.
	Credential *Credential
	// TempRoot is the directory the work directory is made in (os.TempDir() when empty). The
	// child's user must be able to traverse it.
	TempRoot string
	// Sandbox is what else the child may read, write, execute and connect to, and its limits.
	Sandbox Sandbox
	// Grace is how long the process group has between SIGTERM and SIGKILL (DefaultGrace if 0).
	Grace time.Duration
	// MaxStdout bounds the stdout kept (DefaultMaxStdout if 0); more is a failure.
	MaxStdout int
	// StderrTail is how many trailing bytes of stderr are kept (DefaultStderrTail if 0).
	StderrTail int
	// Collect, when set, gives the child a directory for what the wrapper collects after it
	// succeeded (EnvBuffers names it; it is in the work directory): Collect is called with it
	// before the work directory is removed, and an error it returns fails the run.
	Collect func(dir string) error
	// Prepare, when set, is called with the work directory once it exists, before the child
	// starts; the variables it returns are added to the child's environment (over Env), and an
	// error it returns fails the run before the child starts. Files it makes there belong to the
	// wrapper's user unless it says otherwise; the directory itself is the child's.
	Prepare func(dir string) (map[string]string, error)
}

// EnvBuffers names the directory a child leaves its buffered dataset batches in (Spec.Collect).
const EnvBuffers = "BATON_BUFFER_DIR"

// Credential is a user and group to run a child as.
type Credential struct {
	Uid, Gid uint32
	Username string // for messages
}

// Result describes a finished run, successful or not.
type Result struct {
	// Output is the last JSON value the child wrote to stdout; JSON null if it wrote none.
	// Set only when the run succeeded.
	Output json.RawMessage
	// PID is the process id of what Run started, which leads the process group: the child, or
	// the init of its PID namespace.
	PID int
	// ExitCode is the child's exit status; -1 when a signal ended it.
	ExitCode int
	// Signal is the signal that ended the child, 0 if it exited.
	Signal syscall.Signal
	// Stopped says Run stopped the child because its context ended (SIGTERM to the group).
	Stopped bool
	// Killed says the group outlived the grace period after SIGTERM and got SIGKILL.
	Killed bool
	// Leftovers says processes of the child's group (or of its PID namespace) were still
	// running when it exited and were killed.
	Leftovers bool
	// StdoutBytes counts what the child wrote to stdout (all of it, kept or not).
	StdoutBytes int64
	// StderrTail is the end of what the child wrote to stderr, as valid UTF-8.
	StderrTail string
	Duration   time.Duration
}

// FailureKind says why a run failed.
type FailureKind string

const (
	FailExit   FailureKind = "exit"   // non-zero exit status
	FailSignal FailureKind = "signal" // ended by a signal
	FailOutput FailureKind = "output" // exited 0, but stdout is not JSON or is too large
)

// Failure is the error of a run whose child did not succeed. Its message is the one to report:
// "exit status 3: <stderr tail>".
type Failure struct {
	Kind     FailureKind
	ExitCode int            // FailExit
	Signal   syscall.Signal // FailSignal
	Stopped  bool           // Run sent SIGTERM because the context ended
	Killed   bool           // ... and SIGKILL after the grace period
	Detail   string         // FailOutput: what is wrong with stdout
	Stderr   string         // the stderr tail
}

func (f *Failure) Error() string {
	var b strings.Builder
	switch f.Kind {
	case FailExit:
		fmt.Fprintf(&b, "exit status %d", f.ExitCode)
	case FailSignal:
		fmt.Fprintf(&b, "killed by signal %d (%s)", int(f.Signal), f.Signal)
	case FailOutput:
		b.WriteString(f.Detail)
	}
	switch {
	case f.Killed:
		b.WriteString(" (stopped: SIGTERM to its process group, then SIGKILL after the grace period)")
	case f.Stopped:
		b.WriteString(" (stopped: SIGTERM to its process group)")
	}
	if s := strings.TrimSpace(f.Stderr); s != "" {
		b.WriteString(": ")
		b.WriteString(s)
	} else if f.Kind != FailOutput {
		b.WriteString(" (no stderr output)")
	}
	return b.String()
}

// errNoJSON is LastJSON's error for stdout that holds no JSON value.
var errNoJSON = errors.New("stdout is not JSON")

// LastJSON returns the last JSON value in out: out is read as a stream of JSON values
// (whitespace-separated, as `jq -c` or repeated json.dump calls print them) and the last one is
// kept. If out is not such a stream (say, log lines before the result), the last line that is a
// JSON value on its own is the output. Empty or all-blank out is JSON null. Anything else is an
// error: a program that writes no JSON at all should write nothing (or "null").
func LastJSON(out []byte) (json.RawMessage, error) {
	if len(bytes.TrimSpace(out)) == 0 {
		return json.RawMessage("null"), nil
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	var last json.RawMessage
	for {
		var v json.RawMessage
		err := dec.Decode(&v)
		if err == nil {
			last = v
			continue
		}
		if errors.Is(err, io.EOF) && last != nil {
			return bytes.Clone(last), nil
		}
		break
	}
	lines := bytes.Split(out, []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		l := bytes.TrimSpace(lines[i])
		if len(l) > 0 && json.Valid(l) {
			return bytes.Clone(l), nil
		}
	}
	return nil, fmt.Errorf("%w: no line of it is a JSON value (it begins %q)", errNoJSON, head(out, 80))
}

func head(b []byte, n int) string {
	if len(b) > n {
		b = b[:n]
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// boundedBuffer keeps the first max bytes written to it and counts the rest.
type boundedBuffer struct {
	buf   []byte
	max   int
	total int64
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	b.total += int64(len(p))
	if room := b.max - len(b.buf); room > 0 {
		b.buf = append(b.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (b *boundedBuffer) overflowed() bool { return b.total > int64(b.max) }

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	buf   []byte
	max   int
	total int64
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.total += int64(len(p))
	if len(p) >= t.max {
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		return len(p), nil
	}
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

// String is the tail as valid UTF-8, starting at a whole character, "…" first when cut.
func (t *tailBuffer) String() string {
	b := t.buf
	if len(b) > t.max {
		b = b[len(b)-t.max:]
	}
	cut := t.total > int64(len(b))
	if cut {
		for i := 0; i < utf8.UTFMax && len(b) > 0 && !utf8.RuneStart(b[0]); i++ {
			b = b[1:]
		}
	}
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	if cut {
		s = "…" + s
	}
	return s
}
