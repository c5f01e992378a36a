package capability_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/capability"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/grant"
	"github.com/baton-dev/baton/internal/request"
	"github.com/baton-dev/baton/internal/scope"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
	"github.com/baton-dev/baton/wire"
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

// The token of an attempt carries exactly what its scope allows: every dataset the scope lets
// the attempt read or write, at the version it pins, with the same access, and the storage grant
// derived from the scope; and nothing the scope refuses.
func TestTokenClaimsAreTheScope(t *testing.T) {
	ctx := context.Background()
	tokens := auth.NewTokens(storetest.OpenSQLite(t), nil)
	const root = "s3://data/baton/"
	i := capability.New(capability.Config{Tokens: tokens, StorageRoot: root})
	route := &wire.Route{
		Job: wire.PipelineJob{DAGName: "p", Name: "enrich", Version: "1", Runtime: "ecs_platform", UpdateStrategy: "replace"},
		Inputs: []wire.DatasetInput{
			{InputIndex: 0, DatasetUUID: "u-blocks", DatasetName: "blocks", DatasetVersion: "v1", Cursor: i64(3),
				StorageRef: json.RawMessage(`"s3://data/baton/datasets/u-blocks/t0/1/"`)},
			{InputIndex: 1, DatasetUUID: "u-prices", DatasetVersion: "v4", StorageRef: json.RawMessage("null")},
		},
		Outputs: []wire.DatasetOutput{
			{OutputIndex: 0, DatasetUUID: "u-alerts", DatasetName: "alerts", DatasetVersion: "v9", WriteMode: "buffered"},
			{OutputIndex: 1, DatasetUUID: "u-ranges", DatasetVersion: "v2"},
		},
	}
	raw, _ := json.Marshal(route)
	tk := &store.Task{ID: "t1", JobID: "job-1", Attempt: 2, LeaseToken: "lease", Route: raw}
	token, _, err := i.Mint(ctx, tk, dispatch.JobRef{Tenant: "acme"}, route)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tokens.Verify(ctx, token)
	if err != nil {
		t.Fatal(err)
	}
	sc := scope.Of(tk, "acme")
	if got.Tenant != sc.Tenant || got.TaskID != sc.TaskID || got.Attempt != sc.Attempt || got.JobID != "job-1" || got.LeaseToken != "lease" {
		t.Errorf("identity: %+v", got)
	}
	// Every dataset of the token is one the scope allows as the token says, at its version.
	for _, g := range got.Datasets {
		d, ok := sc.Readable(g.DatasetUUID)
		if !ok || d.Version != g.DatasetVersion || string(d.Access) != g.Access || d.Name != g.DatasetName {
			t.Errorf("token grants %+v; the scope reads %+v %v", g, d, ok)
		}
		if _, publishes := sc.Publishable(g.DatasetUUID); publishes != g.Buffered {
			t.Errorf("token grants %+v; the scope publishes into it: %v", g, publishes)
		}
	}
	// Every dataset the scope allows is in the token.
	for _, d := range sc.Datasets {
		if !slices.ContainsFunc(got.Datasets, func(g auth.DatasetGrant) bool {
			return g.DatasetUUID == d.UUID && g.Access == string(d.Access) && g.DatasetVersion == d.Version
		}) {
			t.Errorf("the scope allows %s (%s) and the token does not say so", d.UUID, d.Access)
		}
	}
	if len(got.Datasets) != len(sc.Datasets) || len(got.Datasets) != 4 {
		t.Errorf("token lists %d datasets, the scope %d", len(got.Datasets), len(sc.Datasets))
	}
	// A dataset outside the scope is in neither.
	if _, ok := sc.Readable("u-other"); ok || slices.ContainsFunc(got.Datasets, func(g auth.DatasetGrant) bool { return g.DatasetUUID == "u-other" }) {
		t.Error("a dataset outside the scope is allowed")
	}
	want, _ := grant.Derive(root, sc.Storage())
	if !reflect.DeepEqual(got.S3, want) || len(want.WritePrefixes) == 0 {
		t.Errorf("storage grant %+v, want %+v", got.S3, want)
	}
}

func i64(n int64) *int64 { return &n }
