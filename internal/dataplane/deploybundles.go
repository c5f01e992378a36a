package dataplane

import (
	"context"
	"errors"
	"fmt"

	"github.com/baton-dev/baton/internal/bundle"
	"github.com/baton-dev/baton/internal/dataplane/specs"
	"github.com/baton-dev/baton/internal/pipeline"
	"github.com/baton-dev/baton/internal/udf"
	"github.com/baton-dev/baton/wire"
)

// Bundles pins the user code bundle a job runs (internal/udf's Registry).
type Bundles interface {
	// Pin resolves the tenant's bundle id started at entrypoint ("" its own). It refuses a
	// bundle the tenant does not have (udf.ErrNotFound), one it may not run (a *udf.StateError)
	// and an entrypoint that names no file of it (a *bundle.Error).
	Pin(ctx context.Context, tenant, id, entrypoint string) (*wire.Bundle, error)
}

// pinBundles pins the bundle of each job of the document that runs one, by job name: its id,
// its hash and language, and the entrypoint it starts at. A bundle the tenant cannot run there
// is a problem of the job's udf block.
func (d *deployment) pinBundles(ctx context.Context) (map[string]*wire.Bundle, pipeline.Problems, error) {
	pins := map[string]*wire.Bundle{}
	var problems pipeline.Problems
	for i, j := range d.doc.Jobs {
		if j.UDF == nil {
			continue
		}
		path := fmt.Sprintf("jobs[%d].udf", i)
		if d.dp.cfg.Bundles == nil {
			problems = append(problems, pipeline.Problem{Path: path + ".bundle_id",
				Message: "this server keeps no bundles: it has no object storage (--blob-url)"})
			continue
		}
		pin, err := d.dp.cfg.Bundles.Pin(ctx, d.who.Tenant, j.UDF.BundleID, j.UDF.Entrypoint)
		var (
			bad   *bundle.Error
			state *udf.StateError
		)
		switch {
		case errors.As(err, &bad):
			problems = append(problems, pipeline.Problem{Path: path + ".entrypoint", Message: bad.Error()})
		case errors.Is(err, udf.ErrNotFound):
			problems = append(problems, pipeline.Problem{Path: path + ".bundle_id", Message: fmt.Sprintf(
				"no bundle %q: upload it first (POST /v1/udf/bundles, or baton udf upload)", j.UDF.BundleID)})
		case errors.As(err, &state):
			problems = append(problems, pipeline.Problem{Path: path + ".bundle_id", Message: state.Message})
		case err != nil:
			return nil, nil, fmt.Errorf("job %s: its bundle %s: %w", j.Name, j.UDF.BundleID, err)
		default:
			pins[j.Name] = pin
		}
	}
	return pins, problems, nil
}

// pin sets the bundle each job of spec runs, as pinBundles pinned it.
func (d *deployment) pin(spec *specs.Pipeline) {
	for _, j := range spec.Jobs {
		j.UDF = d.bundles[j.Name]
	}
}
