package runner

import (
	"os"
	"path/filepath"
	"slices"

	"github.com/baton-dev/baton/internal/sandbox"
)

// Sandbox is what confines a child beyond its user, its environment and its work directory,
// where the system enforces it (Isolation says what does). The zero Sandbox is the tightest:
// the system's runtimes and libraries to read and execute, the work directory to write, no
// network.
type Sandbox struct {
	// Read lists files and directories the child may read besides the system's (an extracted
	// bundle, a virtual environment).
	Read []string
	// ReadWrite lists files and directories it may read and write besides its work directory.
	ReadWrite []string
	// Exec lists files and directories it may execute (and read) besides the system's.
	Exec []string
	// Network lets it reach every address and port.
	Network bool
	// ConnectPorts, without Network, are the TCP ports it may connect to, on any address (the
	// Baton server's public port, the object store's): see sandbox.Policy.ConnectPorts. None:
	// no network at all.
	ConnectPorts []uint16
	// Limits cap its memory, CPU time, file sizes, open files and processes.
	Limits sandbox.Limits
}

// What every child may execute and read: the system's programs and libraries.
var systemExec = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// What every child may read of /etc: what the dynamic loader, the C library's name services, TLS
// clients and the runtimes (Debian's python3 and node are links through /etc/alternatives) read.
// Not /etc as a whole: it may hold secrets readable by the child's user that no task needs.
var systemRead = []string{
	"/etc/ld.so.cache", "/etc/ld.so.preload", "/etc/ld.so.conf", "/etc/ld.so.conf.d",
	"/etc/ssl", "/etc/ca-certificates", "/etc/ca-certificates.conf", "/etc/pki",
	"/etc/resolv.conf", "/etc/hosts", "/etc/host.conf", "/etc/gai.conf", "/etc/nsswitch.conf", "/etc/services",
	"/etc/protocols", "/etc/passwd", "/etc/group", "/etc/localtime", "/etc/timezone", "/etc/mime.types",
	"/etc/alternatives", "/etc/os-release", "/etc/locale.alias",
	"/dev/urandom", "/dev/random",
	// Of /proc, the system's counters, which runtimes read to size themselves and nothing else
	// of another process; and the child's own entries (see the package's documentation).
	"/proc/cpuinfo", "/proc/meminfo", "/proc/stat", "/proc/loadavg", "/proc/uptime", "/proc/version",
	"/proc/self", "/sys/devices/system/cpu",
}

// systemGlobs are more of /etc to read, by pattern: the runtimes' own configuration.
var systemGlobs = []string{"/etc/python3*", "/etc/nodejs"}

// What every child may write besides its work directory: the devices that hold nothing.
var systemWrite = []string{"/dev/null", "/dev/zero", "/dev/full"}

// policy is the sandbox policy of a child that runs program in the work directory dir.
func (s Sandbox) policy(program, dir string, cred *Credential) sandbox.Policy {
	p := sandbox.Policy{
		Read:         existing(slices.Concat(systemRead, globs(systemGlobs), s.Read)),
		ReadWrite:    existing(slices.Concat(systemWrite, []string{dir}, s.ReadWrite)),
		Exec:         existing(slices.Concat(systemExec, []string{program}, s.Exec)),
		Network:      s.Network,
		ConnectPorts: s.ConnectPorts,
		Limits:       s.Limits,
	}
	if cred != nil {
		p.Credential = &sandbox.Credential{Uid: cred.Uid, Gid: cred.Gid}
	}
	return p
}

// Isolation is what the system enforces of a child's Sandbox here.
func Isolation() sandbox.Support { return sandbox.Supported() }

// globs are the paths that match patterns.
func globs(patterns []string) []string {
	var out []string
	for _, p := range patterns {
		m, _ := filepath.Glob(p)
		out = append(out, m...)
	}
	return out
}

// existing are the paths of list that exist: a rule cannot name what is not there.
func existing(list []string) []string {
	var out []string
	for _, p := range list {
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}
