package specs

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
