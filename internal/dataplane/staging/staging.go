// Package staging collects the staging folders of replace outputs that no commit names: a
// garbage-collection service every replica runs.
package staging

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"

	"github.com/baton-dev/baton/internal/blob"
	"github.com/baton-dev/baton/internal/grant"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/service"
	"github.com/baton-dev/baton/internal/store"
)

// DefaultRetention is how old the objects of a replace output's uncommitted staging folder must
// be before the collector deletes them, unless configured otherwise.
const DefaultRetention = 7 * 24 * time.Hour

// Config configures a Collector. Zero fields take their defaults, except Retention: 0 deletes
// nothing.
type Config struct {
	// Retention is how long ago every object of an uncommitted staging folder must have been
	// written before the folder is deleted; 0 keeps every folder.
	Retention time.Duration
	// Every is the time between passes; default 1 hour.
	Every time.Duration
}

// Blob is the object storage that holds the staging folders; *blob.Store is one.
type Blob interface {
	// Root is the canonical URI of the root ("s3://bucket/prefix/", "file:///dir/").
	Root() string
	// URI is the canonical URI of key.
	URI(key string) string
	// ListObjects lists the objects under a key prefix with their size and last modification
	// time.
	ListObjects(ctx context.Context, prefix string) ([]blob.Object, error)
	// Delete removes an object; a missing one is no error.
	Delete(ctx context.Context, key string) error
}

var _ Blob = (*blob.Store)(nil)

// Deps are what a Collector works on.
type Deps struct {
	// Store holds the tasks, their attempts, the partition commits and the dataset versions.
	Store store.Store
	// Blob is the object storage; nil (no object storage, a nil *blob.Store too) runs nothing.
	Blob Blob
	// Env is the clock, the logger and the judge of transient failures the service runs on.
	Env service.Env
	// ReplaceOutputs lists, sorted, the uuids of the datasets that the replace jobs of the
	// pipelines' active versions write and that are not buffered (the data plane's
	// ReplaceOutputDatasets).
	ReplaceOutputs func(ctx context.Context) ([]string, error)
}

// Collector deletes the staging folders of replace outputs that no commit names: an attempt that
// wrote partitions and never committed them (it failed, it was retried, it committed another
// folder) leaves them behind. A pass looks at every non-buffered output of every replace job of
// the pipelines' active versions, and deletes an attempt's prefix of such a dataset,
// grant.DatasetsDir + "{dataset_uuid}/{task_id}/{attempt}/", only when all of this holds:
//
//   - every object under it was last written more than Retention ago;
//   - the attempt can commit nothing more: its task is gone, ended, or runs a later attempt;
//   - no partition commit names the attempt, current or superseded;
//   - no registered dataset version's storage_ref lies under it, or holds it.
//
// The last two are read after the second, so that a commit made while the pass looked (which the
// attempt can only make while it runs) is seen. Every replica runs it; two that delete the same
// folder both succeed.
type Collector struct {
	cfg   Config
	store store.Store
	blob  Blob
	env   service.Env
	// replaceOutputs is Deps.ReplaceOutputs.
	replaceOutputs func(context.Context) ([]string, error)
	svc            *service.Periodic
}

// Pass counts what a pass deleted.
type Pass struct {
	Folders, Objects int
	Bytes            int64
}

// name is the collector's service name, as its logs give it.
const name = "staging collector"

// New returns a stopped collector of the staging folders in deps.Blob.
func New(cfg Config, deps Deps) *Collector {
	cfg.Every = cmp.Or(cfg.Every, time.Hour)
	env := deps.Env
	if env.Clock == nil {
		env.Clock = clockwork.NewRealClock()
	}
	if env.Logger == nil {
		env.Logger = slog.Default()
	}
	if b, ok := deps.Blob.(*blob.Store); ok && b == nil {
		deps.Blob = nil // a server without object storage hands its nil *blob.Store
	}
	c := &Collector{cfg: cfg, store: deps.Store, blob: deps.Blob, env: env, replaceOutputs: deps.ReplaceOutputs}
	c.svc = service.Every(name, cfg.Every, env, c.pass)
	return c
}

// Start runs a pass at once and then every Every, until Stop or until ctx ends. It does nothing
// when Retention is 0 or there is no object storage.
func (c *Collector) Start(ctx context.Context) error {
	if c.disabled() {
		return nil
	}
	return c.svc.Start(ctx)
}

// Stop ends the collector and waits for its pass, if one runs, to return.
func (c *Collector) Stop() { c.svc.Stop() }

// disabled reports whether the collector deletes nothing: Retention is 0 or there is no object
// storage.
func (c *Collector) disabled() bool { return c.cfg.Retention <= 0 || c.blob == nil }

// pass is the service's pass: RunOnce, and a log of what it deleted.
func (c *Collector) pass(ctx context.Context) error {
	n, err := c.RunOnce(ctx)
	if n.Folders > 0 {
		c.env.Logger.InfoContext(ctx, "deleted uncommitted staging folders of replace outputs",
			"folders", n.Folders, "objects", n.Objects, "bytes", n.Bytes)
	}
	return err
}

// now is the clock's time at the store's millisecond precision.
func (c *Collector) now() time.Time { return time.UnixMilli(c.env.Clock.Now().UnixMilli()).UTC() }

