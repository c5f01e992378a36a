package api_test

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// producerRequests is one request per producer endpoint on job id; body-taking ones get a valid
// body.
func producerRequests(id string) []struct{ method, path, body string } {
	return []struct{ method, path, body string }{
		{"GET", "/jobs", ""},
		{"POST", "/jobs", exampleJob},
		{"GET", "/jobs/" + id, ""},
		{"POST", "/jobs/" + id + "/tasks", tasksBody(tk("late", "x"))},
		{"GET", "/jobs/" + id + "/tasks/scrape-store", ""},
		{"POST", "/jobs/" + id + "/cancel", ""},
		{"POST", "/jobs/" + id + "/resume", ""},
		{"GET", "/jobs/" + id + "/events", ""},
		{"GET", "/jobs/" + id + "/tasks/scrape-store/events", ""},
	}
}

func TestRequestsWithoutAValidKeyAreUnauthorized(t *testing.T) {
	forEachDriver(t, defaultOptions(), func(t *testing.T, a *testAPI) {
		id := a.createJob(exampleJob)
		revokedID, revoked := a.newKeyWithID("acme")
		wantStatus(t, a.do("GET", "/jobs/"+id, nil, "x-api-key", revoked), http.StatusOK)
		if err := a.st.APIKeyRevoke(context.Background(), revokedID, time.Now()); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			name    string
			headers []string
			want    string
		}{
			{"no key", []string{"Accept", "application/json"}, "missing API key: send it in the x-api-key header"},
			{"empty key", []string{"x-api-key", ""}, "missing API key: send it in the x-api-key header"},
			{"key in another header", []string{"Authorization", "Bearer " + a.key}, "missing API key: send it in the x-api-key header"},
			{"wrong key", []string{"x-api-key", "bk_this-is-not-a-key-of-this-server"}, "invalid API key"},
			{"key with a suffix", []string{"x-api-key", a.key + "x"}, "invalid API key"},
			{"revoked key", []string{"x-api-key", revoked}, "invalid API key"},
		} {
			t.Run(c.name, func(t *testing.T) {
				a := a.on(t)
				for _, r := range producerRequests(id) {
					res := a.do(r.method, r.path, r.body, c.headers...)
					if res.Status != http.StatusUnauthorized || res.Body["error"] != c.want || res.Header.Get("Content-Type") != "application/json" {
						t.Errorf("%s %s: %d %s, want 401 %q", r.method, r.path, res.Status, res.Raw, c.want)
					}
				}
			})
		}
		// Nothing the refused requests asked for happened.
		job := a.getJob(id)
		if job["status"] != "processing" || jsonInt(t, job["totalTasks"]) != 5 {
			t.Fatalf("job changed by unauthorized requests: %v", job)
		}
		if ids, _ := a.listIDs(""); len(ids) != 1 {
			t.Fatalf("unauthorized requests created jobs: %v", ids)
		}
	})
}

