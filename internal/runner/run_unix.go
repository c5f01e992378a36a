//go:build unix

package runner

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/baton-dev/baton/internal/sandbox"
)

// Run runs one attempt as Spec describes and waits for it, its process group included. It
// returns a *Failure (with the Result) when the child did not succeed, and another error when it
// could not be started (work directory, payload file, exec).
func Run(ctx context.Context, s Spec) (*Result, error) {
	if len(s.Command) == 0 || s.Command[0] == "" {
		return nil, errors.New("runner: no command")
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("runner: not started: %w", context.Cause(ctx))
	}
	// A name is looked up in the wrapper's PATH; a path is checked here, since the sandbox's
	// trampoline, not this process, executes it.
	path, err := exec.LookPath(s.Command[0])
	if err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	grace := cmp.Or(s.Grace, DefaultGrace)
	maxOut := cmp.Or(s.MaxStdout, DefaultMaxStdout)
	tailN := cmp.Or(s.StderrTail, DefaultStderrTail)

	dir, err := os.MkdirTemp(cmp.Or(s.TempRoot, os.TempDir()), "baton-task-") // mode 0700
	if err != nil {
		return nil, fmt.Errorf("runner: make the work directory: %w", err)
	}
	defer os.RemoveAll(dir)
	tmp := filepath.Join(dir, "tmp")
	payload := filepath.Join(dir, PayloadFile)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	if err := os.WriteFile(payload, s.Payload, 0o400); err != nil {
		return nil, fmt.Errorf("runner: write the payload: %w", err)
	}
	owned := []string{dir, tmp, payload}
	vars := map[string]string{EnvHome: dir, EnvTmpDir: tmp, EnvPWD: dir, EnvPayload: payload}
	buffers := filepath.Join(dir, "buffers")
	if s.Collect != nil {
		if err := os.Mkdir(buffers, 0o700); err != nil {
			return nil, fmt.Errorf("runner: %w", err)
		}
		owned, vars[EnvBuffers] = append(owned, buffers), buffers
	}
	if c := s.Credential; c != nil {
		for _, p := range owned {
			if err := os.Chown(p, int(c.Uid), int(c.Gid)); err != nil {
				return nil, fmt.Errorf("runner: hand the work directory to uid %d: %w", c.Uid, err)
			}
		}
	}
	if s.Prepare != nil {
		extra, err := s.Prepare(dir)
		if err != nil {
			return nil, fmt.Errorf("runner: prepare the work directory: %w", err)
		}
		for k, v := range extra {
			if _, ours := vars[k]; !ours {
				vars[k] = v
			}
		}
	}
	env, err := environ(s.Env, vars)
	if err != nil {
		return nil, err
	}
	stdin, err := os.Open(payload)
	if err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	defer stdin.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	defer outR.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		outW.Close()
		return nil, fmt.Errorf("runner: %w", err)
	}
	defer errR.Close()

	closeInheritedOnExec()
	// The pipes' write ends are *os.File, so the child gets them as fds 1 and 2 directly and
	// Wait does not wait for copying goroutines: this function reads them itself.
	cmd := &exec.Cmd{Path: path, Args: s.Command, Env: env, Dir: dir, Stdin: stdin, Stdout: outW, Stderr: errW}
	started := time.Now()
	proc, err := sandbox.Start(cmd, s.Sandbox.policy(path, dir, s.Credential))
	outW.Close()
	errW.Close()
	if err != nil {
		if s.Credential != nil && errors.Is(err, fs.ErrPermission) {
			self, _ := os.Executable()
			return nil, fmt.Errorf("runner: start %s as uid %d: %w (can that user reach %s, and execute %s and %s?)", s.Command[0], s.Credential.Uid, err, dir, self, path)
		}
		return nil, fmt.Errorf("runner: start %s: %w", s.Command[0], err)
	}
	// The child, or the init of its PID namespace, leads a new group of its own pid: a signal to
	// the group reaches the child, or the init, which passes it on.
	pgid := proc.Pid()

	stdout := &boundedBuffer{max: maxOut}
	stderr := &tailBuffer{max: tailN}
	var readers sync.WaitGroup
	readers.Go(func() { _, _ = io.Copy(stdout, outR) })
	readers.Go(func() { _, _ = io.Copy(stderr, errR) })
	pipesDone := make(chan struct{})
	go func() { readers.Wait(); close(pipesDone) }()

	// The watcher stops the group when ctx ends: SIGTERM, then SIGKILL unless, within the grace
	// period, the child exited and its stdout and stderr closed (that is, no process of the
	// group still holds them).
	exited := make(chan struct{})
	watched := make(chan struct{})
	var stopped, killed bool // written by the watcher only, read after watched is closed
	go func() {
		defer close(watched)
		select {
		case <-exited:
			return
		case <-ctx.Done():
		}
		stopped = true
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		timer := time.NewTimer(grace)
		defer timer.Stop()
		for ex, pd := exited, pipesDone; ex != nil || pd != nil; {
			select {
			case <-ex:
				ex = nil
			case <-pd:
				pd = nil
			case <-timer.C:
				killed = true
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
				return
			}
		}
	}()
	_, waitErr := proc.Wait()
	close(exited)
	<-watched
	// Whatever is left of the group now outlived the task: kill it. Under an init, what was
	// left in the PID namespace died with the init, and the init told.
	leftovers := proc.Leftovers()
	if syscall.Kill(-pgid, syscall.SIGKILL) == nil {
		leftovers = true
	}
	select {
	case <-pipesDone:
	case <-time.After(pipeDrain):
		// Something outside the group holds the pipes; stop reading.
		outR.Close()
		errR.Close()
		<-pipesDone
	}

	res := &Result{PID: pgid, Stopped: stopped, Killed: killed, Leftovers: leftovers,
		StdoutBytes: stdout.total, StderrTail: stderr.String(), Duration: time.Since(started)}
	var ee *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &ee) {
		return res, fmt.Errorf("runner: wait for %s: %w", s.Command[0], waitErr)
	}
	f := &Failure{Stopped: stopped, Killed: killed, Stderr: res.StderrTail}
	ws := proc.Status()
	switch {
	case ws.Signaled():
		res.ExitCode, res.Signal = -1, ws.Signal()
		f.Kind, f.Signal = FailSignal, ws.Signal()
		return res, f
	case ws.ExitStatus() != 0:
		res.ExitCode = ws.ExitStatus()
		f.Kind, f.ExitCode = FailExit, res.ExitCode
		return res, f
	case stdout.overflowed():
		f.Kind, f.Detail = FailOutput, fmt.Sprintf("stdout exceeded %d bytes (the child wrote %d)", maxOut, stdout.total)
		return res, f
	}
	out, err := LastJSON(stdout.buf)
	if err != nil {
		f.Kind, f.Detail = FailOutput, err.Error()
		return res, f
	}
	res.Output = out
	if s.Collect != nil {
		if err := s.Collect(buffers); err != nil {
			return res, fmt.Errorf("runner: collect the child's batches: %w", err)
		}
	}
	return res, nil
}

