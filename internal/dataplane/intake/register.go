package intake

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/grant"
	"github.com/baton-dev/baton/internal/pipeline"
	"github.com/baton-dev/baton/internal/report"
	"github.com/baton-dev/baton/internal/store"
)

// RegisterVersions registers the versions a completing task published, on the datasets of its
// tenant; versions of unknown datasets or of other tenants' are ignored. With object storage, a
// version whose storage_ref names a prefix must lie under its dataset's own prefix
// (grant.DatasetLocation), or the completion is refused.
//
// Registration is idempotent per (dataset_uuid, config_hash, range_start, range_end), the
// version's identity (see identified), and per (dataset_uuid, dataset_version): an entry equal to
// what is registered is a success that registers nothing new, and an entry that contradicts it
// refuses the completion with a ConflictError "dataset_version_conflict" — the identity already
// registered under another dataset_version, or the dataset_version already registered with other
// values (config_hash, range_start, range_end, storage_ref; a version a deploy or reset created
// has none of them). Two entries of the same completion that contradict each other are refused
// the same way. The check runs under a lock of each dataset, in the completion's transaction, so
// that of two completions racing on two replicas the later one sees the earlier one's versions.
func (in *Intake) RegisterVersions(ctx context.Context, tx store.Tx, c *dispatch.Work, t *store.Task, pub []report.Published) error {
	if len(pub) > report.MaxPublished {
		return &dispatch.InvalidError{Message: fmt.Sprintf("datasets_published holds %d entries; at most %d per completion", len(pub), report.MaxPublished)}
	}
	var uuids []string
	for i, p := range pub {
		if p.DatasetUUID == "" || p.DatasetVersion == "" {
			return &dispatch.InvalidError{Message: fmt.Sprintf("datasets_published[%d]: dataset_uuid and dataset_version are required", i)}
		}
		if err := in.checkLocation(i, p); err != nil {
			return err
		}
		uuids = append(uuids, p.DatasetUUID)
	}
	slices.Sort(uuids)
	uuids = slices.Compact(uuids)
	ds, err := tx.DatasetGetMany(ctx, uuids)
	if err != nil {
		return fmt.Errorf("the published versions' datasets: %w", err)
	}
	if len(ds) == 0 {
		return nil
	}
	job, err := in.d.JobRef(ctx, t.JobID)
	if err != nil {
		return fmt.Errorf("job %s: %w", t.JobID, err)
	}
	var own []string
	for _, x := range ds {
		if x.Tenant == job.Tenant {
			own = append(own, x.UUID)
		}
	}
	if len(own) == 0 {
		return nil
	}
	slices.Sort(own)
	keys := make([]string, len(own))
	for i, u := range own {
		keys[i] = "dataset-versions:" + u
	}
	if err := tx.RowsLock(ctx, store.LockSet{Keys: keys}); err != nil {
		return fmt.Errorf("lock the versions of %d datasets: %w", len(own), err)
	}
	stored, err := tx.DatasetVersionList(ctx, own...)
	if err != nil {
		return fmt.Errorf("the versions of %d datasets: %w", len(own), err)
	}
	reg := newRegistry(stored)
	var vs []*store.DatasetVersion
	for i, p := range pub {
		if _, ok := slices.BinarySearch(own, p.DatasetUUID); !ok {
			continue
		}
		v := &store.DatasetVersion{DatasetUUID: p.DatasetUUID, Version: p.DatasetVersion, StorageRef: p.StorageRef,
			ConfigHash: p.ConfigHash, Start: p.RangeStart, End: p.RangeEnd, TaskID: t.ID, CreatedAt: c.Now()}
		added, err := reg.add(i, v)
		if err != nil {
			return err
		}
		if added {
			vs = append(vs, v)
		}
	}
	return tx.DatasetVersionInsertMany(ctx, vs)
}

// registered is a dataset version as the registry knows it: stored, or entry of the completion
// (entry ≥ 0).
type registered struct {
	v     *store.DatasetVersion
	entry int
}

// by says who registered r, for a conflict's message.
func (r registered) by() string {
	switch {
	case r.entry >= 0:
		return fmt.Sprintf("datasets_published[%d]", r.entry)
	case r.v.TaskID == "":
		return "a deploy or reset"
	}
	return "task " + r.v.TaskID
}

// registry holds the versions of some datasets, stored and being registered, by dataset version
// and by identity.
type registry struct {
	byVersion  map[[2]string]registered
	byIdentity map[versionIdentity]registered
}

// versionIdentity is what a registered version holds: its dataset, config_hash and range.
type versionIdentity struct {
	dataset, configHash string
	start, end          string // the bound in decimal, "" when absent
}

func newRegistry(stored []*store.DatasetVersion) *registry {
	r := &registry{byVersion: map[[2]string]registered{}, byIdentity: map[versionIdentity]registered{}}
	for _, v := range stored { // oldest first: the first registration of an identity is the one kept
		r.put(registered{v: v, entry: -1})
	}
	return r
}

