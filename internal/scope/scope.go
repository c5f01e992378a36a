// Package scope decides what an attempt may touch, from the route its task was created with: the
// storage it is granted and the buffered datasets it may publish batches into.
package scope

import (
	"slices"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/grant"
	"github.com/baton-dev/baton/internal/pipeline"
	"github.com/baton-dev/baton/internal/store"
)

// Grant is what the storage grant of t's current attempt is derived from (grant.Derive):
// its pinned input versions and its output datasets, as its route records them; a task that is
// not a pipeline task reads nothing and writes only its scratch space. The Buffer Queue decides
// from the same outputs, so that a task may publish batches into exactly the buffered datasets
// its capability token lets it write batches for.
func Grant(t *store.Task) grant.Attempt {
	a := grant.Attempt{TaskID: t.ID, Attempt: t.Attempt}
	r := dispatch.DecodeRoute(t)
	if r == nil {
		return a
	}
	for _, in := range r.Inputs {
		a.Inputs = append(a.Inputs, grant.Input{DatasetUUID: in.DatasetUUID, StorageRef: in.StorageRef})
	}
	for _, o := range r.Outputs {
		a.Outputs = append(a.Outputs, grant.Output{DatasetUUID: o.DatasetUUID, Buffered: o.WriteMode == pipeline.WriteBuffered})
	}
	return a
}

// WritesBuffered reports whether t's job declares the buffered dataset datasetUUID among its
// outputs: whether t may publish batches into it.
func WritesBuffered(t *store.Task, datasetUUID string) bool {
	return slices.Contains(Grant(t).Outputs, grant.Output{DatasetUUID: datasetUUID, Buffered: true})
}
