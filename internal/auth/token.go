package auth

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"

	"github.com/baton-dev/baton/internal/grant"
	"github.com/baton-dev/baton/internal/store"
)

var (
	// ErrTokenMissing: no capability token was sent.
	ErrTokenMissing = errors.New("missing task capability token")
	// ErrTokenInvalid: the token is malformed, tampered with, or signed by an unknown or retired
	// key.
	ErrTokenInvalid = errors.New("invalid task capability token")
	// ErrTokenExpired: the token is past its expiry.
	ErrTokenExpired = errors.New("task capability token expired")
	// ErrTokenScope: the token is valid but for another task or attempt than the request names.
	ErrTokenScope = errors.New("capability token does not cover this task attempt")
)

// TaskClaims are what a capability token lets its holder do: act for one attempt of one task.
type TaskClaims struct {
	Tenant     string `json:"tenant"`
	JobID      string `json:"job_id"`
	TaskID     string `json:"task_id"`
	Attempt    int    `json:"attempt"`
	LeaseToken string `json:"lease_token"`
	// Datasets are the datasets of a pipeline task's job, as its attempt's scope allows them
	// (internal/scope): its inputs, read at their pinned versions, then its outputs, written (and
	// read back) at theirs; a buffered output may take the attempt's batches.
	Datasets []DatasetGrant `json:"datasets,omitempty"`
	// S3 is the object storage the attempt may read and write, derived by the server (never
	// taken from a request); POST /v1/task/credentials mints credentials for exactly this.
	S3 *grant.S3 `json:"s3,omitempty"`
	jwt.RegisteredClaims
}

// DatasetGrant is one dataset version a token lets its task read or write.
type DatasetGrant struct {
	DatasetUUID    string `json:"dataset_uuid"`
	DatasetVersion string `json:"dataset_version"`
	DatasetName    string `json:"dataset_name,omitempty"`
	// Access is "read" for an input of the task's job and "write" for an output.
	Access string `json:"access"`
	// Buffered: a buffered output, which the attempt may publish batches into.
	Buffered bool `json:"buffered,omitempty"`
}

// TokenTTL is a token's lifetime for a task with the given execution timeout (0: none):
// the timeout plus five minutes, at most 24 hours; one hour without a timeout.
func TokenTTL(timeout time.Duration) time.Duration {
	if timeout <= 0 {
		return time.Hour
	}
	return min(timeout+5*time.Minute, 24*time.Hour)
}

const issuer = "baton"

// keyRefresh is how often the key ring is re-read, so that a rotation or retirement on one
// replica reaches the others.
const keyRefresh = 30 * time.Second

// Tokens issues and verifies capability tokens (HS256, with the signing key's id in "kid"). Keys
// live in the store so that every replica shares them; the newest unretired key signs, and every
// unretired key verifies, so a rotation does not invalidate tokens already handed out.
type Tokens struct {
	keys store.Keys
	now  func() time.Time

	first sync.Mutex // one first key per process: concurrent first issues wait for it

	mu       sync.Mutex
	ring     map[string][]byte // unretired keys by kid
	signer   string
	loadedAt time.Time
}

// NewTokens returns a Tokens over the store's signing keys.
func NewTokens(keys store.Keys, now func() time.Time) *Tokens {
	if now == nil {
		now = time.Now
	}
	return &Tokens{keys: keys, now: now}
}

// Rotate creates a new signing key, which signs from now on; it returns its kid.
func (t *Tokens) Rotate(ctx context.Context) (string, error) {
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return "", err
	}
	// A UUIDv7, in full: keys are ordered by creation time and then by kid, and two keys made in
	// the same millisecond must still sort in the order they were made.
	k := &store.SigningKey{KID: "k-" + uuid.Must(uuid.NewV7()).String(), Secret: []byte(base64.RawStdEncoding.EncodeToString(secret)), CreatedAt: t.now()}
	if err := t.keys.SigningKeyInsert(ctx, k); err != nil {
		return "", fmt.Errorf("store signing key: %w", err)
	}
	t.mu.Lock()
	t.loadedAt = time.Time{}
	t.mu.Unlock()
	return k.KID, nil
}

