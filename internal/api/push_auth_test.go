package api_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/push"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/worker"
)

// request rebuilds the request a target received, for the SDK's verifier.
func (d delivery) request() *http.Request {
	r, _ := http.NewRequest(http.MethodPost, "http://target/run", bytes.NewReader(d.raw))
	r.Header = d.header.Clone()
	return r
}

// wantSignature is the Baton-Signature of body at timestamp under secret, computed from the
// documented algorithm rather than with the code under test.
func wantSignature(secret, timestamp string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(timestamp + "." + string(body)))
	return "v1=" + hex.EncodeToString(m.Sum(nil))
}

func TestPushSignsEveryDeliveryWithTheTargetSecret(t *testing.T) {
	forEachPushDriver(t, nil, func(t *testing.T, a *pushAPI) {
		const secret = "whsec-test-0123456789"
		signedAt := time.Now().Truncate(time.Second)
		signClock := clockwork.NewFakeClockAt(signedAt)
		target := newTestTarget(t, func(d delivery, w http.ResponseWriter, _ *http.Request) {
			if d.str("taskName") != "signed" {
				w.WriteHeader(http.StatusAccepted)
				return
			}
			// Refused, so that the retry is delivered too; it must be signed at its own time.
			signClock.Advance(time.Minute)
			http.Error(w, "try again", http.StatusServiceUnavailable)
		})
		a.startPusher(push.Config{Targets: map[string]string{"signed": target.url, "open": target.url},
			Secrets: map[string]string{"signed": secret}, Clock: signClock})
		_, ids := a.createJob(withFields(tk("s", "signed"), "runtime", "push", "maxAttempts", 2, "backoffBaseMs", 1000, "backoffMaxMs", 1000))
		a.createJob(withFields(tk("o", "open"), "runtime", "push"))

		eventually(t, "the signed task fails for good", a.untilRetried(ids["s"], lifecycle.Failed))
		var signed, unsigned []delivery
		eventually(t, "the open task is delivered", func() bool {
			signed, unsigned = nil, nil
			for _, d := range target.deliveries() {
				if d.str("taskName") == "signed" {
					signed = append(signed, d)
				} else {
					unsigned = append(unsigned, d)
				}
			}
			return len(unsigned) > 0
		})
		if len(signed) != 2 || len(unsigned) != 1 {
			t.Fatalf("%d signed and %d open deliveries, want 2 and 1", len(signed), len(unsigned))
		}
		for i, d := range signed {
			ts := strconv.FormatInt(signedAt.Add(time.Duration(i)*time.Minute).Unix(), 10)
			if got := d.header.Get("Authorization"); got != "Bearer "+secret {
				t.Errorf("attempt %d: Authorization %q, want the secret as a bearer token", i+1, got)
			}
			if got := d.header.Get("Baton-Timestamp"); got != ts {
				t.Errorf("attempt %d: Baton-Timestamp %q, want %s, the signing clock's time when it was sent", i+1, got, ts)
			}
			if got, want := d.header.Get("Baton-Signature"), wantSignature(secret, ts, d.raw); got != want {
				t.Errorf("attempt %d: Baton-Signature %q, want %q over the body received", i+1, got, want)
			}
			body, err := worker.VerifyPushRequest(d.request(), secret, 0)
			if err != nil || !bytes.Equal(body, d.raw) {
				t.Errorf("attempt %d: the SDK refuses Baton's delivery: %v", i+1, err)
			}
			if d.num("attempt") != int64(i+1) {
				t.Errorf("delivery %d is attempt %d", i+1, d.num("attempt"))
			}
		}
		if signed[0].header.Get("Baton-Signature") == signed[1].header.Get("Baton-Signature") {
			t.Error("the retry was sent with the first attempt's signature")
		}
		for _, h := range []string{"Authorization", "Baton-Timestamp", "Baton-Signature"} {
			if v, ok := unsigned[0].header[h]; ok {
				t.Errorf("a target without a secret was sent %s: %q", h, v)
			}
		}
	})
}

