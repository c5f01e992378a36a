package wrapper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/baton-dev/baton/internal/bundle"
	"github.com/baton-dev/baton/wire"
	"github.com/baton-dev/baton/worker"
)

// A task whose job runs a bundle runs the bundle, never the wrapper's command: the wrapper
// downloads it with the task's capability token (a conditional GET when a copy of that hash is
// cached, which also tells it the bundle was not disabled), checks its SHA-256 before anything
// of it is unpacked, and starts its entrypoint as the child, with the same protocol and
// containment as any other child.

// capabilityHeader carries the attempt's capability token on task-scoped requests.
const capabilityHeader = "X-Trace-Task-Capability"

// downloadTimeout bounds one download of a bundle.
const downloadTimeout = 5 * time.Minute

// bundleRun is a bundle ready to run: the command that starts it, the extracted tree the child
// reads, and its manifest.
type bundleRun struct {
	command []string
	dir     string
	m       *bundle.Manifest
	release func()
}

// prepareBundle gets the bundle u of task t into the cache, checked, and answers how to start
// it. A disabled bundle, or one the server no longer hands this attempt, is a permanent
// CONFIGURATION failure; an archive whose hash is not the pinned one an INFRASTRUCTURE failure,
// never run.
func (w *Wrapper) prepareBundle(ctx context.Context, t *worker.Task, u *wire.Bundle) (*bundleRun, error) {
	if w.bundles == nil {
		return nil, worker.Errorf(worker.Configuration, "task %s runs bundle %s, and this worker keeps no bundle cache", t.ID, u.ID)
	}
	dir, m, release, cached := w.bundles.Get(u.SHA256)
	ctx, cancel := context.WithTimeout(ctx, downloadTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.publicURLOf(t)+cmpDownload(u), nil)
	if err != nil {
		return nil, w.dropRelease(release, worker.Errorf(worker.Configuration, "bundle %s: %v", u.ID, err))
	}
	token, _ := t.Token()
	req.Header.Set(capabilityHeader, token)
	if cached {
		req.Header.Set("If-None-Match", `"`+u.SHA256+`"`)
	}
	resp, err := w.http.Do(req)
	if err != nil {
		return nil, w.dropRelease(release, worker.Errorf(worker.Infrastructure, "download bundle %s: %v", u.ID, err))
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotModified && cached:
		// The copy is current and the bundle still enabled.
	case resp.StatusCode == http.StatusOK:
		if cached {
			release()
		}
		dir, m, release, err = w.bundles.Add(u.SHA256, resp.Body, w.bundleLimits)
		if errors.Is(err, bundle.ErrHashMismatch) {
			return nil, worker.Errorf(worker.Infrastructure, "bundle %s was not run: %v", u.ID, err)
		}
		if err != nil {
			return nil, worker.Errorf(worker.Infrastructure, "bundle %s was not run: unpack it: %v", u.ID, err)
		}
	case resp.StatusCode == http.StatusForbidden:
		return nil, w.dropRelease(release, worker.Permanent(worker.Errorf(worker.Configuration,
			"%s", refusal(resp))))
	default:
		return nil, w.dropRelease(release, worker.Errorf(worker.Infrastructure,
			"download bundle %s: %s: %s", u.ID, resp.Status, refusal(resp)))
	}
	cmd, err := bundle.Command(dir, m, u.Entrypoint)
	if err != nil {
		release()
		return nil, worker.Permanent(worker.Errorf(worker.Configuration, "bundle %s: %v", u.ID, err))
	}
	return &bundleRun{command: cmd, dir: dir, m: m, release: release}, nil
}

// cmpDownload is the path to download u from.
func cmpDownload(u *wire.Bundle) string {
	if strings.HasPrefix(u.Download, "/") {
		return u.Download
	}
	return wire.BundleDownload
}

// dropRelease releases a cached copy that will not be used, and returns err.
func (w *Wrapper) dropRelease(release func(), err error) error {
	if release != nil {
		release()
	}
	return err
}

// refusal is the message of a refused download, from its JSON body when it has one.
func refusal(resp *http.Response) string {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	var body struct {
		Error   string `json:"error"`
		Message string `json:"message"`
	}
	if json.Unmarshal(b, &body) == nil {
		if body.Message != "" {
			return body.Message
		}
		if body.Error != "" {
			return body.Error
		}
	}
	return fmt.Sprintf("%q", strings.TrimSpace(string(b)))
}

// lookPath finds the program name in the directories of path (a PATH value); a name with a
// slash is itself.
func lookPath(name, path string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, dir := range filepath.SplitList(path) {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("this worker has no %s in the children's PATH (%s): install it, or set PATH with --child-env", name, path)
}

// bundleOf is the bundle t's job runs, nil when it runs none.
func bundleOf(t *worker.Task) *wire.Bundle {
	if t.Pipeline == nil {
		return nil
	}
	return t.Pipeline.Job.UDF
}

// allowed is the part of env a bundle may see: the variables its manifest's env_allowlist
// names, and those every child gets (PassedThrough).
func allowed(env map[string]string, allowlist []string) map[string]string {
	out := map[string]string{}
	for k, v := range env {
		if slices.Contains(allowlist, k) || slices.Contains(PassedThrough, k) {
			out[k] = v
		}
	}
	return out
}
