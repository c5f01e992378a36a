package sandbox

import (
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// probeSpec, as a trampoline's spec, makes it exit 0 at once: a probe of what namespaces a
// trampoline can be started in.
const probeSpec = "probe"

var ns struct {
	once      sync.Once
	user, pid bool
}

// namespaces says whether this process can start a trampoline in user and PID namespaces of its
// own (user), or, without a user namespace, in a PID namespace alone (pid, which needs
// CAP_SYS_ADMIN). It tries once, by starting one.
func namespaces() (user, pid bool) {
	ns.once.Do(func() {
		ns.user = probe(unix.CLONE_NEWUSER | unix.CLONE_NEWPID)
		ns.pid = ns.user || probe(unix.CLONE_NEWPID)
	})
	return ns.user, ns.pid
}

// probe says whether a trampoline starts, and exits 0, in new namespaces of flags.
func probe(flags uintptr) bool {
	cmd := exec.Command(selfExe)
	cmd.Args = []string{"baton-sandbox-probe"}
	cmd.Env = append([]string{trampolineEnv + "=" + probeSpec}, trampolineEnviron...)
	cmd.SysProcAttr = sysProcAttr(Policy{Network: true}, flags&unix.CLONE_NEWUSER != 0, flags&unix.CLONE_NEWPID != 0, false)
	return cmd.Run() == nil
}

// sysProcAttr is a trampoline's: in a process group of its own, killed when the thread that
// started it ends, as p.Credential, in new user, PID and network namespaces as asked.
//
// In a user namespace the program's user and group are mapped to themselves and nothing else is
// mapped: the program keeps its identity on files, and its capabilities in the namespace are
// gone once it has executed a program as a user other than the namespace's root. Only a
// privileged server lets the trampoline call setgroups there, which is how it drops the
// supplementary groups it inherited; an unprivileged one must deny it (the kernel says so),
// and the trampoline keeps the server's own groups.
func sysProcAttr(p Policy, user, pid, netns bool) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	uid, gid := uint32(os.Geteuid()), uint32(os.Getegid())
	if c := p.Credential; c != nil {
		uid, gid = c.Uid, c.Gid
		// An empty, non-nil Groups drops the supplementary groups of the server.
		a.Credential = &syscall.Credential{Uid: c.Uid, Gid: c.Gid, Groups: []uint32{}}
	}
	if user {
		a.Cloneflags |= unix.CLONE_NEWUSER
		a.UidMappings = []syscall.SysProcIDMap{{ContainerID: int(uid), HostID: int(uid), Size: 1}}
		a.GidMappings = []syscall.SysProcIDMap{{ContainerID: int(gid), HostID: int(gid), Size: 1}}
		a.GidMappingsEnableSetgroups = os.Geteuid() == 0
	}
	if pid {
		a.Cloneflags |= unix.CLONE_NEWPID
	}
	if netns {
		a.Cloneflags |= unix.CLONE_NEWNET
	}
	return a
}

var netns struct {
	once   sync.Once
	usable bool
}

// netnsUsable says whether this process may give a child a network namespace of its own
// without a user namespace (CAP_SYS_ADMIN): it tries once, on a thread of its own that then
// ends.
func netnsUsable() bool {
	netns.once.Do(func() {
		done := make(chan bool)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends in the namespace it made
			done <- unix.Unshare(unix.CLONE_NEWNET) == nil
		}()
		netns.usable = <-done
	})
	return netns.usable
}
