package auth_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// FuzzVerifyToken verifies fuzzed capability tokens and fuzzed one-byte mutations of real ones.
// "$TOKEN" in the fuzzed text stands for a valid token, "$EXPIRED" for an expired one of the
// same key, "$FOREIGN" for a valid-looking token of a key the verifier does not have. Verify must
// never panic, must refuse with ErrTokenMissing, ErrTokenInvalid or ErrTokenExpired, and whatever
// it accepts must carry exactly the claims of the valid token (the only one it could verify); a
// mutation of the expired or the foreign token must never verify.
func FuzzVerifyToken(f *testing.F) {
	ctx := context.Background()
	now := time.Date(2025, 1, 15, 10, 0, 0, 0, time.UTC)
	st := storetest.OpenSQLite(f)
	tokens := auth.NewTokens(st, func() time.Time { return now })
	issue := func(tokens *auth.Tokens) string {
		tok, _, err := tokens.Issue(ctx, auth.TaskClaims{Tenant: "acme", JobID: "job-1", TaskID: "task-1", Attempt: 2,
			LeaseToken: "lease-1", Datasets: []auth.DatasetGrant{{DatasetUUID: "d-1", DatasetVersion: "v-1", DatasetName: "blocks"}}}, time.Hour)
		if err != nil {
			f.Fatal(err)
		}
		return tok
	}
	valid := issue(tokens)
	expired := issue(auth.NewTokens(st, func() time.Time { return now.Add(-2 * time.Hour) }))
	foreign := issue(auth.NewTokens(storetest.OpenSQLite(f), func() time.Time { return now }))
	want, err := tokens.Verify(ctx, valid)
	if err != nil {
		f.Fatal(err)
	}
	if _, err := tokens.Verify(ctx, expired); !errors.Is(err, auth.ErrTokenExpired) {
		f.Fatalf("the expired token: %v", err)
	}
	if _, err := tokens.Verify(ctx, foreign); !errors.Is(err, auth.ErrTokenInvalid) {
		f.Fatalf("the foreign token: %v", err)
	}
	placeholders := strings.NewReplacer("$TOKEN", valid, "$EXPIRED", expired, "$FOREIGN", foreign)

	f.Add("$TOKEN", uint16(0), byte('x'))
	f.Add("$EXPIRED", uint16(40), byte('A'))
	f.Add("$FOREIGN", uint16(300), byte('-'))
	f.Add("", uint16(0), byte(0))
	f.Add("Bearer $TOKEN", uint16(1000), byte('.'))
	f.Add("$TOKEN ", uint16(70), byte('_'))
	f.Add("eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.eyJ0YXNrX2lkIjoidGFzay0xIiwiYXR0ZW1wdCI6MiwiaXNzIjoiYmF0b24iLCJleHAiOjk5OTk5OTk5OTl9.", uint16(5), byte('0'))
	f.Add("a.b.c", uint16(2), byte('.'))

	check := func(t *testing.T, what, tok string, mayVerify bool) {
		t.Helper()
		c, err := tokens.Verify(ctx, tok)
		switch {
		case err == nil && !mayVerify:
			t.Fatalf("%s verified: %q → %+v", what, tok, c)
		case err == nil && !reflect.DeepEqual(c, want):
			t.Fatalf("%s verified with other claims: %q → %+v, want %+v", what, tok, c, want)
		case err != nil && !errors.Is(err, auth.ErrTokenMissing) && !errors.Is(err, auth.ErrTokenInvalid) && !errors.Is(err, auth.ErrTokenExpired):
			t.Fatalf("%s: %q refused with %v, not a token error", what, tok, err)
		case tok == "" && !errors.Is(err, auth.ErrTokenMissing):
			t.Fatalf("no token: %v, want ErrTokenMissing", err)
		}
	}
	f.Fuzz(func(t *testing.T, text string, at uint16, b byte) {
		check(t, "the fuzzed token", placeholders.Replace(text), true)
		for _, base := range []struct {
			name string
			tok  string
		}{{"a mutation of the valid token", valid}, {"a mutation of the expired token", expired}, {"a mutation of the foreign token", foreign}} {
			m := []byte(base.tok)
			m[int(at)%len(m)] = b
			if string(m) != base.tok {
				check(t, base.name, string(m), base.tok == valid)
			}
		}
	})
}