func (r *registry) put(x registered) {
	k := [2]string{x.v.DatasetUUID, x.v.Version}
	if _, ok := r.byVersion[k]; !ok {
		r.byVersion[k] = x
	}
	if id, ok := identified(x.v); ok {
		if _, ok := r.byIdentity[id]; !ok {
			r.byIdentity[id] = x
		}
	}
}

// add registers v, entry i of the completion: added is false when v is registered already with
// the same values, and the error a ConflictError when v contradicts a version registered.
func (r *registry) add(i int, v *store.DatasetVersion) (added bool, err error) {
	if have, ok := r.byVersion[[2]string{v.DatasetUUID, v.Version}]; ok {
		if sameValues(have.v, v) {
			return false, nil
		}
		but := fmt.Sprintf("it is registered with (%s) by %s", describe(have.v), have.by())
		if have.entry >= 0 {
			but = fmt.Sprintf("%s registers it with (%s)", have.by(), describe(have.v))
		}
		return false, &dispatch.ConflictError{Code: "dataset_version_conflict", Message: fmt.Sprintf(
			"dataset version conflict: datasets_published[%d] registers version %q of dataset %s with (%s), but %s",
			i, v.Version, v.DatasetUUID, describe(v), but)}
	}
	if id, ok := identified(v); ok {
		if have, ok := r.byIdentity[id]; ok {
			which := fmt.Sprintf("which is registered as version %q by %s", have.v.Version, have.by())
			if have.entry >= 0 {
				which = fmt.Sprintf("which %s registers as version %q", have.by(), have.v.Version)
			}
			return false, &dispatch.ConflictError{Code: "dataset_version_conflict", Message: fmt.Sprintf(
				"dataset version conflict: datasets_published[%d] registers version %q of dataset %s for (%s), %s",
				i, v.Version, v.DatasetUUID, describeIdentity(v), which)}
		}
	}
	r.put(registered{v: v, entry: i})
	return true, nil
}

// identified returns the identity of v: its dataset, config_hash and range. A version with no
// config_hash and no range (as a deploy or a reset creates them, or as a task may publish one)
// has none, and is known by its dataset_version alone.
func identified(v *store.DatasetVersion) (versionIdentity, bool) {
	if v.ConfigHash == "" && v.Start == nil && v.End == nil {
		return versionIdentity{}, false
	}
	bound := func(p *int64) string {
		if p == nil {
			return ""
		}
		return strconv.FormatInt(*p, 10)
	}
	return versionIdentity{dataset: v.DatasetUUID, configHash: v.ConfigHash, start: bound(v.Start), end: bound(v.End)}, true
}

// sameValues reports whether a and b, two registrations of one dataset version, hold the same
// config_hash, range and storage_ref (equal as JSON values; an absent one is null).
func sameValues(a, b *store.DatasetVersion) bool {
	return a.ConfigHash == b.ConfigHash && equalBound(a.Start, b.Start) && equalBound(a.End, b.End) &&
		pipeline.SameJSON(a.StorageRef, b.StorageRef)
}

func equalBound(a, b *int64) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

// describeIdentity names the identity of v in a conflict's message.
func describeIdentity(v *store.DatasetVersion) string {
	bound := func(p *int64) string {
		if p == nil {
			return "null"
		}
		return strconv.FormatInt(*p, 10)
	}
	return fmt.Sprintf("config_hash %q, range_start %s, range_end %s", v.ConfigHash, bound(v.Start), bound(v.End))
}

// describe names the values of v in a conflict's message.
func describe(v *store.DatasetVersion) string {
	ref := "null"
	if len(bytes.TrimSpace(v.StorageRef)) > 0 {
		var b bytes.Buffer
		if json.Compact(&b, v.StorageRef) == nil {
			ref = b.String()
		} else {
			ref = string(v.StorageRef)
		}
	}
	return describeIdentity(v) + ", storage_ref " + ref
}

// checkLocation checks where the published version p (entry i) says its files are: with object
// storage, a storage_ref that names a prefix must name one under p's dataset's own prefix. Without
// object storage no grant is ever derived, so the reference is kept as the task gave it; a server
// started later with object storage checks it again before granting anything from it.
func (in *Intake) checkLocation(i int, p report.Published) error {
	raw := grant.RefPrefix(p.StorageRef)
	if raw == "" || in.blob == nil {
		return nil
	}
	if _, err := grant.DatasetLocation(raw, in.blob.Root(), p.DatasetUUID); err != nil {
		return &dispatch.InvalidError{Message: fmt.Sprintf("datasets_published[%d].storage_ref: %s", i,
			strings.TrimPrefix(err.Error(), grant.ErrPrefix.Error()+": "))}
	}
	return nil
}