// Retire stops a key from verifying.
func (t *Tokens) Retire(ctx context.Context, kid string) error {
	if err := t.keys.SigningKeyRetire(ctx, kid, t.now()); err != nil {
		return err
	}
	t.mu.Lock()
	t.loadedAt = time.Time{}
	t.mu.Unlock()
	return nil
}

// load returns the key ring, re-reading it when stale or when force is set.
func (t *Tokens) load(ctx context.Context, force bool) (map[string][]byte, string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !force && t.ring != nil && t.now().Sub(t.loadedAt) < keyRefresh {
		return t.ring, t.signer, nil
	}
	keys, err := t.keys.SigningKeyList(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("load signing keys: %w", err)
	}
	ring, signer := map[string][]byte{}, ""
	for _, k := range keys { // newest first
		if k.RetiredAt.IsZero() {
			ring[k.KID] = k.Secret
			if signer == "" {
				signer = k.KID
			}
		}
	}
	t.ring, t.signer, t.loadedAt = ring, signer, t.now()
	return ring, signer, nil
}

// Issue signs a token for claims that expires after ttl. The first token ever issued creates
// the first signing key.
func (t *Tokens) Issue(ctx context.Context, c TaskClaims, ttl time.Duration) (string, time.Time, error) {
	ring, kid, err := t.load(ctx, false)
	if err != nil {
		return "", time.Time{}, err
	}
	if kid == "" {
		if ring, kid, err = t.firstKey(ctx); err != nil {
			return "", time.Time{}, err
		}
	}
	now := t.now()
	exp := now.Add(ttl).Truncate(time.Second)
	c.RegisteredClaims = jwt.RegisteredClaims{
		Issuer:    issuer,
		Subject:   c.TaskID,
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(exp),
		ID:        uuid.NewString(),
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, &c)
	tok.Header["kid"] = kid
	s, err := tok.SignedString(ring[kid])
	if err != nil {
		return "", time.Time{}, fmt.Errorf("sign token: %w", err)
	}
	return s, exp, nil
}

// firstKey creates the first signing key, unless a concurrent issue (of this process, which
// waited for it, or of another replica) already did, and returns the ring that holds it.
func (t *Tokens) firstKey(ctx context.Context) (map[string][]byte, string, error) {
	t.first.Lock()
	defer t.first.Unlock()
	ring, kid, err := t.load(ctx, true)
	if err != nil || kid != "" {
		return ring, kid, err
	}
	if _, err := t.Rotate(ctx); err != nil {
		return nil, "", err
	}
	return t.load(ctx, true)
}

// Verify checks a token's signature (by its kid), algorithm, issuer and expiry, and returns its
// claims. Whether the claims fit the request is the caller's decision.
func (t *Tokens) Verify(ctx context.Context, token string) (*TaskClaims, error) {
	if token == "" {
		return nil, ErrTokenMissing
	}
	var lookupErr error
	keyFunc := func(tok *jwt.Token) (any, error) {
		kid, _ := tok.Header["kid"].(string)
		ring, _, err := t.load(ctx, false)
		if err != nil {
			lookupErr = err
			return nil, err
		}
		if secret, ok := ring[kid]; ok {
			return secret, nil
		}
		// Perhaps another replica rotated since we last looked.
		if ring, _, err = t.load(ctx, true); err != nil {
			lookupErr = err
			return nil, err
		}
		if secret, ok := ring[kid]; ok {
			return secret, nil
		}
		return nil, fmt.Errorf("unknown signing key %q", kid)
	}
	var c TaskClaims
	_, err := jwt.ParseWithClaims(token, &c, keyFunc,
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithIssuer(issuer),
		jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(t.now))
	switch {
	case lookupErr != nil:
		return nil, lookupErr
	case errors.Is(err, jwt.ErrTokenExpired):
		return nil, ErrTokenExpired
	case err != nil:
		return nil, ErrTokenInvalid
	case c.TaskID == "" || c.Attempt < 1:
		return nil, ErrTokenInvalid
	}
	return &c, nil
}
