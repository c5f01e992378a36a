package main

// What `baton worker` and `baton udf-runner` share: both run tasks as contained child processes
// through internal/wrapper, with the same bundle cache, child user, work directory, grace and
// containment (worker_isolation.go).

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"time"

	"github.com/baton-dev/baton/internal/bundle"
	"github.com/baton-dev/baton/internal/runner"
	"github.com/baton-dev/baton/internal/wrapper"
)

// childFlags are the flags of a command that runs tasks as child processes.
type childFlags struct {
	bundleCache     string
	bundleCacheSize int64
	childUser       string
	workRoot        string
	grace           time.Duration
	iso             isolationFlags
}

func (c *childFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.bundleCache, "bundle-cache", "", "`DIR` where downloaded bundles are kept unpacked, by hash (default: baton-bundles-UID in the system's temporary directory); the child user must be able to traverse it")
	fs.Int64Var(&c.bundleCacheSize, "bundle-cache-size", bundle.DefaultCacheMax, "`BYTES` of unpacked bundles the cache keeps at most")
	fs.StringVar(&c.childUser, "child-user", "nobody", "user the child runs as when the wrapper runs as root (never root)")
	fs.StringVar(&c.workRoot, "work-dir", "", "directory in which each task gets a fresh work directory (default: the system's temporary directory); the child user must be able to traverse it")
	fs.DurationVar(&c.grace, "grace", runner.DefaultGrace, "time a stopped child's process group has between SIGTERM and SIGKILL")
	c.iso.register(fs)
}

// check is the flags' usage error, if any.
func (c *childFlags) check() error {
	switch {
	case c.bundleCacheSize < 1:
		return errors.New("--bundle-cache-size must be positive")
	case c.grace <= 0:
		return errors.New("--grace must be positive")
	}
	return nil
}

// wrapperConfig checks the containment the system gives the children (--min-isolation), opens
// the bundle cache, decides who the children run as and hides the wrapper's /proc entries from
// them, and returns the wrapper's configuration with all of it. As root the children run as
// --child-user, which must not be able to read privateFile (a client key; "" for none);
// otherwise they run as the wrapper's own user, which a --child-user given on the command line
// must then be, and holds names what they could read (for the warning). usage is an error in the
// flags (exit 2), err one of the system (exit 1).
func (c *childFlags) wrapperConfig(fs *flag.FlagSet, log *slog.Logger, privateFile, holds string) (wc wrapper.Config, usage, err error) {
	wc = wrapper.Config{WorkRoot: c.workRoot, Grace: c.grace, Log: log, Env: map[string]string{}}
	if wc.Sandbox, usage, err = c.iso.sandbox(log); usage != nil || err != nil {
		return wc, usage, err
	}
	if c.bundleCache == "" {
		c.bundleCache = filepath.Join(os.TempDir(), "baton-bundles-"+strconv.Itoa(os.Geteuid()))
	}
	cache, err := bundle.OpenCache(c.bundleCache, c.bundleCacheSize)
	if err != nil {
		return wc, nil, err
	}
	wc.Bundles = cache
	explicitUser := false
	fs.Visit(func(f *flag.Flag) { explicitUser = explicitUser || f.Name == "child-user" })
	if os.Geteuid() == 0 {
		cred, err := runner.LookupChild(c.childUser)
		if err != nil {
			return wc, nil, err
		}
		if privateFile != "" {
			if err := runner.CheckPrivate(privateFile, cred); err != nil {
				return wc, nil, err
			}
		}
		wc.Credential = cred
		log.Info("children run as an unprivileged user", "user", cred.Username, "uid", cred.Uid, "gid", cred.Gid)
	} else {
		me, _ := user.Current()
		name := strconv.Itoa(os.Geteuid())
		if me != nil {
			name = me.Username
		}
		if explicitUser {
			if cred, err := runner.LookupChild(c.childUser); err != nil {
				return wc, nil, err
			} else if int(cred.Uid) != os.Geteuid() {
				return wc, nil, fmt.Errorf("--child-user %s: running children as another user needs the wrapper to run as root (it runs as %s)", c.childUser, name)
			}
		} else if runner.Isolation().Landlock > 0 {
			log.Warn("not running as root: children run as the wrapper's own user; Landlock keeps them from its files, but they share its user's limits and processes: run the wrapper as root to isolate them as --child-user",
				"user", name, "uid", os.Geteuid())
		} else {
			log.Warn("not running as root: children run as the wrapper's own user and can read every file it can"+holds+"; run the wrapper as root to isolate them as --child-user",
				"user", name, "uid", os.Geteuid())
		}
	}
	if err := runner.HideFromSameUser(); err != nil {
		log.Warn("could not make the wrapper's /proc entries private", "err", err)
	}
	if os.Getpid() == 1 {
		log.Warn("the wrapper is PID 1: processes orphaned by killed tasks become its zombies; run it under an init (docker run --init, tini)")
	}
	return wc, nil, nil
}
