package specs

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/baton-dev/baton/internal/pipeline"
	"github.com/google/uuid"
)

// BuildPlan is what a version built beside the active one rebuilds. It is part of the version's
// spec, decided when it is deployed.
type BuildPlan struct {
	// Base is the version that was active when it was deployed.
	Base string `json:"base"`
	// Jobs are the jobs it rebuilds, each with why.
	Jobs map[string]string `json:"jobs"`
	// Switched are the jobs its change affects that it does not rebuild, each with why: jobs that
	// write a buffered dataset, which is live and keeps no versions. They change at activation.
	Switched map[string]string `json:"switched,omitempty"`
	// Pointers are the dataset versions it rebuilds, by dataset uuid: new versions of the outputs
	// of the rebuilt jobs, current from its activation on.
	Pointers map[string]string `json:"pointers"`
	// Activate is ActivateManual or ActivateWhenReady.
	Activate string `json:"activate"`
}

// materializes reports why job b (deployed before) and job a differ in what they write: "" when
// they do not. A change of runtime, operator, config, inputs (their datasets or filters),
// execution strategy, update strategy, unique key or outputs does; retries, timeouts, priority,
// queue, scaling, backpressure and schedule do not.
func materializes(b, a *Job) string {
	switch {
	case b.Runtime != a.Runtime:
		return fmt.Sprintf("runtime changed from %s to %s", b.Runtime, a.Runtime)
	case b.Operator != a.Operator:
		return fmt.Sprintf("operator changed from %s to %s", b.Operator, a.Operator)
	case !pipeline.SameJSON(b.Config, a.Config):
		return "config changed"
	case len(b.Inputs) != len(a.Inputs):
		return "inputs changed"
	case b.Strategy != a.Strategy:
		return "execution_strategy changed"
	case b.UpdateStrategy != a.UpdateStrategy || !slices.Equal(b.UniqueKey, a.UniqueKey):
		return "update_strategy or unique_key changed"
	case len(b.Outputs) != len(a.Outputs):
		return "outputs changed"
	}
	for i := range a.Inputs {
		if b.Inputs[i].DatasetUUID != a.Inputs[i].DatasetUUID || !pipeline.SameJSON(b.Inputs[i].Where, a.Inputs[i].Where) {
			return fmt.Sprintf("input %d changed", i)
		}
	}
	return ""
}

// PlanBuild decides what next rebuilds beside base, the active version: the jobs whose change
// materializes differently, and every job downstream of a rebuilt one through a dataset it
// rebuilds. A job that writes a buffered dataset is not rebuilt (the dataset is live: it keeps no
// versions to build beside) but switched at activation, and what it writes is not rebuilt either.
// A job new in next is rebuilt only when it reads a rebuilt dataset. Nil when nothing is rebuilt.
func PlanBuild(base, next *Pipeline, buffered map[string]bool) *BuildPlan {
	plan := &BuildPlan{Base: base.Version, Jobs: map[string]string{}, Switched: map[string]string{}, Pointers: map[string]string{}}
	affect := func(j *Job, why string) bool {
		if plan.Jobs[j.Name] != "" || plan.Switched[j.Name] != "" {
			return false
		}
		for _, o := range j.Outputs {
			if buffered[o.DatasetUUID] {
				plan.Switched[j.Name] = why + "; it writes a buffered dataset, which keeps no versions: it changes at activation"
				return false
			}
		}
		plan.Jobs[j.Name] = why
		for _, o := range j.Outputs {
			plan.Pointers[o.DatasetUUID] = uuid.NewString()
		}
		return true
	}
	for _, j := range next.Jobs {
		if b := base.Job(j.Name); b != nil {
			if why := materializes(b, j); why != "" {
				affect(j, why)
			}
		}
	}
	for changed := true; changed; {
		changed = false
		for _, j := range next.Jobs {
			for _, in := range j.Inputs {
				if _, ok := plan.Pointers[in.DatasetUUID]; ok {
					if affect(j, fmt.Sprintf("reads %s, which is rebuilt", cmp.Or(in.DatasetName, in.DatasetUUID))) {
						changed = true
					}
					break
				}
			}
		}
	}
	if len(plan.Jobs) == 0 {
		return nil
	}
	return plan
}
