package wrapper

import (
	"cmp"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/baton-dev/baton/internal/bundle"
	"github.com/baton-dev/baton/internal/runner"
	"github.com/baton-dev/baton/worker"
)

// childSandbox is a task's child's sandbox: sb, and the TCP ports of its server's public URL
// and, with minted object storage credentials, of the object store, which the child must reach.
// Unless it may reach the whole network, these are the only ports it may.
func (w *Wrapper) childSandbox(sb runner.Sandbox, publicURL string, creds *worker.Credentials) runner.Sandbox {
	sb.ConnectPorts = slices.Clone(sb.ConnectPorts)
	add := func(rawURL string) {
		if p := urlPort(rawURL); p != 0 && !slices.Contains(sb.ConnectPorts, p) {
			sb.ConnectPorts = append(sb.ConnectPorts, p)
		}
	}
	add(publicURL)
	if creds != nil {
		add(cmp.Or(creds.EndpointURL, "https://s3.amazonaws.com")) // AWS's own: https
	}
	return sb
}

// bundleSandbox is sb, and the extracted tree of the bundle the child runs: to read, and to
// execute when the bundle is a program of its own rather than a script for a runtime.
func bundleSandbox(sb runner.Sandbox, br *bundleRun) runner.Sandbox {
	dir, err := filepath.Abs(br.dir)
	if err != nil {
		dir = br.dir
	}
	if br.m.Runtime == bundle.Binary {
		sb.Exec = append(slices.Clone(sb.Exec), dir)
	} else {
		sb.Read = append(slices.Clone(sb.Read), dir)
	}
	return sb
}

// urlPort is the TCP port a URL names, or its scheme's; 0 if it names none.
func urlPort(rawURL string) uint16 {
	u, err := url.Parse(rawURL)
	if err != nil {
		return 0
	}
	port := u.Port()
	if port == "" {
		p, err := net.LookupPort("tcp", u.Scheme)
		if err != nil {
			return 0
		}
		port = strconv.Itoa(p)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return 0
	}
	return uint16(p)
}

// containmentHint says, after a failure whose stderr shows a refused access, what the sandbox
// lets a child reach, and how to grant more: "" when nothing was refused or nothing confines
// files.
func containmentHint(stderr string) string {
	if runner.Isolation().Landlock == 0 || !(strings.Contains(stderr, "Permission denied") || strings.Contains(stderr, "EACCES") ||
		strings.Contains(stderr, "Operation not permitted")) {
		return ""
	}
	return " (the child is contained: it reads the system's programs and libraries, its work directory and what the worker's " +
		"--child-read and --child-exec grant; it writes its work directory and --child-write only; it connects to Baton's and the " +
		"object store's ports and --child-connect only)"
}