// closeInheritedOnExec marks every file descriptor above stderr close-on-exec. The Go runtime
// opens its own files and sockets close-on-exec, but descriptors this process inherited open
// (from a shell, a supervisor, socket activation) would otherwise pass on to every child.
func closeInheritedOnExec() {
	dir := "/dev/fd"
	if runtime.GOOS == "linux" {
		dir = "/proc/self/fd"
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}

// environ is the child's whole environment: env, then set (which wins), and DefaultPath unless
// either names PATH; sorted.
func environ(env, set map[string]string) ([]string, error) {
	all := make(map[string]string, len(env)+len(set)+1)
	for k, v := range env {
		all[k] = v
	}
	for k, v := range set {
		all[k] = v
	}
	if _, ok := all[EnvPath]; !ok {
		all[EnvPath] = DefaultPath
	}
	out := make([]string, 0, len(all))
	for k, v := range all {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.Contains(v, "\x00") {
			return nil, fmt.Errorf("runner: invalid environment variable %q", k)
		}
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out, nil
}

// LookupChild resolves the user (a name or a numeric uid) that children are to run as, with
// its primary group and no supplementary groups. It refuses root (uid 0).
func LookupChild(name string) (*Credential, error) {
	if name == "" {
		return nil, errors.New("runner: no child user given")
	}
	u, err := user.Lookup(name)
	if err != nil {
		var uerr error
		if _, perr := strconv.Atoi(name); perr == nil {
			if u, uerr = user.LookupId(name); uerr == nil {
				err = nil
			}
		}
		if err != nil {
			return nil, fmt.Errorf("runner: child user %q: %w", name, err)
		}
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("runner: child user %q has uid %q: %w", name, u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("runner: child user %q has gid %q: %w", name, u.Gid, err)
	}
	if uid == 0 {
		return nil, fmt.Errorf("runner: refusing to run untrusted children as %q: it is root (uid 0)", name)
	}
	return &Credential{Uid: uint32(uid), Gid: uint32(gid), Username: u.Username}, nil
}

// CheckPrivate refuses a private key file (or any secret file) that the child user could read:
// one it owns, or one readable by its group or by everyone.
func CheckPrivate(path string, cred *Credential) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	perm := fi.Mode().Perm()
	st, _ := fi.Sys().(*syscall.Stat_t)
	switch {
	case st != nil && st.Uid == cred.Uid:
		return fmt.Errorf("%s belongs to the child user %s: it must belong to the wrapper's user", path, cred.Username)
	case perm&0o004 != 0:
		return fmt.Errorf("%s is readable by every user, the child user %s included: chmod 600 it", path, cred.Username)
	case perm&0o040 != 0 && st != nil && st.Gid == cred.Gid:
		return fmt.Errorf("%s is readable by group %d, the child user's: chmod 600 it", path, cred.Gid)
	}
	return nil
}

// ReadChildFile reads a file a child left in its work directory, at most max bytes: a regular
// file, opened without following a link, owned by cred's user when cred is set (the child's own).
func ReadChildFile(path string, cred *Credential, max int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		return nil, errors.New("not a regular file")
	case cred != nil && (st == nil || st.Uid != cred.Uid):
		return nil, fmt.Errorf("not owned by the child's user %s", cred.Username)
	case fi.Size() > max:
		return nil, fmt.Errorf("larger than %d bytes", max)
	}
	return io.ReadAll(io.LimitReader(f, max+1))
}
