// Package auth answers "who is calling": producer API keys (with their rate limit and daily
// quota), and later capability tokens and client certificates. What a caller may do is decided
// where the request is handled.
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/google/uuid"
	"golang.org/x/time/rate"

	"github.com/baton-dev/baton/internal/store"
)

var (
	// ErrNoKey: the request carries no API key.
	ErrNoKey = errors.New("missing API key")
	// ErrBadKey: the key is unknown or revoked.
	ErrBadKey = errors.New("invalid API key")
	// ErrRevokedKey is the ErrBadKey of a key that was revoked (errors.Is(ErrRevokedKey,
	// ErrBadKey)).
	ErrRevokedKey = fmt.Errorf("%w: the key was revoked", ErrBadKey)
)

// secretPrefix marks Baton API keys so that they are recognisable in logs and secret scanners.
const secretPrefix = "bk_"

// Hash is the stored form of a secret.
func Hash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// NewSecret returns a fresh random API key secret.
func NewSecret() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic("auth: crypto/rand failed: " + err.Error())
	}
	return secretPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// CreateKey stores a key for tenant with the given secret (a fresh one when empty) and returns
// the key and its secret. The secret is shown once; only its hash is kept.
func CreateKey(ctx context.Context, keys store.Keys, name, tenant, secret string, now time.Time) (*store.APIKey, string, error) {
	if name == "" {
		return nil, "", errors.New("a key needs a name")
	}
	if tenant == "" {
		tenant = DefaultTenant
	}
	if secret == "" {
		secret = NewSecret()
	}
	if len(secret) < 16 {
		return nil, "", errors.New("an API key must be at least 16 characters long")
	}
	k := &store.APIKey{
		ID:         "key-" + uuid.NewString()[:8],
		Tenant:     tenant,
		Name:       name,
		SecretHash: Hash(secret),
		Prefix:     secret[:min(len(secret), 7)],
		CreatedAt:  now,
	}
	if err := keys.APIKeyInsert(ctx, k); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return nil, "", errors.New("that secret is already a key")
		}
		return nil, "", err
	}
	return k, secret, nil
}

// DefaultTenant owns keys created without a tenant.
const DefaultTenant = "default"

// Limits are the per-key limits of a usage plan (docs/contracts/producer.md).
type Limits struct {
	RatePerSecond float64 // sustained requests per second; 0: unlimited
	Burst         int
	DailyQuota    int64 // requests per UTC day; 0: unlimited
}

// DefaultLimits are the producer contract's: 100 req/s, burst 50, 10,000 a day.
var DefaultLimits = Limits{RatePerSecond: 100, Burst: 50, DailyQuota: 10_000}

// LimitError says a key is over its rate or quota and when to try again.
type LimitError struct {
	Quota      bool // the daily quota, not the rate
	RetryAfter time.Duration
}

func (e *LimitError) Error() string {
	if e.Quota {
		return "daily quota exceeded"
	}
	return "rate limit exceeded"
}

// Authenticator resolves API keys and enforces their limits. The rate limit is per server process;
// the daily quota is counted in the store, so it holds across replicas.
type Authenticator struct {
	keys   store.Keys
	limits Limits
	now    func() time.Time

	mu       sync.Mutex
	limiters map[string]*rate.Limiter
}

// NewAuthenticator returns an Authenticator over keys.
func NewAuthenticator(keys store.Keys, limits Limits, now func() time.Time) *Authenticator {
	if now == nil {
		now = time.Now
	}
	return &Authenticator{keys: keys, limits: limits, now: now, limiters: map[string]*rate.Limiter{}}
}

// Authenticate returns the key a secret belongs to, after charging one request to its rate limit
// and quota. It returns ErrNoKey, ErrBadKey (ErrRevokedKey for a revoked key) or a *LimitError
// when the request must be refused.
func (a *Authenticator) Authenticate(ctx context.Context, secret string) (*store.APIKey, error) {
	if secret == "" {
		return nil, ErrNoKey
	}
	hash := Hash(secret)
	k, err := a.keys.APIKeyGetByHash(ctx, hash)
	if errors.Is(err, store.ErrNotFound) {
		return nil, ErrBadKey
	}
	if err != nil {
		return nil, fmt.Errorf("look up api key: %w", err)
	}
	// The lookup is by hash; compare again in constant time so timing says nothing about the hash.
	if subtle.ConstantTimeCompare([]byte(k.SecretHash), []byte(hash)) != 1 {
		return nil, ErrBadKey
	}
	if !k.RevokedAt.IsZero() {
		return nil, ErrRevokedKey
	}
	now := a.now()
	if a.limits.RatePerSecond > 0 {
		r := a.limiter(k.ID).ReserveN(now, 1)
		if delay := r.DelayFrom(now); delay > 0 {
			r.CancelAt(now)
			return nil, &LimitError{RetryAfter: delay}
		}
	}
	if a.limits.DailyQuota > 0 {
		day := now.UTC().Format(time.DateOnly)
		n, err := a.keys.APIKeyCountRequest(ctx, k.ID, day)
		if err != nil {
			return nil, err
		}
		if n > a.limits.DailyQuota {
			midnight := now.UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
			return nil, &LimitError{Quota: true, RetryAfter: midnight.Sub(now)}
		}
	}
	return k, nil
}

func (a *Authenticator) limiter(keyID string) *rate.Limiter {
	a.mu.Lock()
	defer a.mu.Unlock()
	l, ok := a.limiters[keyID]
	if !ok {
		burst := a.limits.Burst
		if burst <= 0 {
			burst = int(math.Ceil(a.limits.RatePerSecond))
		}
		l = rate.NewLimiter(rate.Limit(a.limits.RatePerSecond), burst)
		a.limiters[keyID] = l
	}
	return l
}