// RunOnce runs one pass and returns what it deleted. A dataset that fails is reported in the
// error after the others were looked at.
func (c *Collector) RunOnce(ctx context.Context) (Pass, error) {
	var total Pass
	if c.disabled() {
		return total, nil
	}
	outputs, err := c.replaceOutputs(ctx)
	if err != nil {
		return total, fmt.Errorf("list replace outputs: %w", err)
	}
	cutoff := c.now().Add(-c.cfg.Retention)
	var errs []error
	for _, ds := range outputs {
		n, err := c.collect(ctx, ds, cutoff)
		total.Folders, total.Objects, total.Bytes = total.Folders+n.Folders, total.Objects+n.Objects, total.Bytes+n.Bytes
		if err != nil {
			errs = append(errs, fmt.Errorf("dataset %s: %w", ds, err))
		}
	}
	return total, errors.Join(errs...)
}

// folder is one attempt's prefix of a dataset, as a listing found it.
type folder struct {
	taskID  string
	attempt int
	prefix  string // the key prefix, ending in "/"
	newest  time.Time
	keys    []string
	bytes   int64
}

// collect deletes the uncommitted staging folders of dataset ds whose objects are all older
// than cutoff.
func (c *Collector) collect(ctx context.Context, ds string, cutoff time.Time) (Pass, error) {
	var n Pass
	b := c.blob
	root := grant.DatasetsDir + ds + "/"
	objs, err := b.ListObjects(ctx, root)
	if err != nil {
		return n, fmt.Errorf("list staging objects: %w", err)
	}
	folders := map[string]*folder{}
	for _, o := range objs {
		f := folderOf(root, o)
		if f == nil {
			continue // not under an attempt's prefix: nothing a task of the job wrote there
		}
		if g := folders[f.prefix]; g != nil {
			f = g
		} else {
			folders[f.prefix] = f
		}
		f.keys = append(f.keys, o.Key)
		f.bytes += o.Size
		if o.ModTime.After(f.newest) {
			f.newest = o.ModTime
		}
	}
	// Old enough, and written by an attempt that can no longer commit: it ended, or its task runs
	// a later one (a task only moves forward, so what is ended now stays ended).
	var old []*folder
	for _, prefix := range slices.Sorted(maps.Keys(folders)) {
		f := folders[prefix]
		if !f.newest.Before(cutoff) {
			continue
		}
		live, err := c.mayCommit(ctx, f)
		if err != nil {
			return n, fmt.Errorf("task %s attempt %d: %w", f.taskID, f.attempt, err)
		}
		if !live {
			old = append(old, f)
		}
	}
	if len(old) == 0 {
		return n, nil
	}
	// Read after the attempts were found ended, so that a commit or version they made before
	// ending is seen.
	committed, err := c.store.PartitionCommitAttempts(ctx, ds)
	if err != nil {
		return n, fmt.Errorf("list committing attempts: %w", err)
	}
	keep := map[string]bool{}
	for _, a := range committed {
		keep[root+a.TaskID+"/"+strconv.Itoa(a.Attempt)+"/"] = true
	}
	versions, err := c.store.DatasetVersionList(ctx, ds)
	if err != nil {
		return n, fmt.Errorf("list versions: %w", err)
	}
	var refs []string
	for _, v := range versions {
		ref := grant.RefPrefix(v.StorageRef)
		if ref == "" {
			continue
		}
		if canon, err := grant.DatasetLocation(ref, b.Root(), ds); err == nil {
			ref = canon
		}
		refs = append(refs, ref)
	}
	for _, f := range old {
		uri := b.URI(f.prefix)
		if keep[f.prefix] || slices.ContainsFunc(refs, func(ref string) bool {
			return strings.HasPrefix(ref, uri) || strings.HasPrefix(uri, strings.TrimSuffix(ref, "/")+"/")
		}) {
			continue
		}
		for _, key := range f.keys {
			if err := b.Delete(ctx, key); err != nil {
				return n, fmt.Errorf("delete %s: %w", key, err)
			}
			n.Objects++
		}
		n.Folders++
		n.Bytes += f.bytes
		c.env.Logger.InfoContext(ctx, "deleted an uncommitted staging folder", "folder", uri, "objects", len(f.keys),
			"bytes", f.bytes, "last_written", f.newest)
	}
	return n, nil
}

// mayCommit reports whether f's attempt may still report, and so commit: it is its task's
// current attempt, and runs, or timed out with no later attempt claimed (a late report is
// accepted then). A task that is gone, ended, or runs a later attempt commits nothing more for f.
func (c *Collector) mayCommit(ctx context.Context, f *folder) (bool, error) {
	t, err := c.store.TaskGet(ctx, f.taskID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read its task: %w", err)
	case t.Attempt != f.attempt || t.Status.Terminal():
		return false, nil
	case t.Status != lifecycle.Pending:
		return true, nil // running (or, for a moment, being claimed)
	}
	a, err := c.store.AttemptGet(ctx, t.ID, t.Attempt)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read its attempt: %w", err)
	}
	return a.Outcome == store.OutcomeTimedOut, nil
}

// folderOf returns the attempt's prefix that object o lies under, root + "{task_id}/{attempt}/",
// with the task's id and the attempt; nil when o lies elsewhere (a task id that is not a UUID, an
// attempt that is not a whole number of at least 1 written as such, an object right under the
// attempt's number).
func folderOf(root string, o blob.Object) *folder {
	rest, ok := strings.CutPrefix(o.Key, root)
	if !ok {
		return nil
	}
	parts := strings.SplitN(rest, "/", 3)
	if len(parts) != 3 || parts[2] == "" || uuid.Validate(parts[0]) != nil {
		return nil
	}
	attempt, err := strconv.Atoi(parts[1])
	if err != nil || attempt < 1 || strconv.Itoa(attempt) != parts[1] {
		return nil
	}
	return &folder{taskID: parts[0], attempt: attempt, prefix: root + parts[0] + "/" + parts[1] + "/"}
}
