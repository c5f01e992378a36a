package dataplane

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/baton-dev/baton/internal/dataplane/reads"
	"github.com/baton-dev/baton/internal/pipeline"
	"github.com/baton-dev/baton/internal/store"
)

// outputProducer is the producer key of output i of job j of pipeline p.
func outputProducer(p, j string, i int) string {
	return "output:" + p + "/" + j + "/" + strconv.Itoa(i)
}

func bufferedProducer(name string) string { return "buffered:" + name }

// checkAgainstTenant checks what a document cannot check alone: that the datasets it reads from
// other pipelines exist and its filters use their allowed fields, and that the names it publishes
// are not another producer's. It returns the tenant's datasets the document names or produces,
// by producer key and by name.
func (dp *Plane) checkAgainstTenant(ctx context.Context, tenant string, doc *pipeline.Document) (map[string]*store.Dataset, pipeline.Problems, error) {
	st := dp.store
	existing := map[string]*store.Dataset{}
	var producers []string
	for _, j := range doc.Jobs {
		for i := range j.Outputs {
			producers = append(producers, outputProducer(doc.Name, j.Name, i))
		}
	}
	for name, p := range doc.Publish {
		if p.WriteMode == pipeline.WriteBuffered {
			producers = append(producers, bufferedProducer(name))
		}
	}
	ds, err := st.DatasetListByProducer(ctx, tenant, producers)
	if err != nil {
		return nil, nil, fmt.Errorf("pipeline %s: the datasets it produces: %w", doc.Name, err)
	}
	for _, x := range ds {
		existing[x.Producer] = x
	}
	var problems pipeline.Problems
	bad := func(path, format string, args ...any) {
		problems = append(problems, pipeline.Problem{Path: path, Message: fmt.Sprintf(format, args...)})
	}
	byName := func(name string) (*store.Dataset, error) {
		if x, ok := existing["name:"+name]; ok {
			return x, nil
		}
		x, err := st.DatasetGetByName(ctx, tenant, name)
		if errors.Is(err, store.ErrNotFound) {
			x, err = nil, nil
		}
		existing["name:"+name] = x
		return x, err
	}
	for _, name := range sortedKeys(doc.Publish) {
		p := doc.Publish[name]
		path := "publish." + name
		held, err := byName(name)
		if err != nil {
			return nil, nil, fmt.Errorf("dataset %s: %w", name, err)
		}
		want := outputProducer(doc.Name, p.From.Job, p.From.Output)
		if p.WriteMode == pipeline.WriteBuffered {
			want = bufferedProducer(name)
		}
		if held != nil && held.Producer != want {
			bad(path, "dataset %q is already produced by %s", name, describeProducer(held))
			continue
		}
		if mine := existing[want]; mine != nil && mine.Name != "" && mine.Name != name {
			bad(path+".from", "output %d of job %q is already published as %q", p.From.Output, p.From.Job, mine.Name)
		}
	}
	var lookupErr error
	problems = append(problems, doc.CheckExternal(func(name string) (pipeline.Allowlist, bool) {
		x, err := byName(name)
		if err != nil {
			lookupErr = err
		}
		if x == nil {
			return pipeline.Allowlist{}, false
		}
		allow, err := reads.Allowlist(x)
		if err != nil {
			lookupErr = err
		}
		return allow, true
	})...)
	if lookupErr != nil {
		return nil, nil, lookupErr
	}
	return existing, problems, nil
}

func describeProducer(x *store.Dataset) string {
	if x.Pipeline == "" {
		return "buffered writers"
	}
	return fmt.Sprintf("pipeline %q job %q output %d", x.Pipeline, x.Job, x.OutputIndex)
}