func TestTenantIsolation(t *testing.T) {
	forEachDriver(t, defaultOptions(), func(t *testing.T, a *testAPI) {
		id := a.createJob(exampleJob)
		a.runTask(id, "scrape-store", false)
		done := a.createJob(tasksBody(tk("a", "a")))
		a.runTask(done, "a", true) // finished, so that a resume would apply
		other := a.newKey("other")
		scrapeID := taskIn(t, a.getJob(id), "scrape-store")["id"].(string)

		for _, jobID := range []string{id, done} {
			for _, r := range []struct{ method, path, body string }{
				{"GET", "/jobs/" + jobID, ""},
				{"GET", "/jobs/" + jobID + "/tasks/scrape-store", ""},
				{"GET", "/jobs/" + jobID + "/tasks/" + scrapeID, ""},
				{"POST", "/jobs/" + jobID + "/tasks", tasksBody(tk("theirs", "x"))},
				{"POST", "/jobs/" + jobID + "/cancel", ""},
				{"POST", "/jobs/" + jobID + "/resume", ""},
				{"GET", "/jobs/" + jobID + "/events", ""},
				{"GET", "/jobs/" + jobID + "/events?after=1&limit=5", ""},
				{"GET", "/jobs/" + jobID + "/tasks/scrape-store/events", ""},
				{"GET", "/jobs/" + jobID + "/tasks/" + scrapeID + "/events", ""},
			} {
				wantError(t, a.do(r.method, r.path, r.body, "x-api-key", other), http.StatusNotFound, "Job not found")
			}
			// The live stream too, before any header is sent.
			res := a.do("GET", "/jobs/"+jobID+"/events", nil, "x-api-key", other, "Accept", "text/event-stream")
			wantError(t, res, http.StatusNotFound, "Job not found")
		}
		// The other tenant's key changed nothing and sees nothing.
		if got := statuses(a.getJob(id)); got["analyze-competitors"] != "pending" || len(got) != 5 {
			t.Fatalf("acme's job changed: %v", got)
		}
		if st := a.getJob(done)["status"]; st != "partial_failure" {
			t.Fatalf("acme's finished job changed: %v", st)
		}
		res := a.do("GET", "/jobs", nil, "x-api-key", other)
		wantStatus(t, res, http.StatusOK)
		if jobs := res.Body["jobs"].([]any); len(jobs) != 0 || res.Body["nextCursor"] != nil {
			t.Fatalf("other sees %s", res.Raw)
		}
		for _, s := range []string{"processing", "partial_failure"} {
			if res := a.do("GET", "/jobs?status="+s, nil, "x-api-key", other); len(res.Body["jobs"].([]any)) != 0 {
				t.Fatalf("other sees %s", res.Raw)
			}
		}
		// A cursor from acme's listing shows other nothing of acme's either.
		_, next := a.listIDs("limit=1")
		if res := a.do("GET", "/jobs?cursor="+next, nil, "x-api-key", other); res.Status != http.StatusOK || len(res.Body["jobs"].([]any)) != 0 {
			t.Fatalf("other with acme's cursor: %d %s", res.Status, res.Raw)
		}

		// And other's own job is invisible to acme.
		theirs := a.do("POST", "/jobs", exampleJob, "x-api-key", other)
		wantStatus(t, theirs, http.StatusCreated)
		wantError(t, a.do("GET", "/jobs/"+theirs.Body["jobId"].(string), nil), http.StatusNotFound, "Job not found")
		if ids, _ := a.listIDs(""); len(ids) != 2 {
			t.Fatalf("acme sees %v", ids)
		}
	})
}

// retryAfter reads a 429's Retry-After in seconds.
func retryAfter(t *testing.T, res response) int {
	t.Helper()
	n, err := strconv.Atoi(res.Header.Get("Retry-After"))
	if err != nil {
		t.Fatalf("Retry-After %q: %v", res.Header.Get("Retry-After"), err)
	}
	return n
}

func TestRateLimit(t *testing.T) {
	opts := defaultOptions()
	// A burst of 3 that refills one request a minute: the test never races the refill.
	opts.limits = auth.Limits{RatePerSecond: 1.0 / 60, Burst: 3}
	forEachDriver(t, opts, func(t *testing.T, a *testAPI) {
		for i := range 3 {
			if res := a.do("GET", "/jobs", nil); res.Status != http.StatusOK {
				t.Fatalf("request %d: %d %s", i+1, res.Status, res.Raw)
			}
		}
		res := a.do("GET", "/jobs", nil)
		wantError(t, res, http.StatusTooManyRequests, "rate limit exceeded")
		if s := retryAfter(t, res); s < 1 || s > 60 {
			t.Errorf("Retry-After %d, want 1..60", s)
		}
		// A refused request writes nothing.
		wantError(t, a.do("POST", "/jobs", exampleJob), http.StatusTooManyRequests, "rate limit exceeded")

		// Other keys, of the same tenant or not, have their own budget.
		for _, k := range []string{a.newKey("acme"), a.newKey("other")} {
			for i := range 3 {
				if res := a.do("GET", "/jobs", nil, "x-api-key", k); res.Status != http.StatusOK {
					t.Fatalf("another key, request %d: %d %s", i+1, res.Status, res.Raw)
				}
			}
		}
		// Unauthenticated answers come first and the health checks are not limited.
		wantStatus(t, a.do("GET", "/jobs", nil, "x-api-key", "bk_not-a-key-at-all-here"), http.StatusUnauthorized)
		wantStatus(t, a.do("GET", "/healthz", nil, "Accept", "application/json"), http.StatusOK)
		wantStatus(t, a.do("GET", "/jobs", nil), http.StatusTooManyRequests)
	})
}

