package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/scope"
	"github.com/baton-dev/baton/internal/secrets"
	"github.com/baton-dev/baton/internal/store"
)

// POST /internal/task-secrets {task_id, attempt, lease_token}: the values of the secrets the
// attempt's job declares, for a trusted runtime that runs no user code (the attempt scope
// decides; user code gets none), fenced by the live lease. A declared secret the provider does
// not have fails the attempt for good, a CONFIGURATION error naming the secret, and answers 409
// secret_unavailable: the operator never runs without it. Values are learned by the redactor
// before they leave, so that no log line, stored output or error text of this server shows one.
func (s *Server) taskSecrets(w http.ResponseWriter, r *http.Request) (any, error) {
	f, err := readFence(r, bodyFence)
	if err != nil {
		return nil, err
	}
	ctx := r.Context()
	sc, err := scope.Running(ctx, s.d, f)
	if err != nil {
		return nil, err
	}
	names := sc.Secrets
	out := make(map[string]string, len(names))
	if len(names) == 0 {
		return map[string]any{"secrets": out}, nil
	}
	if s.secrets == nil {
		return nil, codedError(http.StatusNotImplemented, "secrets_unavailable", "this server has no secret provider (--secrets)")
	}
	for _, name := range names {
		v, err := s.secrets.Lookup(ctx, name)
		if errors.Is(err, secrets.ErrNotFound) || errors.Is(err, secrets.ErrInvalidName) {
			msg := fmt.Sprintf("secret %q, which the job declares, is not set in the server's secret provider (%s)", name, s.secrets.Name())
			s.failAttempt(r, f, msg)
			return nil, codedError(http.StatusConflict, "secret_unavailable", msg)
		}
		if err != nil {
			// The error names the secret, never a value (secrets.Provider).
			return nil, fmt.Errorf("secret %q: %w", name, err)
		}
		s.redactor.Add(v)
		out[name] = v
	}
	return map[string]any{"secrets": out}, nil
}

// failAttempt fails attempt f for good with a CONFIGURATION error: what it needs to run is
// missing, and a retry would not find it either.
func (s *Server) failAttempt(r *http.Request, f dispatch.Fence, msg string) {
	no := false
	_, err := s.d.Complete(r.Context(), dispatch.CompleteParams{TaskID: f.TaskID, Attempt: f.Attempt, LeaseToken: f.LeaseToken,
		Outcome: store.OutcomeFailed, Error: &store.TaskError{Category: lifecycle.Configuration, Message: msg, Retryable: &no}})
	if err != nil {
		s.log.WarnContext(r.Context(), "fail an attempt whose secret is missing", "task_id", f.TaskID, "attempt", f.Attempt, "err", err)
	}
}
