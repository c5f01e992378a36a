package pipeline

import (
	"fmt"
	"slices"
)

// Job returns the job named name, or nil.
func (d *Document) Job(name string) *Job {
	for i := range d.Jobs {
		if d.Jobs[i].Name == name {
			return &d.Jobs[i]
		}
	}
	return nil
}

// ResetJobs names the source jobs whose bootstrap.reset_outputs is true.
func (d *Document) ResetJobs() map[string]bool {
	out := map[string]bool{}
	for _, j := range d.Jobs {
		if j.Activation == ActivationSource && j.Bootstrap != nil && j.Bootstrap.ResetOutputs {
			out[j.Name] = true
		}
	}
	return out
}

// PublishedAs returns the direct publish entry of the job's output, or nil. A valid document
// publishes an output directly under one name at most.
func (d *Document) PublishedAs(job string, output int) *Publish {
	for _, p := range d.Publish {
		if p.WriteMode == WriteDirect && p.From.Job == job && p.From.Output == output {
			return p
		}
	}
	return nil
}

// ExternalDatasets returns, sorted, the datasets the document's inputs read that it does not
// publish itself: other DAGs' datasets, which the caller must find in the store.
func (d *Document) ExternalDatasets() []string {
	var out []string
	for _, j := range d.Jobs {
		for _, in := range j.Inputs {
			if ds := in.From.Dataset; ds != "" && d.Publish[ds] == nil && !slices.Contains(out, ds) {
				out = append(out, ds)
			}
		}
	}
	slices.Sort(out)
	return out
}

// CheckExternal checks the inputs that read other DAGs' datasets: lookup returns a dataset's
// allowlist, or false when the tenant has no such dataset. Problems carry the inputs' paths, as
// Parse's do.
func (d *Document) CheckExternal(lookup func(dataset string) (Allowlist, bool)) Problems {
	type found struct {
		allow Allowlist
		ok    bool
	}
	seen := make(map[string]found) // one lookup per dataset
	var ps Problems
	for i, j := range d.Jobs {
		for k, in := range j.Inputs {
			ds := in.From.Dataset
			if ds == "" || d.Publish[ds] != nil {
				continue
			}
			path := fmt.Sprintf("jobs[%d].inputs[%d]", i, k)
			f, done := seen[ds]
			if !done {
				f.allow, f.ok = lookup(ds)
				seen[ds] = f
			}
			allow, ok := f.allow, f.ok
			if !ok {
				ps = append(ps, Problem{Path: path + ".from.dataset", Message: fmt.Sprintf("unknown dataset %q", ds)})
				continue
			}
			ps = append(ps, CheckWhere(path+".where", in.Where, allow)...)
		}
	}
	return ps
}