// A target guarded by the SDK's PushAuth takes Baton's deliveries when both sides have the same
// secret; with another secret, or none, on Baton's side it refuses them, and each refusal fails
// the attempt as INFRASTRUCTURE under the normal retry rule.
func TestPushTargetCheckingTheSignatureTakesOnlyTheRightSecret(t *testing.T) {
	forEachPushDriver(t, nil, func(t *testing.T, a *pushAPI) {
		const secret = "whsec-right"
		var (
			mu      sync.Mutex
			reports []error // the callbacks' outcomes
		)
		target := newTestTarget(t, func(d delivery, w http.ResponseWriter, r *http.Request) {
			worker.PushAuth(secret, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(http.StatusAccepted)
				go func() {
					err := reportSucceeded(d)
					mu.Lock()
					reports = append(reports, err)
					mu.Unlock()
				}()
			})).ServeHTTP(w, r)
		})
		a.startPusher(push.Config{
			Targets: map[string]string{"good": target.url, "forged": target.url, "plain": target.url},
			Secrets: map[string]string{"good": secret, "forged": "whsec-wrong"},
		})
		push := func(key, name string) map[string]any {
			return withFields(tk(key, name), "runtime", "push", "maxAttempts", 2, "backoffBaseMs", 1000, "backoffMaxMs", 1000)
		}
		goodJob, good := a.createJob(push("g", "good"))
		_, forged := a.createJob(push("f", "forged"))
		_, plain := a.createJob(push("p", "plain"))

		eventually(t, "the good task's job completes", func() bool {
			job, _, err := a.d.GetJob(t.Context(), "", goodJob)
			return err == nil && job.Status == lifecycle.JobCompleted
		})
		eventually(t, "the forged task fails for good", a.untilRetried(forged["f"], lifecycle.Failed))
		eventually(t, "the unsigned task fails for good", a.untilRetried(plain["p"], lifecycle.Failed))
		eventually(t, "the target's callbacks return", func() bool { mu.Lock(); defer mu.Unlock(); return len(reports) > 0 })

		mu.Lock()
		if len(reports) != 1 || reports[0] != nil {
			t.Fatalf("callbacks of accepted deliveries: %v, want one that succeeded", reports)
		}
		mu.Unlock()
		if g := a.task(good["g"]); g.Attempt != 1 || !sameJSON(g.Output, `{"by":"push-target"}`) {
			t.Errorf("good task: attempt %d, output %s; want attempt 1 completed by the target", g.Attempt, g.Output)
		}
		refused := "push target " + target.url + " answered 401 Unauthorized: "
		for _, c := range []struct {
			id, why string
		}{
			{forged["f"], "wrong bearer token"},
			{plain["p"], "unsigned"},
		} {
			tk := a.task(c.id)
			if tk.Attempt != 2 || tk.DeadLetteredAt.IsZero() {
				t.Errorf("%s: attempt %d, dead-lettered at %v; want dead-lettered after attempt 2", tk.Name, tk.Attempt, tk.DeadLetteredAt)
			}
			for i, at := range a.attempts(c.id) {
				want := lifecycle.Pending
				if i == 1 {
					want = lifecycle.Failed
				}
				if at.Outcome != store.OutcomeFailed || at.Result != want || at.Error == nil || at.Error.Category != lifecycle.Infrastructure ||
					!strings.HasPrefix(at.Error.Message, refused) || !strings.Contains(at.Error.Message, c.why) {
					t.Errorf("%s attempt %d: %+v (error %+v), want failed INFRASTRUCTURE %q... saying %q, result %s",
						tk.Name, i+1, at, at.Error, refused, c.why, want)
				}
			}
		}
	})
}

// reportSucceeded is a push target's work after it took delivery d: report started, then
// success, through the callback dialect with the envelope's task token.
func reportSucceeded(d delivery) error {
	cb := d.str("callbackBaseUrl") + "/v1/tasks/" + d.str("taskId")
	attempt := d.num("attempt")
	for _, s := range []struct {
		endpoint string
		body     map[string]any
	}{
		{"started", map[string]any{"attempt": attempt, "workerId": "push-target"}},
		{"completed", map[string]any{"attempt": attempt, "workerId": "push-target", "outcome": "SUCCEEDED", "output": map[string]any{"by": "push-target"}}},
	} {
		res, err := roundTrip("POST", cb+"/"+s.endpoint, s.body, "Authorization", "Bearer "+d.str("taskToken"))
		if err == nil && (res.Status != http.StatusOK || res.Body["acknowledged"] != true) {
			err = fmt.Errorf("%d %s", res.Status, res.Raw)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", s.endpoint, err)
		}
	}
	return nil
}

func TestPushTargetWithAnUnusableSecretIsAConfigurationError(t *testing.T) {
	forEachPushDriver(t, nil, func(t *testing.T, a *pushAPI) {
		target := newTestTarget(t, func(_ delivery, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusAccepted) })
		a.startPusher(push.Config{Targets: map[string]string{"empty": target.url, "spaced": target.url},
			Secrets: map[string]string{"empty": "", "spaced": "two words"}})
		_, empty := a.createJob(withFields(tk("e", "empty"), "runtime", "push", "maxAttempts", 3))
		_, spaced := a.createJob(withFields(tk("s", "spaced"), "runtime", "push", "maxAttempts", 3))

		for _, c := range []struct{ id, name, why string }{
			{empty["e"], "empty", "the secret is empty"},
			{spaced["s"], "spaced", "printable ASCII without spaces"},
		} {
			eventually(t, c.name+" fails", func() bool { return a.task(c.id).Status == lifecycle.Failed })
			tk := a.task(c.id)
			prefix := fmt.Sprintf("push target %s for task name %q has an unusable secret: ", target.url, c.name)
			if tk.Attempt != 1 || tk.Error == nil || tk.Error.Category != lifecycle.Configuration ||
				!strings.HasPrefix(tk.Error.Message, prefix) || !strings.Contains(tk.Error.Message, c.why) {
				t.Errorf("%s: attempt %d, error %+v; want CONFIGURATION %q... saying %q after attempt 1", c.name, tk.Attempt, tk.Error, prefix, c.why)
			}
			if strings.Contains(tk.Error.Message, "two words") {
				t.Errorf("%s: the task error shows the secret: %s", c.name, tk.Error.Message)
			}
		}
		if n := len(target.deliveries()); n != 0 {
			t.Fatalf("the target was sent %d deliveries, want none", n)
		}
	})
}
