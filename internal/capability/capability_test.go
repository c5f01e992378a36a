package capability_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/capability"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/request"
	"github.com/baton-dev/baton/internal/store"
)

// Without a token store: no token is a 401's missing token, a token is a 503 (nothing to verify
// it against); the Authorization header counts only as "Bearer <token>". The end-to-end checks
// of real tokens are internal/api's.
func TestVerifyWithoutTokens(t *testing.T) {
	i := capability.New(capability.Config{})
	for _, c := range []struct {
		header, value string
		unavailable   bool
	}{
		{"X-Trace-Task-Capability", "", false},
		{"X-Trace-Task-Capability", "tok", true},
		{"Authorization", "Bearer tok", true},
		{"Authorization", "bearer  tok ", true},
		{"Authorization", "Basic tok", false},
		{"Authorization", "tok", false},
	} {
		r := httptest.NewRequest("POST", "/", nil)
		r.Header.Set(c.header, c.value)
		_, err := i.Verify(r, c.header)
		var e *request.Error
		switch {
		case c.unavailable && (!errors.As(err, &e) || e.Status != http.StatusServiceUnavailable):
			t.Errorf("%s: %q: %v, want a 503", c.header, c.value, err)
		case !c.unavailable && !errors.Is(err, auth.ErrTokenMissing):
			t.Errorf("%s: %q: %v, want %v", c.header, c.value, err, auth.ErrTokenMissing)
		}
	}
	if _, _, err := i.Mint(context.Background(), &store.Task{}, dispatch.JobRef{}, nil); err == nil {
		t.Error("minted without a token store")
	}
}

// A request is bound to its token's task; naming the token's own attempt and lease, or none,
// fences with the token's.
func TestFenceWithinTheToken(t *testing.T) {
	i := capability.New(capability.Config{})
	r := httptest.NewRequest("POST", "/", nil)
	if _, err := i.Fence(r, "t1", 0, ""); !errors.Is(err, auth.ErrTokenScope) || capability.Claims(r) != nil {
		t.Fatalf("no claims: %v", err)
	}
	c := &auth.TaskClaims{TaskID: "t1", Attempt: 2, LeaseToken: "lease"}
	r = capability.WithClaims(r, c)
	if capability.Claims(r) != c {
		t.Fatal("claims lost")
	}
	if _, err := i.Fence(r, "t2", 2, "lease"); !errors.Is(err, auth.ErrTokenScope) {
		t.Errorf("another task: %v", err)
	}
	want := dispatch.Fence{TaskID: "t1", Attempt: 2, LeaseToken: "lease"}
	for _, named := range []struct {
		attempt int
		lease   string
	}{{0, ""}, {2, ""}, {0, "lease"}, {2, "lease"}} {
		if f, err := i.Fence(r, "t1", named.attempt, named.lease); err != nil || f != want {
			t.Errorf("%v: %v %v", named, f, err)
		}
	}
}

// A token with half or more of its life left is not refreshed.
func TestRefreshOnlyPastHalfLife(t *testing.T) {
	i := capability.New(capability.Config{})
	now := time.Now()
	fresh := &auth.TaskClaims{}
	fresh.IssuedAt, fresh.ExpiresAt = jwt.NewNumericDate(now), jwt.NewNumericDate(now.Add(time.Hour))
	for _, c := range []*auth.TaskClaims{nil, {}, fresh} {
		if tok, _, err := i.Refresh(context.Background(), c, &store.Task{}); tok != "" || err != nil {
			t.Errorf("%v: %q %v", c, tok, err)
		}
	}
}
