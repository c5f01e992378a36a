package api

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/grant"
	"github.com/baton-dev/baton/internal/request"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/wire"
)

// TaskToken mints the capability token of a claimed attempt (docs/security.md): it binds the
// tenant, job, task and attempt, and carries the lease token so that dialects whose bodies do not
// (the callback dialect) are fenced all the same; a pipeline task's carries its pinned input
// datasets (route), and with object storage every token carries the attempt's storage grant
// (internal/grant).
func (s *Server) TaskToken(ctx context.Context, t *store.Task, job dispatch.JobRef, route *wire.Route) (string, time.Time, error) {
	if s.tokens == nil {
		return "", time.Time{}, errors.New("api: no capability token issuer configured (Config.Tokens)")
	}
	claims := auth.TaskClaims{Tenant: job.Tenant, JobID: t.JobID, TaskID: t.ID, Attempt: t.Attempt, LeaseToken: t.LeaseToken}
	if route != nil {
		for _, in := range route.Inputs {
			claims.Datasets = append(claims.Datasets, auth.DatasetGrant{DatasetUUID: in.DatasetUUID,
				DatasetVersion: in.DatasetVersion, DatasetName: in.DatasetName})
		}
	}
	if s.storageRoot != "" {
		// The same derivation decides which buffered datasets the attempt may publish into.
		g, skipped := grant.Derive(s.storageRoot, dataplane.GrantAttempt(t))
		for _, why := range skipped {
			s.log.DebugContext(ctx, "an input's storage is not granted", "task_id", t.ID, "attempt", t.Attempt, "reason", why)
		}
		claims.S3 = g
	}
	return s.tokens.Issue(ctx, claims, auth.TokenTTL(t.Timeout))
}

// reissueToken mints a token for an attempt outside its claim (a refresh): the job and the route
// are read again.
func (s *Server) reissueToken(ctx context.Context, t *store.Task) (string, time.Time, error) {
	job, err := s.d.JobRef(ctx, t.JobID)
	if err != nil {
		return "", time.Time{}, err
	}
	return s.TaskToken(ctx, t, job, dispatch.DecodeRoute(t))
}

// refreshToken returns a fresh token for the attempt when the current one has less than half of
// its life left, and "" otherwise.
func (s *Server) refreshToken(ctx context.Context, c *auth.TaskClaims, t *store.Task) (string, time.Time, error) {
	if c == nil || c.ExpiresAt == nil || c.IssuedAt == nil {
		return "", time.Time{}, nil
	}
	life := c.ExpiresAt.Sub(c.IssuedAt.Time)
	if time.Until(c.ExpiresAt.Time) >= life/2 {
		return "", time.Time{}, nil
	}
	return s.reissueToken(ctx, t)
}

type claimsKey struct{}

// withTaskToken authenticates a task-scoped request by its capability token, read from the
// header the dialect uses ("X-Trace-Task-Capability", or "Authorization: Bearer"), and puts the
// verified claims in the request context. Whether the claims fit the request is checked by
// tokenFence.
func (s *Server) withTaskToken(header string, h handler) handler {
	return func(w http.ResponseWriter, r *http.Request) (any, error) {
		raw := r.Header.Get(header)
		if header == "Authorization" {
			scheme, token, ok := strings.Cut(raw, " ")
			if !ok || !strings.EqualFold(scheme, "Bearer") {
				raw = ""
			} else {
				raw = strings.TrimSpace(token)
			}
		}
		if s.tokens == nil && raw != "" {
			// No store to verify against: a request without a token is still a 401 (below).
			return nil, request.Errorf(http.StatusServiceUnavailable, "this server was started without task tokens (api.Config.Tokens): it cannot authenticate workers")
		}
		c, err := s.tokens.Verify(r.Context(), raw)
		if err != nil {
			return nil, s.rejected(err, header)
		}
		return h(w, r.WithContext(context.WithValue(r.Context(), claimsKey{}, c)))
	}
}

func claimsOf(r *http.Request) *auth.TaskClaims {
	c, _ := r.Context().Value(claimsKey{}).(*auth.TaskClaims)
	return c
}

// errTokenScope: the token is valid but for another task or attempt than the request names.
var errTokenScope = errors.New("capability token does not cover this task attempt")

// tokenFence binds a task-scoped request to its token (deny by default). The task it names must
// be the token's task (403 otherwise). When the attempt (0: not named) and lease token ("": not
// named) it names are the token's, the fence is the token's, and the core checks it against the
// live lease. When they are not, the request is either a stale one — its body names an attempt
// or lease that is no longer the current one, which is a conflict (409, as the core would answer)
// and not a permission problem — or an older attempt's token used with the current attempt's
// body, which must never act (403).
func (s *Server) tokenFence(r *http.Request, taskID string, attempt int, leaseToken string) (dispatch.Fence, error) {
	c := claimsOf(r)
	if c == nil || taskID != c.TaskID {
		return dispatch.Fence{}, s.rejected(errTokenScope, "")
	}
	if (attempt == 0 || attempt == c.Attempt) && (leaseToken == "" || leaseToken == c.LeaseToken) {
		return dispatch.Fence{TaskID: c.TaskID, Attempt: c.Attempt, LeaseToken: c.LeaseToken}, nil
	}
	t, err := s.d.Store().TaskGet(r.Context(), taskID)
	if errors.Is(err, store.ErrNotFound) {
		return dispatch.Fence{}, dispatch.ErrTaskNotFound
	}
	if err != nil {
		return dispatch.Fence{}, err
	}
	switch {
	case attempt != 0 && attempt != t.Attempt:
		return dispatch.Fence{}, &dispatch.AttemptMismatchError{Expected: t.Attempt, Received: attempt}
	case leaseToken != "" && leaseToken != t.LeaseToken:
		return dispatch.Fence{}, dispatch.ErrLeaseMismatch
	}
	return dispatch.Fence{}, s.rejected(errTokenScope, "")
}
