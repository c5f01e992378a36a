// Package capability mints the capability tokens of claimed task attempts and binds the requests
// that carry one to the attempt it covers.
package capability

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/grant"
	"github.com/baton-dev/baton/internal/request"
	"github.com/baton-dev/baton/internal/scope"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/wire"
	"github.com/golang-jwt/jwt/v5"
)

// Config configures an Issuer.
type Config struct {
	Tokens *auth.Tokens // nil: no token is minted or verified
	// StorageRoot is the object storage root under which a token grants its attempt's prefixes
	// (internal/grant); "" grants none.
	StorageRoot string
	Logger      *slog.Logger
	// Dispatcher reads a task's job to mint outside a claim, and its current attempt to judge a
	// request whose body is not its token's.
	Dispatcher *dispatch.Dispatcher
}

// Issuer mints and checks capability tokens.
type Issuer struct {
	tokens      *auth.Tokens
	storageRoot string
	log         *slog.Logger
	d           *dispatch.Dispatcher
}

// New returns an Issuer.
func New(cfg Config) *Issuer {
	i := &Issuer{tokens: cfg.Tokens, storageRoot: cfg.StorageRoot, log: cfg.Logger, d: cfg.Dispatcher}
	if i.log == nil {
		i.log = slog.Default()
	}
	return i
}

// Disabled is the Issuer of a server without task tokens: it mints none, and refuses every
// request that presents one.
var Disabled = New(Config{})

// Enabled reports whether the issuer mints and checks tokens (it has a token store).
func (i *Issuer) Enabled() bool { return i.tokens != nil }

// Mint mints the capability token of a claimed attempt (docs/security.md) from its scope
// (internal/scope): it binds the tenant, job, task and attempt, and carries the lease token so
// that dialects whose bodies do not (the callback dialect) are fenced all the same; a pipeline
// task's lists the datasets its scope lets it read and write, and with object storage every token
// carries the attempt's storage grant (internal/grant). route is t's, decoded.
func (i *Issuer) Mint(ctx context.Context, t *store.Task, job dispatch.JobRef, route *wire.Route) (string, time.Time, error) {
	if i.tokens == nil {
		return "", time.Time{}, errors.New("capability: no token store configured (Config.Tokens): no capability token can be minted")
	}
	sc := scope.FromRoute(t, job.Tenant, route)
	claims := ScopeClaims(sc, t.JobID, t.LeaseToken)
	if i.storageRoot != "" {
		g, skipped := grant.Derive(i.storageRoot, sc.Storage())
		for _, why := range skipped {
			i.log.DebugContext(ctx, "an input's storage is not granted", "task_id", t.ID, "attempt", t.Attempt, "reason", why)
		}
		claims.S3 = g
	}
	return i.tokens.Issue(ctx, claims, auth.TokenTTL(t.Timeout))
}

// ScopeClaims are the claims of a token of the attempt sc is the scope of, a task of job jobID holding
// lease leaseToken, its storage grant left out: what the token carries is what the scope allows.
func ScopeClaims(sc *scope.Scope, jobID, leaseToken string) auth.TaskClaims {
	c := auth.TaskClaims{Tenant: sc.Tenant, JobID: jobID, TaskID: sc.TaskID, Attempt: sc.Attempt, LeaseToken: leaseToken}
	for _, d := range sc.Datasets {
		c.Datasets = append(c.Datasets, auth.DatasetGrant{DatasetUUID: d.UUID, DatasetVersion: d.Version, DatasetName: d.Name,
			Access: string(d.Access), Buffered: d.Buffered})
	}
	return c
}

// Remint mints a token for an attempt outside its claim (a refresh): the job and the route are
// read again.
func (i *Issuer) Remint(ctx context.Context, t *store.Task) (string, time.Time, error) {
	job, err := i.d.JobRef(ctx, t.JobID)
	if err != nil {
		return "", time.Time{}, err
	}
	return i.Mint(ctx, t, job, dispatch.DecodeRoute(t))
}

