package wrapper

import (
	"context"
	"slices"
	"strings"

	"github.com/baton-dev/baton/internal/pipeline"
	"github.com/baton-dev/baton/internal/runner"
	"github.com/baton-dev/baton/worker"
)

// secretEnv adds the secrets of a trusted operator's task to env, each under its name in capitals
// (monad_rpc_key as MONAD_RPC_KEY): the job's declared secrets, which the server delivers only to
// a trusted runtime that runs no user code. A bundle's task, or one of the untrusted runtime,
// never gets one, whatever the server would answer.
func (w *Wrapper) secretEnv(ctx context.Context, t *worker.Task, env map[string]string) error {
	pt := t.Pipeline
	if pt == nil || len(pt.Job.Secrets) == 0 || pt.Job.Bundle != "" || pt.Job.UDF != nil || pt.Job.Runtime == pipeline.RuntimeECSUDF {
		return nil
	}
	vals, err := t.Secrets(ctx)
	if err != nil {
		return err
	}
	for name, v := range vals {
		k := strings.ToUpper(name)
		if slices.Contains(Reserved, k) || k == runner.EnvPath {
			return worker.Permanent(worker.Errorf(worker.Configuration,
				"secret %q would be the child's variable %s, which the wrapper sets: rename the secret", name, k))
		}
		env[k] = v
	}
	return nil
}
