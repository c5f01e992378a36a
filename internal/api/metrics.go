package api

import "github.com/baton-dev/baton/internal/metrics"

// rejected counts a request refused for its credential (Config.Metrics, metrics.Rejection) and
// returns err. header is where a task token was read from: "Authorization" for the callback
// dialect's bearer token, anything else for a capability token.
func (s *Server) rejected(err error, header string) error {
	if kind, ok := metrics.Rejection(err, header == "Authorization"); ok {
		s.metrics.CredentialRejected(kind)
	}
	return err
}