func TestDailyQuota(t *testing.T) {
	opts := defaultOptions()
	opts.limits = auth.Limits{DailyQuota: 5}
	forEachDriver(t, opts, func(t *testing.T, a *testAPI) {
		id := a.createJob(exampleJob) // request 1
		for i := 2; i <= 5; i++ {
			if res := a.do("GET", "/jobs/"+id, nil); res.Status != http.StatusOK {
				t.Fatalf("request %d: %d %s", i, res.Status, res.Raw)
			}
		}
		now := time.Now().UTC()
		res := a.do("GET", "/jobs/"+id, nil)
		wantError(t, res, http.StatusTooManyRequests, "daily request quota exceeded")
		midnight := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, time.UTC)
		want := int(math.Ceil(midnight.Sub(now).Seconds()))
		if s := retryAfter(t, res); s <= 0 || s > 86400 || s < want-5 || s > want+1 {
			t.Errorf("Retry-After %d, want about %d (seconds to UTC midnight)", s, want)
		}
		wantStatus(t, a.do("POST", "/jobs", exampleJob), http.StatusTooManyRequests)

		other := a.newKey("acme")
		for i := range 5 {
			if res := a.do("GET", "/jobs", nil, "x-api-key", other); res.Status != http.StatusOK || len(res.Body["jobs"].([]any)) != 1 {
				t.Fatalf("another key, request %d: %d %s", i+1, res.Status, res.Raw)
			}
		}
		wantStatus(t, a.do("GET", "/jobs", nil, "x-api-key", other), http.StatusTooManyRequests)
	})
}

// fakeNow is a settable clock for an Authenticator.
type fakeNow struct{ t time.Time }

func (f *fakeNow) now() time.Time { return f.t }

func wantLimit(t *testing.T, err error, quota bool, retry time.Duration) {
	t.Helper()
	var le *auth.LimitError
	if !errors.As(err, &le) {
		t.Fatalf("err %v, want a *auth.LimitError", err)
	}
	if le.Quota != quota || le.RetryAfter != retry {
		t.Fatalf("LimitError{Quota: %v, RetryAfter: %v}, want {%v, %v}", le.Quota, le.RetryAfter, quota, retry)
	}
}

func authOK(t *testing.T, a *auth.Authenticator, secret, tenant string) {
	t.Helper()
	k, err := a.Authenticate(context.Background(), secret)
	if err != nil {
		t.Fatalf("authenticate: %v", err)
	}
	if k.Tenant != tenant {
		t.Fatalf("tenant %q, want %q", k.Tenant, tenant)
	}
}

func newSecret(t *testing.T, st store.Store, tenant string) (id, secret string) {
	t.Helper()
	k, secret, err := auth.CreateKey(context.Background(), st, "k-"+tenant, tenant, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return k.ID, secret
}

func TestAuthenticatorDailyQuotaResetsAtUTCMidnight(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		_, secret := newSecret(t, st, "acme")
		clock := &fakeNow{time.Date(2024, 3, 10, 23, 59, 58, 0, time.UTC)}
		a := auth.NewAuthenticator(st, auth.Limits{DailyQuota: 3}, clock.now)
		for range 3 {
			authOK(t, a, secret, "acme")
		}
		_, err := a.Authenticate(ctx, secret)
		wantLimit(t, err, true, 2*time.Second)
		clock.t = clock.t.Add(1500 * time.Millisecond)
		_, err = a.Authenticate(ctx, secret)
		wantLimit(t, err, true, 500*time.Millisecond)

		// Another key has its own count.
		_, second := newSecret(t, st, "acme")
		authOK(t, a, second, "acme")

		// The next UTC day starts from zero.
		clock.t = time.Date(2024, 3, 11, 0, 0, 0, 0, time.UTC)
		for range 3 {
			authOK(t, a, secret, "acme")
		}
		_, err = a.Authenticate(ctx, secret)
		wantLimit(t, err, true, 24*time.Hour)

		// Days are UTC days whatever the zone of the clock: 01:30 at UTC+2 is still the 11th.
		clock.t = time.Date(2024, 3, 12, 1, 30, 0, 0, time.FixedZone("UTC+2", 2*3600))
		_, err = a.Authenticate(ctx, secret)
		wantLimit(t, err, true, 30*time.Minute)
		clock.t = time.Date(2024, 3, 12, 2, 0, 0, 0, time.FixedZone("UTC+2", 2*3600))
		authOK(t, a, secret, "acme")
	})
}

