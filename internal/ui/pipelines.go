package ui

import (
	"errors"
	"net/http"
	"net/url"

	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/store"
)

// The data plane's pages: pipelines with their versions and builds, and datasets.

// GET /ui/pipelines
func (u *UI) pipelines(r *http.Request, s *session) (*view, error) {
	ps, err := u.dp.ListPipelines(r.Context(), s.key.Tenant)
	if err != nil {
		return nil, err
	}
	return &view{page: "pipelines", title: "Pipelines", nav: "pipelines", data: ps}, nil
}

type pipelineData struct {
	View     *dataplane.PipelineView
	Jobs     []dataplane.PipelineJobView
	Versions []versionRow
	Document string
	// Build is the version a changed deploy is building beside the active one; nil when none is.
	Build *dataplane.BuildView
	// BuildFailed counts the build's tasks that failed for good: while there are any, the build
	// does not get ready.
	BuildFailed int
}

// versionRow is one version of a pipeline's version list, with its state as the list shows it.
type versionRow struct {
	*store.PipelineVersion
	State string // active, building, ready, deployed, rolled_back or abandoned
}

// versionRows gives each version its state: the active one is active, the one being built is
// building or ready (its build's state), the others keep the state the store records.
func versionRows(v *dataplane.PipelineView, versions []*store.PipelineVersion) []versionRow {
	rows := make([]versionRow, len(versions))
	for i, pv := range versions {
		state := pv.State
		switch {
		case pv.Version == v.Pipeline.ActiveVersion:
			state = "active"
		case v.Build != nil && pv.Version == v.Build.Version:
			state = v.Build.State
		case state == store.VersionDeployed:
			state = "deployed"
		}
		rows[i] = versionRow{PipelineVersion: pv, State: state}
	}
	return rows
}

// GET /ui/pipelines/{name}
func (u *UI) pipeline(r *http.Request, s *session) (*view, error) {
	name := r.PathValue("name")
	v, err := u.dp.GetPipeline(r.Context(), s.key.Tenant, name)
	if err != nil {
		return nil, err
	}
	versions, err := u.dp.PipelineVersions(r.Context(), s.key.Tenant, name)
	if err != nil {
		return nil, err
	}
	d := &pipelineData{View: v, Jobs: v.Jobs(), Versions: versionRows(v, versions), Document: string(v.Active.Document), Build: v.Build}
	if v.Build != nil {
		for _, j := range v.Build.Jobs {
			d.BuildFailed += j.Counts["failed"]
		}
	}
	return &view{page: "pipeline", title: "Pipeline " + name, nav: "pipelines", live: true, data: d}, nil
}

// POST /ui/pipelines/{name}/versions/{version}/activate: cuts over to the version a changed deploy
// built, once its build is ready.
func (u *UI) activate(r *http.Request, s *session) (string, string, error) {
	name, version := r.PathValue("name"), r.PathValue("version")
	to := "/ui/pipelines/" + url.PathEscape(name)
	res, _, err := u.dp.Activate(r.Context(), s.key.Tenant, name, version, false)
	if flash, ok := buildRefusal(err); ok {
		return to, flash, nil
	}
	if err != nil && res != nil {
		// The version is active; only canceling the replaced version's rebuilt tasks failed.
		u.log.ErrorContext(r.Context(), "ui: activate", "pipeline", name, "version", version, "err", err)
		return to, "activated-cancel-failed", nil
	}
	if err != nil {
		return "", "", err
	}
	return to, "activated", nil
}

// POST /ui/pipelines/{name}/versions/{version}/abandon: stops the build of the version.
func (u *UI) abandon(r *http.Request, s *session) (string, string, error) {
	name, version := r.PathValue("name"), r.PathValue("version")
	to := "/ui/pipelines/" + url.PathEscape(name)
	_, err := u.dp.Abandon(r.Context(), s.key.Tenant, name, version)
	if flash, ok := buildRefusal(err); ok {
		return to, flash, nil
	}
	if err != nil {
		return "", "", err
	}
	return to, "abandoned", nil
}

// buildRefusal is the message of the data plane's refusal to activate or abandon a build: the
// build is not ready, or the version is no longer being built (the page was stale).
func buildRefusal(err error) (string, bool) {
	var c *dispatch.ConflictError
	if !errors.As(err, &c) {
		return "", false
	}
	switch c.Code {
	case "pipeline_version_not_ready":
		return "not-ready", true
	case "pipeline_version_not_building":
		return "not-building", true
	}
	return "", false
}

// GET /ui/datasets
func (u *UI) datasets(r *http.Request, s *session) (*view, error) {
	ds, err := u.dp.ListDatasets(r.Context(), s.key.Tenant)
	if err != nil {
		return nil, err
	}
	return &view{page: "datasets", title: "Datasets", nav: "datasets", data: ds}, nil
}

// GET /ui/datasets/{name}: by name, or by uuid for an unpublished job output.
func (u *UI) dataset(r *http.Request, s *session) (*view, error) {
	v, err := u.dp.GetDataset(r.Context(), s.key.Tenant, r.PathValue("name"), 50)
	if err != nil {
		return nil, err
	}
	return &view{page: "dataset", title: "Dataset " + cmpStr(v.Dataset.Name, v.Dataset.UUID), nav: "datasets", data: v}, nil
}
