package dataplane

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/baton-dev/baton/internal/pipeline"
)

// ReplaceOutputDatasets lists, sorted, the uuids of the datasets that the replace jobs of the
// pipelines' active versions write and that are not buffered: the outputs whose uncommitted
// staging folders the staging collector (package staging) deletes.
func (dp *Plane) ReplaceOutputDatasets(ctx context.Context) ([]string, error) {
	ps, err := dp.store.PipelineListActive(ctx)
	if err != nil {
		return nil, fmt.Errorf("list active pipelines: %w", err)
	}
	set := map[string]bool{}
	for _, p := range ps {
		spec, err := dp.specs.Get(ctx, dp.store, p.Tenant, p.Name, p.ActiveVersion)
		if err != nil {
			return nil, err // names the pipeline and its version
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
		ds, err := dp.store.DatasetGetMany(ctx, chunk)
		if err != nil {
			return nil, fmt.Errorf("get replace output datasets: %w", err)
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