func TestAuthenticatorRateLimitRefills(t *testing.T) {
	t.Parallel()
	st := storetest.OpenSQLite(t)
	ctx := context.Background()
	_, secret := newSecret(t, st, "acme")
	t0 := time.Date(2024, 3, 10, 12, 0, 0, 0, time.UTC)
	clock := &fakeNow{t0}
	a := auth.NewAuthenticator(st, auth.Limits{RatePerSecond: 1, Burst: 3}, clock.now)
	for range 3 {
		authOK(t, a, secret, "acme")
	}
	// Refused requests take no token: asking again and again does not push the refill back.
	for range 5 {
		_, err := a.Authenticate(ctx, secret)
		wantLimit(t, err, false, time.Second)
	}
	clock.t = t0.Add(500 * time.Millisecond)
	_, err := a.Authenticate(ctx, secret)
	wantLimit(t, err, false, 500*time.Millisecond)
	clock.t = t0.Add(time.Second)
	authOK(t, a, secret, "acme")
	_, err = a.Authenticate(ctx, secret)
	wantLimit(t, err, false, time.Second)
	// After a quiet spell the whole burst is back, and no more.
	clock.t = t0.Add(time.Minute)
	for range 3 {
		authOK(t, a, secret, "acme")
	}
	_, err = a.Authenticate(ctx, secret)
	wantLimit(t, err, false, time.Second)
}

func TestAuthenticatorRateRefusalsDoNotCountTowardsTheQuota(t *testing.T) {
	t.Parallel()
	st := storetest.OpenSQLite(t)
	ctx := context.Background()
	_, secret := newSecret(t, st, "acme")
	t0 := time.Date(2024, 3, 10, 12, 0, 0, 0, time.UTC)
	clock := &fakeNow{t0}
	a := auth.NewAuthenticator(st, auth.Limits{RatePerSecond: 1, Burst: 1, DailyQuota: 2}, clock.now)
	authOK(t, a, secret, "acme")
	_, err := a.Authenticate(ctx, secret)
	wantLimit(t, err, false, time.Second)
	clock.t = t0.Add(time.Second)
	authOK(t, a, secret, "acme")
	clock.t = t0.Add(2 * time.Second)
	_, err = a.Authenticate(ctx, secret)
	wantLimit(t, err, true, 12*time.Hour-2*time.Second)
}

func TestAuthenticatorQuotaIsSharedAcrossInstances(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		_, secret := newSecret(t, st, "acme")
		clock := &fakeNow{time.Date(2024, 3, 10, 12, 0, 0, 0, time.UTC)}
		a := auth.NewAuthenticator(st, auth.Limits{DailyQuota: 3}, clock.now)
		b := auth.NewAuthenticator(st, auth.Limits{DailyQuota: 3}, clock.now)
		authOK(t, a, secret, "acme")
		authOK(t, b, secret, "acme")
		authOK(t, a, secret, "acme")
		_, err := b.Authenticate(context.Background(), secret)
		wantLimit(t, err, true, 12*time.Hour)
	})
}

func TestAuthenticatorRejectsMissingUnknownAndRevokedKeys(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		id, secret := newSecret(t, st, "acme")
		a := auth.NewAuthenticator(st, auth.Limits{}, nil)
		authOK(t, a, secret, "acme")
		if _, err := a.Authenticate(ctx, ""); !errors.Is(err, auth.ErrNoKey) {
			t.Errorf("no key: %v", err)
		}
		if _, err := a.Authenticate(ctx, auth.NewSecret()); !errors.Is(err, auth.ErrBadKey) {
			t.Errorf("unknown key: %v", err)
		}
		if err := st.APIKeyRevoke(ctx, id, time.Now()); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Authenticate(ctx, secret); !errors.Is(err, auth.ErrBadKey) {
			t.Errorf("revoked key: %v", err)
		}
	})
}
