package main

// `baton worker --exec`'s flags on how its children are contained (internal/runner's Sandbox),
// and the check of the isolation this system gives them.

import (
	"flag"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"github.com/baton-dev/baton/internal/runner"
	"github.com/baton-dev/baton/internal/sandbox"
)

// isolationFlags are the flags of a worker's children's containment.
type isolationFlags struct {
	min                      string
	read, write, exec, ports listFlag
	network                  bool
}

func (f *isolationFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.min, "min-isolation", sandbox.LevelNone, "refuse to start below this isolation level of the children: "+strings.Join(sandbox.Levels, ", ")+" (each adds to the one before it)")
	fs.Var(&f.read, "child-read", "file or directory `PATH` children may read besides the system's programs, libraries and a few files of /etc (repeatable; a virtual environment, data)")
	fs.Var(&f.write, "child-write", "file or directory `PATH` children may write besides their work directory (repeatable)")
	fs.Var(&f.exec, "child-exec", "file or directory `PATH` children may execute besides the system's (/usr, /bin, /lib...) (repeatable)")
	fs.Var(&f.ports, "child-connect", "TCP `PORT` children may connect to, on any address, besides the --url's and the object store's (repeatable)")
	fs.BoolVar(&f.network, "child-network", false, "let children reach every address and port (default: no network but the TCP ports of --url, the object store and --child-connect)")
}

// sandbox checks the flags, logs what contains the children, and refuses a system below
// --min-isolation: usage is an error in the flags (exit 2), err one of the system (exit 1).
func (f *isolationFlags) sandbox(log *slog.Logger) (sb runner.Sandbox, usage, err error) {
	if !slices.Contains(sandbox.Levels, f.min) {
		return sb, fmt.Errorf("--min-isolation %q: want one of %s", f.min, strings.Join(sandbox.Levels, ", ")), nil
	}
	sb = runner.Sandbox{Read: f.read, ReadWrite: f.write, Exec: f.exec, Network: f.network}
	for _, p := range f.ports {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return sb, fmt.Errorf("--child-connect %q: want a TCP port, 1 to 65535", p), nil
		}
		sb.ConnectPorts = append(sb.ConnectPorts, uint16(n))
	}
	s := runner.Isolation()
	log.Info("untrusted children are contained", "level", s.Level(), "containment", s.String())
	if err := sandbox.CheckLevel(s.Level(), f.min); err != nil {
		return sb, nil, fmt.Errorf("--min-isolation %s: %w", f.min, err)
	}
	return sb, nil, nil
}
