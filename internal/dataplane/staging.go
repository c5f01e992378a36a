package dataplane

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

	"github.com/baton-dev/baton/internal/blob"
	"github.com/baton-dev/baton/internal/grant"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/pipeline"
	"github.com/baton-dev/baton/internal/service"
	"github.com/baton-dev/baton/internal/store"
)

// DefaultStagingRetention is how old the objects of a replace output's uncommitted staging
// folder must be before the collector deletes them, unless configured otherwise.
const DefaultStagingRetention = 7 * 24 * time.Hour

// StagingConfig configures a StagingCollector. Zero fields take their defaults, except
// Retention: 0 deletes nothing.
type StagingConfig struct {
	// Retention is how long ago every object of an uncommitted staging folder must have been
	// written before the folder is deleted; 0 keeps every folder.
	Retention time.Duration
	// Every is the time between passes; default 1 hour.
	Every time.Duration
}

// StagingCollector deletes the staging folders of replace outputs that no commit names: an
// attempt that wrote partitions and never committed them (it failed, it was retried, it
// committed another folder) leaves them behind. A pass looks at every non-buffered output of
// every replace job of the pipelines' active versions, and deletes an attempt's prefix of such a
// dataset, grant.DatasetsDir + "{dataset_uuid}/{task_id}/{attempt}/", only when all of this holds:
//
//   - every object under it was last written more than Retention ago;
//   - the attempt can commit nothing more: its task is gone, ended, or runs a later attempt;
//   - no partition commit names the attempt, current or superseded;
//   - no registered dataset version's storage_ref lies under it, or holds it.
//
// The last two are read after the second, so that a commit made while the pass looked (which the
// attempt can only make while it runs) is seen. Every replica runs it; two that delete the same
// folder both succeed.
type StagingCollector struct {
	dp  *Plane
	cfg StagingConfig
	service.Loop
}

// StagingPass counts what a pass deleted.
type StagingPass struct {
	Folders, Objects int
	Bytes            int64
}

// NewStagingCollector returns a stopped collector of the plane's staging folders.
func (dp *Plane) NewStagingCollector(cfg StagingConfig) *StagingCollector {
	cfg.Every = cmp.Or(cfg.Every, time.Hour)
	return &StagingCollector{dp: dp, cfg: cfg}
}

// Start runs a pass at once and then every Every, until Stop or until ctx ends. It does nothing
// when Retention is 0 or the plane has no object storage.
func (s *StagingCollector) Start(ctx context.Context) error {
	if s.cfg.Retention <= 0 || s.dp.cfg.Blob == nil {
		return nil
	}
	return s.Run(ctx, s.run)
}

func (s *StagingCollector) run(ctx context.Context) {
	for {
		n, err := s.RunOnce(ctx)
		if err != nil && ctx.Err() == nil {
			level := slog.LevelError
			if s.dp.d.Unavailable(err) {
				level = slog.LevelWarn
			}
			s.dp.log.Log(ctx, level, "staging collection pass failed", "err", err)
		}
		if n.Folders > 0 {
			s.dp.log.InfoContext(ctx, "deleted uncommitted staging folders of replace outputs",
				"folders", n.Folders, "objects", n.Objects, "bytes", n.Bytes)
		}
		select {
		case <-ctx.Done():
			return
		case <-s.dp.clock.After(s.cfg.Every):
		}
	}
}

// RunOnce runs one pass and returns what it deleted. A dataset that fails is reported in the
// error after the others were looked at.
func (s *StagingCollector) RunOnce(ctx context.Context) (StagingPass, error) {
	var total StagingPass
	if s.cfg.Retention <= 0 || s.dp.cfg.Blob == nil {
		return total, nil
	}
	outputs, err := s.replaceOutputs(ctx)
	if err != nil {
		return total, err
	}
	cutoff := s.dp.now().Add(-s.cfg.Retention)
	var errs []error
	for _, ds := range outputs {
		n, err := s.collect(ctx, ds, cutoff)
		total.Folders, total.Objects, total.Bytes = total.Folders+n.Folders, total.Objects+n.Objects, total.Bytes+n.Bytes
		if err != nil {
			errs = append(errs, fmt.Errorf("dataset %s: %w", ds, err))
		}
	}
	return total, errors.Join(errs...)
}

