package api

import (
	"errors"
	"net/http"
	"time"

	"github.com/baton-dev/baton/internal/capability"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/grant"
)

// Credential minting: POST /v1/task/credentials (task-scoped, for the task's own code) and POST
// /internal/task-credentials (the same call on the internal listener, for the trusted wrapper
// that hands them to its child). Both exchange the attempt's capability token, which must cover
// the body's {task_id, attempt, lease_token} and the live lease, for short-lived S3 credentials
// that can do only what the token's s3 grant allows: read its read prefixes, write its write
// prefixes. They never outlive the token; a stale attempt's token mints nothing.

// credentialsAnswer is the answer of both endpoints.
type credentialsAnswer struct {
	AccessKeyID     string   `json:"access_key_id"`
	SecretAccessKey string   `json:"secret_access_key"`
	SessionToken    string   `json:"session_token"`
	Expiration      string   `json:"expiration"`
	EndpointURL     string   `json:"endpoint_url,omitempty"`
	Region          string   `json:"region"`
	ReadPrefixes    []string `json:"read_prefixes"`
	WritePrefixes   []string `json:"write_prefixes"`
}

// fencedCredentials: POST /v1/task/credentials, POST /internal/task-credentials.
func (s *Server) fencedCredentials(fence fenceFunc) handler {
	return func(w http.ResponseWriter, r *http.Request) (any, error) {
		f, err := readFence(r, fence)
		if err != nil {
			return nil, err
		}
		ctx := r.Context()
		// Only the current attempt, running under a live lease, gets credentials; a task whose
		// cancellation was requested is still running and may need them to finish cleanly.
		if _, err := s.d.StartAttempt(ctx, f); err != nil && !errors.Is(err, dispatch.ErrCancelRequested) {
			return nil, err
		}
		c := capability.Claims(r)
		switch {
		case s.minter == nil:
			return nil, codedError(http.StatusNotImplemented, "credentials_unavailable",
				"this server's object storage is not an S3-compatible server (--blob-url s3://...), so there are no credentials to mint")
		case c.S3.Empty():
			return nil, codedError(http.StatusForbidden, "nothing_granted", "the capability token grants no object storage prefix")
		}
		creds, err := s.minter.Mint(ctx, c.S3, c.ExpiresAt.Time, grant.Session(c.TaskID, c.Attempt))
		switch {
		case errors.Is(err, grant.ErrPolicyTooLarge), errors.Is(err, grant.ErrPrefix):
			return nil, codedError(http.StatusUnprocessableEntity, "grant_not_mintable", err.Error())
		case err != nil:
			s.log.WarnContext(ctx, "mint task credentials", "task_id", c.TaskID, "attempt", c.Attempt, "err", err)
			return nil, codedError(http.StatusBadGateway, "sts_failed", "the object storage's STS did not mint credentials: "+err.Error())
		}
		return credentialsAnswer{AccessKeyID: creds.AccessKeyID, SecretAccessKey: creds.SecretAccessKey,
			SessionToken: creds.SessionToken, Expiration: creds.Expiration.UTC().Format(time.RFC3339), EndpointURL: creds.Endpoint,
			Region: creds.Region, ReadPrefixes: c.S3.ReadPrefixes, WritePrefixes: c.S3.WritePrefixes}, nil
	}
}
