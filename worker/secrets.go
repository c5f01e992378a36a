package worker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/baton-dev/baton/internal/secrets"
)

// ErrNoSecret is Secret's answer for a name the task's job does not declare, or that its runtime
// may not receive: user code (a bundle, the ecs_udf runtime) never gets a secret.
var ErrNoSecret = errors.New("baton worker: the task has no such secret")

// pathSecrets is the internal dialect's delivery of a trusted operator's secrets.
const pathSecrets = "/internal/task-secrets"

// Secret returns the value of the secret name (monad_rpc_key) that the task's pipeline job
// declares (secrets: [monad_rpc_key]). The server reads the values from its secret provider
// at the first call and delivers them to this attempt only, over the internal listener; they
// are kept for the attempt and never logged. What the task reports (its output, its error's
// message) is redacted of them. A job that declares a secret the server does not have fails
// at the first call, as a configuration error, and Secret answers its error.
func (t *Task) Secret(ctx context.Context, name string) (string, error) {
	all, err := t.Secrets(ctx)
	if err != nil {
		return "", err
	}
	v, ok := all[name]
	if !ok {
		return "", fmt.Errorf("%w: %q", ErrNoSecret, name)
	}
	return v, nil
}

// Secrets returns every secret the task's job declares, by name (see Secret): none for a task
// that is not a pipeline task, or whose job declares none.
func (t *Task) Secrets(ctx context.Context) (map[string]string, error) {
	if t.Pipeline == nil || len(t.Pipeline.Job.Secrets) == 0 {
		return map[string]string{}, nil
	}
	if t.fetchSecrets == nil {
		return nil, errors.New("baton worker: Secrets: the task was not claimed by a Worker")
	}
	t.mu.Lock()
	got := t.secrets
	t.mu.Unlock()
	if got == nil {
		var err error
		if got, err = t.fetchSecrets(ctx); err != nil {
			return nil, err
		}
		t.mu.Lock()
		t.secrets = got
		t.mu.Unlock()
	}
	return maps.Clone(got), nil
}

// redactor redacts the secrets the task received from what it reports; nil when it got none.
func (t *Task) redactor() *secrets.Redactor {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.secrets) == 0 {
		return nil
	}
	r := secrets.NewRedactor()
	for _, v := range t.secrets {
		r.Add(v)
	}
	return r
}

// fetchSecrets asks the server for the attempt's secrets.
func (w *Worker) fetchSecrets(ctx context.Context, a *attempt) (map[string]string, error) {
	var ans struct {
		Secrets map[string]string `json:"secrets"`
	}
	body := map[string]any{"task_id": a.task.ID, "attempt": a.task.Attempt, "lease_token": a.lease}
	if err := w.postWith(ctx, requestTimeout, pathSecrets, nil, body, &ans); err != nil {
		var e *apiError
		if errors.As(err, &e) && e.Code == "secret_unavailable" {
			// The server failed the attempt for good: what the handler returns is not reported.
			return nil, Permanent(&Error{Category: Configuration, Message: e.Message})
		}
		return nil, fmt.Errorf("baton worker: the task's secrets: %w", err)
	}
	if ans.Secrets == nil {
		ans.Secrets = map[string]string{}
	}
	if w.cfg.onSecret != nil {
		for _, name := range slices.Sorted(maps.Keys(ans.Secrets)) {
			w.cfg.onSecret(ans.Secrets[name])
		}
	}
	return ans.Secrets, nil
}