// replaceOutputs lists, sorted, the datasets that the replace jobs of the pipelines' active
// versions write and that are not buffered.
func (s *StagingCollector) replaceOutputs(ctx context.Context) ([]string, error) {
	ps, err := s.dp.store.PipelineListActive(ctx)
	if err != nil {
		return nil, err
	}
	set := map[string]bool{}
	for _, p := range ps {
		spec, err := s.dp.specs.get(ctx, s.dp.store, p.Tenant, p.Name, p.ActiveVersion)
		if err != nil {
			return nil, err
		}
		for _, js := range spec.Jobs {
			if js.UpdateStrategy != pipeline.UpdateReplace {
				continue
			}
			for _, o := range js.Outputs {
				set[o.DatasetUUID] = true
			}
		}
	}
	uuids := slices.Sorted(maps.Keys(set))
	var out []string
	for chunk := range slices.Chunk(uuids, 500) {
		ds, err := s.dp.store.DatasetGetMany(ctx, chunk)
		if err != nil {
			return nil, err
		}
		for _, d := range ds {
			if d.WriteMode != pipeline.WriteBuffered {
				out = append(out, d.UUID)
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// stagingFolder is one attempt's prefix of a dataset, as a listing found it.
type stagingFolder struct {
	taskID  string
	attempt int
	prefix  string // the key prefix, ending in "/"
	newest  time.Time
	keys    []string
	bytes   int64
}

// collect deletes the uncommitted staging folders of dataset ds whose objects are all older
// than cutoff.
func (s *StagingCollector) collect(ctx context.Context, ds string, cutoff time.Time) (StagingPass, error) {
	var n StagingPass
	b := s.dp.cfg.Blob
	root := grant.DatasetsDir + ds + "/"
	objs, err := b.ListObjects(ctx, root)
	if err != nil {
		return n, err
	}
	folders := map[string]*stagingFolder{}
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
	var old []*stagingFolder
	for _, prefix := range slices.Sorted(maps.Keys(folders)) {
		f := folders[prefix]
		if !f.newest.Before(cutoff) {
			continue
		}
		live, err := s.mayCommit(ctx, f)
		if err != nil {
			return n, err
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
	committed, err := s.dp.store.PartitionCommitAttempts(ctx, ds)
	if err != nil {
		return n, err
	}
	keep := map[string]bool{}
	for _, a := range committed {
		keep[root+a.TaskID+"/"+strconv.Itoa(a.Attempt)+"/"] = true
	}
	versions, err := s.dp.store.DatasetVersionList(ctx, ds)
	if err != nil {
		return n, err
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
				return n, err
			}
			n.Objects++
		}
		n.Folders++
		n.Bytes += f.bytes
		s.dp.log.InfoContext(ctx, "deleted an uncommitted staging folder", "folder", uri, "objects", len(f.keys),
			"bytes", f.bytes, "last_written", f.newest)
	}
	return n, nil
}

// mayCommit reports whether f's attempt may still report, and so commit: it is its task's
// current attempt, and runs, or timed out with no later attempt claimed (a late report is
// accepted then). A task that is gone, ended, or runs a later attempt commits nothing more for f.
func (s *StagingCollector) mayCommit(ctx context.Context, f *stagingFolder) (bool, error) {
	t, err := s.dp.store.TaskGet(ctx, f.taskID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return false, nil
	case err != nil:
		return false, err
	case t.Attempt != f.attempt || t.Status.Terminal():
		return false, nil
	case t.Status != lifecycle.Pending:
		return true, nil // running (or, for a moment, being claimed)
	}
	a, err := s.dp.store.AttemptGet(ctx, t.ID, t.Attempt)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return a.Outcome == store.OutcomeTimedOut, nil
}

// folderOf returns the attempt's prefix that object o lies under, root + "{task_id}/{attempt}/",
// with the task's id and the attempt; nil when o lies elsewhere (a task id that is not a UUID, an
// attempt that is not a whole number of at least 1 written as such, an object right under the
// attempt's number).
func folderOf(root string, o blob.Object) *stagingFolder {
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
	return &stagingFolder{taskID: parts[0], attempt: attempt, prefix: root + parts[0] + "/" + parts[1] + "/"}
}
