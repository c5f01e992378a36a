package api

import (
	"errors"
	"net/http"

	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/capability"
	"github.com/baton-dev/baton/internal/dispatch"
)

// withTaskToken authenticates a task-scoped request by its capability token, read from the
// header the dialect uses ("X-Trace-Task-Capability", or "Authorization: Bearer"), and puts the
// verified claims in the request (capability.Claims). Whether the claims fit the request is
// checked by tokenFence.
func (s *Server) withTaskToken(header string, h handler) handler {
	return func(w http.ResponseWriter, r *http.Request) (any, error) {
		c, err := s.caps.Verify(r, header)
		if err != nil {
			return nil, s.rejected(err, header)
		}
		return h(w, capability.WithClaims(r, c))
	}
}

// tokenFence binds a task-scoped request to its token (capability.Issuer.Fence), counting a
// request its token does not cover.
func (s *Server) tokenFence(r *http.Request, taskID string, attempt int, leaseToken string) (dispatch.Fence, error) {
	f, err := s.caps.Fence(r, taskID, attempt, leaseToken)
	if errors.Is(err, auth.ErrTokenScope) {
		return f, s.rejected(err, "")
	}
	return f, err
}