// Refresh returns a fresh token for the attempt when the current one (c) has less than half of
// its life left, and "" otherwise.
func (i *Issuer) Refresh(ctx context.Context, c *auth.TaskClaims, t *store.Task) (string, time.Time, error) {
	if c == nil || c.ExpiresAt == nil || c.IssuedAt == nil {
		return "", time.Time{}, nil
	}
	life := c.ExpiresAt.Sub(c.IssuedAt.Time)
	if time.Until(c.ExpiresAt.Time) >= life/2 {
		return "", time.Time{}, nil
	}
	return i.Remint(ctx, t)
}

// HeartbeatToken is the fresh capability token a heartbeat answer carries when the caller's (c)
// has less than half of its life left, and "" otherwise. A task-scoped call presents its token;
// an internal one does not (nil), so it is judged by the token its claim handed out (issued when
// the attempt started). The lease is already extended: a failure to sign is logged and the next
// heartbeat tries again.
func (i *Issuer) HeartbeatToken(ctx context.Context, c *auth.TaskClaims, t *store.Task) (string, time.Time) {
	if i.tokens == nil {
		return "", time.Time{}
	}
	if c == nil {
		c = &auth.TaskClaims{}
		c.IssuedAt = jwt.NewNumericDate(t.StartedAt)
		c.ExpiresAt = jwt.NewNumericDate(t.StartedAt.Add(auth.TokenTTL(t.Timeout)))
	}
	token, exp, err := i.Refresh(ctx, c, t)
	if err != nil {
		i.log.ErrorContext(ctx, "refresh capability token", "task_id", t.ID, "attempt", t.Attempt, "err", err)
		return "", time.Time{}
	}
	return token, exp
}

// Verify reads the request's capability token from header ("X-Trace-Task-Capability", or
// "Authorization" as "Bearer <token>") and returns its verified claims: auth's token errors
// when it is missing, expired or invalid. Whether the claims fit the request is Fence's to say.
func (i *Issuer) Verify(r *http.Request, header string) (*auth.TaskClaims, error) {
	raw := r.Header.Get(header)
	if header == "Authorization" {
		scheme, token, ok := strings.Cut(raw, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			raw = ""
		} else {
			raw = strings.TrimSpace(token)
		}
	}
	if i.tokens == nil && raw != "" {
		// No store to verify against: a request without a token is still a 401 (below).
		return nil, request.Errorf(http.StatusServiceUnavailable, "this server was started without task tokens (api.Config.Tokens): it cannot authenticate workers")
	}
	return i.tokens.Verify(r.Context(), raw)
}

type claimsKey struct{}

// WithClaims returns r carrying the verified claims c, for Claims and Fence.
func WithClaims(r *http.Request, c *auth.TaskClaims) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), claimsKey{}, c))
}

// Claims returns the claims WithClaims put in r, or nil.
func Claims(r *http.Request) *auth.TaskClaims {
	c, _ := r.Context().Value(claimsKey{}).(*auth.TaskClaims)
	return c
}

// Fence binds a request that carries verified claims (WithClaims) to its token (deny by default).
// The task it names must be the token's task (auth.ErrTokenScope otherwise). When the attempt (0: not named)
// and lease token ("": not named) it names are the token's, the fence is the token's, and the core
// checks it against the live lease. When they are not, the request is either a stale one — its
// body names an attempt or lease that is no longer the current one, which is a conflict (409, as
// the core would answer) and not a permission problem — or an older attempt's token used with
// the current attempt's body, which must never act (auth.ErrTokenScope).
func (i *Issuer) Fence(r *http.Request, taskID string, attempt int, leaseToken string) (dispatch.Fence, error) {
	c := Claims(r)
	if c == nil || taskID != c.TaskID {
		return dispatch.Fence{}, auth.ErrTokenScope
	}
	if (attempt == 0 || attempt == c.Attempt) && (leaseToken == "" || leaseToken == c.LeaseToken) {
		return dispatch.Fence{TaskID: c.TaskID, Attempt: c.Attempt, LeaseToken: c.LeaseToken}, nil
	}
	t, err := i.d.Store().TaskGet(r.Context(), taskID)
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
	return dispatch.Fence{}, auth.ErrTokenScope
}
