package dataplane_test

import (
	"testing"

	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/dispatch/dispatchtest"
	"github.com/baton-dev/baton/internal/store"
)

// env is a test's dispatcher (dispatchtest.Env) and the data plane over it.
type env struct {
	*dispatchtest.Env
	dp *dataplane.Plane
}

// newEnv returns an env over st; configure may change the data plane's config.
func newEnv(t *testing.T, st store.Store, configure ...func(*dataplane.Config)) *env {
	t.Helper()
	var cfg dataplane.Config
	for _, c := range configure {
		c(&cfg)
	}
	e := dispatchtest.New(t, st)
	return &env{Env: e, dp: dataplane.New(e.D, cfg)}
}

const tenant = dispatchtest.Tenant

var (
	quiet = dispatchtest.Quiet
	epoch = dispatchtest.Epoch
	spec  = dispatchtest.Spec
)

func fence(c *dispatch.Claim) dispatch.Fence {
	return dispatch.Fence{TaskID: c.Task.ID, Attempt: c.Task.Attempt, LeaseToken: c.Task.LeaseToken}
}

func i64(v int64) *int64 { return &v }
