package auth_test

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/store/storetest"
)

var claims = auth.TaskClaims{Tenant: "acme", JobID: "job-1", TaskID: "task-1", Attempt: 2, LeaseToken: "lease-1"}

func TestTokenRoundTripAndRotation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.OpenSQLite(t)
	tokens := auth.NewTokens(st, nil)
	old, _, err := tokens.Issue(ctx, claims, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tokens.Verify(ctx, old)
	if err != nil || got.TaskID != "task-1" || got.Attempt != 2 || got.LeaseToken != "lease-1" || got.Tenant != "acme" {
		t.Fatalf("verify: %+v, %v", got, err)
	}
	oldKID := kid(t, old)
	if _, err := tokens.Rotate(ctx); err != nil {
		t.Fatal(err)
	}
	fresh, _, _ := tokens.Issue(ctx, claims, time.Hour)
	if kid(t, fresh) == oldKID {
		t.Fatal("a rotation did not change the signing key")
	}
	// Another replica, sharing only the store, verifies both.
	other := auth.NewTokens(st, nil)
	for _, tok := range []string{old, fresh} {
		if _, err := other.Verify(ctx, tok); err != nil {
			t.Errorf("verify after rotation: %v", err)
		}
	}
	if err := tokens.Retire(ctx, oldKID); err != nil {
		t.Fatal(err)
	}
	if _, err := tokens.Verify(ctx, old); !errors.Is(err, auth.ErrTokenInvalid) {
		t.Errorf("token of a retired key: %v, want ErrTokenInvalid", err)
	}
	if _, err := tokens.Verify(ctx, fresh); err != nil {
		t.Errorf("token of the current key: %v", err)
	}
}

// Tokens issued at once by a process that has no signing key yet share one first key.
func TestConcurrentFirstIssuesMakeOneKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.OpenSQLite(t)
	tokens := auth.NewTokens(st, nil)
	var wg sync.WaitGroup
	kids := make([]string, 16)
	for i := range kids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tok, _, err := tokens.Issue(ctx, claims, time.Hour)
			if err != nil {
				t.Error(err)
				return
			}
			kids[i] = kid(t, tok)
		}()
	}
	wg.Wait()
	keys, err := st.SigningKeyList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 {
		t.Fatalf("%d signing keys after concurrent first issues, want 1", len(keys))
	}
	for _, k := range kids {
		if k != keys[0].KID {
			t.Errorf("a token was signed by %q, want the one key %q", k, keys[0].KID)
		}
	}
}

func kid(t *testing.T, tok string) string {
	t.Helper()
	p, _, err := jwt.NewParser().ParseUnverified(tok, &auth.TaskClaims{})
	if err != nil {
		t.Fatal(err)
	}
	return p.Header["kid"].(string)
}

func TestTokenRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.OpenSQLite(t)
	tokens := auth.NewTokens(st, nil)
	good, _, err := tokens.Issue(ctx, claims, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	past := auth.NewTokens(st, func() time.Time { return time.Now().Add(-2 * time.Hour) })
	expired, _, _ := past.Issue(ctx, claims, time.Hour)
	parts := strings.Split(good, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	forged := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(strings.Replace(string(payload), `"attempt":2`, `"attempt":3`, 1))) + "." + parts[2]
	sig := []byte(parts[2])
	sig[5] ^= 1
	badSig := parts[0] + "." + parts[1] + "." + string(sig)
	none := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + parts[1] + "."
	tests := []struct {
		name, token string
		want        error
	}{
		{"missing", "", auth.ErrTokenMissing},
		{"expired", expired, auth.ErrTokenExpired},
		{"payload altered", forged, auth.ErrTokenInvalid},
		{"signature altered", badSig, auth.ErrTokenInvalid},
		{"alg none", none, auth.ErrTokenInvalid},
		{"garbage", "not.a.token", auth.ErrTokenInvalid},
	}
	for _, tc := range tests {
		if _, err := tokens.Verify(ctx, tc.token); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestTokenTTL(t *testing.T) {
	t.Parallel()
	tests := []struct{ timeout, want time.Duration }{
		{0, time.Hour},
		{10 * time.Minute, 15 * time.Minute},
		{30 * time.Hour, 24 * time.Hour},
	}
	for _, tc := range tests {
		if got := auth.TokenTTL(tc.timeout); got != tc.want {
			t.Errorf("TokenTTL(%v) = %v, want %v", tc.timeout, got, tc.want)
		}
	}
}
