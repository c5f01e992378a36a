package main

import (
	"context"
	"errors"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/ctl"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/postgres"
	"github.com/baton-dev/baton/internal/store/sqlite"
	"github.com/baton-dev/baton/internal/store/storetest"
)

func TestSigningKeyCommands_SQLite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	testSigningKeyCommands(t, []string{"--data-dir", dir}, func() (store.Store, error) {
		return sqlite.Open(context.Background(), filepath.Join(dir, dbFile))
	})
}

func TestSigningKeyCommands_Postgres(t *testing.T) {
	url := storetest.NewPostgresSchema(t)
	if code, _, errOut := baton("migrate", "--database-url", url); code != 0 {
		t.Fatalf("migrate: exit %d, %s", code, errOut)
	}
	testSigningKeyCommands(t, []string{"--database-url", url}, func() (store.Store, error) {
		return postgres.Open(context.Background(), url, postgres.Options{MaxConns: 2})
	})
}

// kidOf is the kid in a token's header.
func kidOf(t *testing.T, token string) string {
	t.Helper()
	tok, _, err := jwt.NewParser().ParseUnverified(token, &auth.TaskClaims{})
	if err != nil {
		t.Fatal(err)
	}
	kid, _ := tok.Header["kid"].(string)
	return kid
}

// testSigningKeyCommands runs the rotation procedure with `baton signing-key` on the store that
// db (--data-dir or --database-url) names, against a replica's auth.Tokens on the same store.
func testSigningKeyCommands(t *testing.T, db []string, open func() (store.Store, error)) {
	ctx := context.Background()
	cli := func(args ...string) (int, string, string) {
		return baton(append(append([]string{"signing-key"}, args...), db...)...)
	}
	st, err := open()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// A replica's token service, with a clock the test moves past the 30-second key refresh.
	var skew time.Duration
	replica := auth.NewTokens(st, func() time.Time { return time.Now().Add(skew) })
	claims := auth.TaskClaims{Tenant: "acme", JobID: "job-1", TaskID: "task-1", Attempt: 1, LeaseToken: "lease"}
	verifies := func(tokens *auth.Tokens, token string) error {
		_, err := tokens.Verify(ctx, token)
		return err
	}
	list := func(format string) []signingKeyView {
		t.Helper()
		code, out, errOut := cli("list", "-o", format)
		if code != 0 {
			t.Fatalf("list -o %s: exit %d, %s", format, code, errOut)
		}
		var l struct {
			SigningKeys []signingKeyView `json:"signing_keys"`
		}
		decodeAs(t, format, out, &l) // no unknown field: no secret
		keys, err := st.SigningKeyList(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if strings.Contains(out, string(k.Secret)) {
				t.Fatalf("list -o %s prints the secret of %s:\n%s", format, k.KID, out)
			}
		}
		return l.SigningKeys
	}

	// A token issued before any rotation creates the first key.
	old, _, err := replica.Issue(ctx, claims, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	k1 := kidOf(t, old)
	if l := list(ctl.OutputJSON); len(l) != 1 || l[0].KID != k1 || !l[0].Signing || l[0].RetiredAt != nil {
		t.Fatalf("list before rotation: %+v, want %s alone, signing", l, k1)
	}

	// rotate: the new kid alone on stdout, the details on stderr.
	code, out, errOut := cli("rotate")
	if code != 0 || !regexp.MustCompile(`^k-\S+\n$`).MatchString(out) {
		t.Fatalf("rotate: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	k2 := strings.TrimSpace(out)
	for _, want := range []string{k2, "30 s", "keep verifying", "baton signing-key retire " + k1} {
		if !strings.Contains(errOut, want) {
			t.Errorf("rotate: stderr %q does not say %q", errOut, want)
		}
	}
	for _, format := range []string{ctl.OutputJSON, ctl.OutputYAML} {
		l := list(format)
		if len(l) != 2 || l[0].KID != k2 || !l[0].Signing || l[1].KID != k1 || l[1].Signing || l[0].RetiredAt != nil || l[1].RetiredAt != nil {
			t.Fatalf("list -o %s after rotation: %+v, want %s signing, then %s", format, l, k2, k1)
		}
	}
	code, out, errOut = cli("list")
	if code != 0 || !regexp.MustCompile(`(?m)^`+k2+`\s.*\syes$`).MatchString(out) || !regexp.MustCompile(`(?m)^`+k1+`\s.*\s-$`).MatchString(out) {
		t.Fatalf("list: exit %d\n%s%s", code, out, errOut)
	}

	// The token issued before the rotation still verifies; once the replica re-reads the ring,
	// it signs with the new key.
	if err := verifies(replica, old); err != nil {
		t.Fatalf("a token of %s after rotation: %v", k1, err)
	}
	if err := verifies(auth.NewTokens(st, nil), old); err != nil {
		t.Fatalf("a token of %s after rotation, on another replica: %v", k1, err)
	}
	skew += 31 * time.Second
	fresh, _, err := replica.Issue(ctx, claims, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if kid := kidOf(t, fresh); kid != k2 {
		t.Fatalf("a token issued 31 s after the rotation is signed by %s, want %s", kid, k2)
	}

	// The key that signs now is not retired without --force.
	code, _, errOut = cli("retire", k2)
	if code != 1 || !strings.Contains(errOut, "signs now") || !strings.Contains(errOut, "rotate first") || !strings.Contains(errOut, "--force") {
		t.Fatalf("retire of the signing key: exit %d, %s", code, errOut)
	}
	if l := list(ctl.OutputJSON); !l[0].Signing || l[0].RetiredAt != nil {
		t.Fatalf("the refused retirement retired %s: %+v", k2, l)
	}

	// Retiring the old key: its tokens fail, on this replica within 30 s, on a new one at once.
	code, out, errOut = cli("retire", k1)
	if code != 0 || out != "retired "+k1+"\n" || !strings.Contains(errOut, "401") || !strings.Contains(errOut, "only") {
		t.Fatalf("retire %s: exit %d, stdout %q, stderr %q", k1, code, out, errOut)
	}
	if err := verifies(auth.NewTokens(st, nil), old); !errors.Is(err, auth.ErrTokenInvalid) {
		t.Fatalf("a token of the retired %s: %v, want %v", k1, err, auth.ErrTokenInvalid)
	}
	skew += 31 * time.Second
	if err := verifies(replica, old); !errors.Is(err, auth.ErrTokenInvalid) {
		t.Fatalf("a token of the retired %s, 31 s later on the replica: %v, want %v", k1, err, auth.ErrTokenInvalid)
	}
	if err := verifies(replica, fresh); err != nil {
		t.Fatalf("a token of %s after %s was retired: %v", k2, k1, err)
	}
	l := list(ctl.OutputYAML)
	if len(l) != 2 || l[1].KID != k1 || l[1].RetiredAt == nil || !l[0].Signing {
		t.Fatalf("list after retire: %+v", l)
	}

	// Retiring a retired key changes nothing; an unknown kid fails.
	if code, out, errOut := cli("retire", k1); code != 0 || out != "" || !strings.Contains(errOut, "already retired") {
		t.Errorf("retire %s again: exit %d, stdout %q, stderr %q", k1, code, out, errOut)
	}
	if l2 := list(ctl.OutputJSON); !l2[1].RetiredAt.Equal(*l[1].RetiredAt) {
		t.Errorf("retiring %s again moved its retirement from %s to %s", k1, l[1].RetiredAt, l2[1].RetiredAt)
	}
	if code, _, errOut := cli("retire", "k-nope"); code != 1 || !strings.Contains(errOut, "no signing key k-nope (see `baton signing-key list`)") {
		t.Errorf("retire k-nope: exit %d, %s", code, errOut)
	}

	// Usage mistakes exit 2 and say why.
	for _, args := range [][]string{{"retire"}, {"retire", k1, k2}, {"list", "extra"}, {"rotate", "extra"}, {"list", "-o", "xml"}, {"frobnicate"}, {"list", "--force"}} {
		if code, _, errOut := cli(args...); code != 2 || errOut == "" {
			t.Errorf("signing-key %q: exit %d, stderr %q; want 2 and a reason", args, code, errOut)
		}
	}

	// rotate -o json prints the new key (no secret); --force retires the key that signs now.
	code, out, _ = cli("rotate", "-o", "json")
	var k3 signingKeyView
	if decodeAs(t, ctl.OutputJSON, out, &k3); code != 0 || !k3.Signing || !strings.HasPrefix(k3.KID, "k-") || k3.RetiredAt != nil {
		t.Fatalf("rotate -o json: exit %d, %s", code, out)
	}
	code, _, errOut = cli("retire", k3.KID, "--force")
	if code != 0 || !strings.Contains(errOut, "the older key "+k2) {
		t.Fatalf("retire --force %s: exit %d, %s", k3.KID, code, errOut)
	}
	code, _, errOut = cli("retire", "--force", k2)
	if code != 0 || !strings.Contains(errOut, "a new key") {
		t.Fatalf("retire --force %s: exit %d, %s", k2, code, errOut)
	}
	for _, v := range list(ctl.OutputJSON) {
		if v.Signing || v.RetiredAt == nil {
			t.Errorf("after retiring every key: %+v", v)
		}
	}
	// With every key retired, the next token creates a new key.
	skew += 31 * time.Second
	next, _, err := replica.Issue(ctx, claims, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if kid := kidOf(t, next); kid == k1 || kid == k2 || kid == k3.KID {
		t.Fatalf("the token after every key was retired is signed by the retired %s", kid)
	}
	if err := verifies(replica, fresh); !errors.Is(err, auth.ErrTokenInvalid) {
		t.Errorf("a token of the retired %s: %v", k2, err)
	}
}
