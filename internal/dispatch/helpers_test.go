package dispatch_test

import (
	"testing"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/dispatch/dispatchtest"
	"github.com/baton-dev/baton/internal/store"
)

// env is a test's dispatcher (dispatchtest.Env), with the helpers of this package's tests.
type env struct{ *dispatchtest.Env }

func newEnv(t *testing.T, st store.Store, configure ...func(*dispatch.Config)) *env {
	t.Helper()
	return &env{dispatchtest.New(t, st, configure...)}
}

const tenant = dispatchtest.Tenant

var (
	quiet      = dispatchtest.Quiet
	epoch      = dispatchtest.Epoch
	spec       = dispatchtest.Spec
	count      = dispatchtest.Count
	wantEvents = dispatchtest.WantEvents
)
