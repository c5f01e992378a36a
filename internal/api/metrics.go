package api

import (
	"errors"

	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/capability"
	"github.com/baton-dev/baton/internal/metrics"
)

// rejected counts a request refused for its credential (Config.Metrics) and returns err. header
// is where a task token was read from: "Authorization" for the callback dialect's bearer token,
// anything else for a capability token.
func (s *Server) rejected(err error, header string) error {
	if s.metrics == nil {
		return err
	}
	callback := header == "Authorization"
	token := func(capability, cb metrics.Credential) metrics.Credential {
		if callback {
			return cb
		}
		return capability
	}
	kind, ok := metrics.APIKeyRejection(err)
	switch {
	case ok:
	case errors.Is(err, auth.ErrTokenMissing):
		kind = token(metrics.CapabilityTokenMissing, metrics.CallbackTokenMissing)
	case errors.Is(err, auth.ErrTokenExpired):
		kind = token(metrics.CapabilityTokenExpired, metrics.CallbackTokenExpired)
	case errors.Is(err, auth.ErrTokenInvalid):
		kind = token(metrics.CapabilityTokenInvalid, metrics.CallbackTokenInvalid)
	case errors.Is(err, capability.ErrScope):
		kind = metrics.TokenScope
	default:
		// The database failed while the credential was looked up: not the credential's fault.
		return err
	}
	s.metrics.CredentialRejected(kind)
	return err
}
