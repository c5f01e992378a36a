package api_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/api"
	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/capability"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
)

// httpClaim claims task id through /internal/task-claim, as a worker does, and returns the
// attempt's lease token and the capability token the server minted for it.
func httpClaim(t *testing.T, w *workerAPI, id string) (lease, token string) {
	t.Helper()
	claim := wantOK(t, w.post(w.internal.URL, "/internal/task-claim", map[string]any{"task_id": id, "worker_id": "w-1"}))
	lease, _ = claim["lease_token"].(string)
	token, _ = claim["capability_token"].(string)
	if lease == "" || token == "" {
		t.Fatalf("claim answered no lease or token: %v", claim)
	}
	return lease, token
}

func TestCapabilityTokenCarriesTheStorageGrant(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		_, ids := w.submit(lifecycle.TaskSpec{Key: "t", Name: "op"})
		_, tok := httpClaim(t, w, ids["t"])
		c, err := w.tokens.Verify(context.Background(), tok)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"s3://trace-scratch/scratch/" + ids["t"] + "/1/"}
		if c.S3 == nil || len(c.S3.ReadPrefixes) != 0 || !slices.Equal(c.S3.WritePrefixes, want) {
			t.Fatalf("token's s3 grant %+v, want to read nothing and write %q", c.S3, want)
		}
	})
}

func TestTaskCredentials(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		if !w.minting {
			t.Skip("BATON_TEST_S3_URL is not set; skipping credential minting (e.g. BATON_TEST_S3_URL=http://baton:batonsecret@127.0.0.1:9000)")
		}
		ctx := context.Background()
		_, ids := w.submit(callbackSpec("t", "op"))
		id := ids["t"]
		lease1, tok1 := httpClaim(t, w, id)
		body1 := fencedCalls[0].body(w, id, 1, lease1)

		creds := wantOK(t, scoped(w, "/v1/task/credentials", body1, tok1))
		wantKeys(t, "credentials", creds, "access_key_id", "secret_access_key", "session_token", "expiration", "endpoint_url",
			"region", "read_prefixes", "write_prefixes")
		claims, err := w.tokens.Verify(ctx, tok1)
		if err != nil {
			t.Fatal(err)
		}
		if exp := wantTime(t, creds, "expiration"); exp.After(claims.ExpiresAt.Time) || exp.Before(time.Now()) {
			t.Errorf("credentials expire at %v; the token at %v", exp, claims.ExpiresAt.Time)
		}
		if got := creds["write_prefixes"].([]any); len(got) != 1 || got[0] != "s3://trace-scratch/scratch/"+id+"/1/" {
			t.Errorf("write_prefixes %v", got)
		}
		// The wrapper's call on the internal listener exchanges the same token.
		wantOK(t, w.post(w.internal.URL, "/internal/task-credentials", body1, "X-Trace-Task-Capability", tok1))
		if res := w.post(w.internal.URL, "/internal/task-credentials", body1); res.Status != http.StatusUnauthorized {
			t.Errorf("internal call without the token: %d %s, want 401", res.Status, res.Raw)
		}
		if res := scoped(w, "/v1/task/credentials", body1, w.token(&store.Task{ID: id, JobID: claims.JobID, Attempt: 1, LeaseToken: lease1}, -time.Minute)); res.Status != http.StatusUnauthorized {
			t.Errorf("an expired token: %d %s, want 401", res.Status, res.Raw)
		}

		// Attempt 1 fails and attempt 2 runs: attempt 1's token mints nothing any more.
		if _, err := w.d.Complete(ctx, dispatch.CompleteParams{TaskID: id, Attempt: 1, LeaseToken: lease1, Outcome: store.OutcomeFailed,
			Error: &store.TaskError{Category: lifecycle.Infrastructure, Message: "node lost"}}); err != nil {
			t.Fatal(err)
		}
		lease2, tok2 := httpClaim(t, w, id)
		body2 := fencedCalls[0].body(w, id, 2, lease2)
		wantFencedError(t, scoped(w, "/v1/task/credentials", body1, tok1), http.StatusConflict, "attempt_mismatch", "")
		wantFencedError(t, w.post(w.internal.URL, "/internal/task-credentials", body1, "X-Trace-Task-Capability", tok1),
			http.StatusConflict, "attempt_mismatch", "")
		if res := scoped(w, "/v1/task/credentials", body2, tok1); res.Status != http.StatusForbidden {
			t.Errorf("attempt 1's token with attempt 2's body: %d %s, want 403", res.Status, res.Raw)
		}
		got := wantOK(t, scoped(w, "/v1/task/credentials", body2, tok2))
		if p := got["write_prefixes"].([]any); len(p) != 1 || p[0] != "s3://trace-scratch/scratch/"+id+"/2/" {
			t.Errorf("attempt 2's write_prefixes %v", p)
		}

		// Once the attempt ended, its token mints nothing either.
		wantOK(t, w.post(w.internal.URL, "/internal/task-complete", map[string]any{"task_id": id, "attempt": 2, "lease_token": lease2, "status": "Completed"}))
		if res := scoped(w, "/v1/task/credentials", body2, tok2); res.Status < 400 || res.Status >= 500 {
			t.Errorf("a completed attempt's token: %d %s, want a refusal", res.Status, res.Raw)
		}
	})
}

func TestTaskCredentialsWithoutS3(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		// The same store and tokens, served without a minter: object storage that is not S3.
		s := api.New(api.Config{Dispatcher: w.d, DataPlane: dataplane.New(w.d, dataplane.Config{}), Auth: auth.NewAuthenticator(w.st, auth.Limits{}, nil), Capabilities: capability.New(capability.Config{Tokens: w.tokens, Dispatcher: w.d, StorageRoot: "file:///var/lib/baton/blobs/"}),
			Logger: slog.New(slog.DiscardHandler)})
		public := httptest.NewServer(s.ProducerHandler())
		defer public.Close()
		_, ids := w.submit(lifecycle.TaskSpec{Key: "t", Name: "op"})
		lease, tok := httpClaim(t, w, ids["t"])
		res := w.post(public.URL, "/v1/task/credentials", fencedCalls[0].body(w, ids["t"], 1, lease), "X-Trace-Task-Capability", tok)
		wantFencedError(t, res, http.StatusNotImplemented, "credentials_unavailable", "not an S3-compatible server")
	})
}
