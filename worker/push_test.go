package worker_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/baton-dev/baton/worker"
)

const pushSecret = "whsec-right"

var pushBody = `{"taskId":"t-1","attempt":1,"input":{"n":7}}` + "\n"

// signedPush is a delivery as Baton sends it, signed with secret at ts. The signature is computed
// here from the documented algorithm, not with the package's own signer, so that the verifier is
// held to the format targets in other languages implement.
func signedPush(secret string, ts time.Time, body string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/run", strings.NewReader(body))
	stamp := strconv.FormatInt(ts.Unix(), 10)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(stamp + "." + body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Authorization", "Bearer "+secret)
	r.Header.Set("Baton-Timestamp", stamp)
	r.Header.Set("Baton-Signature", "v1="+hex.EncodeToString(m.Sum(nil)))
	return r
}

func TestVerifyPushRequest(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for _, c := range []struct {
		name      string
		req       func() *http.Request
		secret    string        // the target's; pushSecret when empty
		tolerance time.Duration // 0: the default
		want      error         // nil: accepted
	}{
		{name: "valid", req: func() *http.Request { return signedPush(pushSecret, now, pushBody) }},
		{name: "valid, bearer scheme in lower case", req: func() *http.Request {
			r := signedPush(pushSecret, now, pushBody)
			r.Header.Set("Authorization", "bearer "+pushSecret)
			return r
		}},
		{name: "valid, four minutes old", req: func() *http.Request { return signedPush(pushSecret, now.Add(-4*time.Minute), pushBody) }},
		{name: "valid, four minutes ahead", req: func() *http.Request { return signedPush(pushSecret, now.Add(4*time.Minute), pushBody) }},
		{name: "valid, older than the default within a wider tolerance", tolerance: 10 * time.Minute,
			req: func() *http.Request { return signedPush(pushSecret, now.Add(-8*time.Minute), pushBody) }},
		{name: "valid, empty body", req: func() *http.Request { return signedPush(pushSecret, now, "") }},

		{name: "tampered body", want: worker.ErrPushSignature, req: func() *http.Request {
			r := signedPush(pushSecret, now, pushBody)
			r.Body = io.NopCloser(strings.NewReader(strings.Replace(pushBody, `"n":7`, `"n":8`, 1)))
			return r
		}},
		{name: "timestamp replaced after signing", want: worker.ErrPushSignature, req: func() *http.Request {
			r := signedPush(pushSecret, now.Add(-time.Hour), pushBody)
			r.Header.Set("Baton-Timestamp", strconv.FormatInt(now.Unix(), 10))
			return r
		}},
		{name: "the target has another secret", secret: "whsec-other", want: worker.ErrPushToken,
			req: func() *http.Request { return signedPush(pushSecret, now, pushBody) }},
		{name: "right bearer, signed with another secret", want: worker.ErrPushSignature, req: func() *http.Request {
			r := signedPush("whsec-forged", now, pushBody)
			r.Header.Set("Authorization", "Bearer "+pushSecret)
			return r
		}},
		{name: "no Authorization", want: worker.ErrPushUnsigned, req: func() *http.Request {
			r := signedPush(pushSecret, now, pushBody)
			r.Header.Del("Authorization")
			return r
		}},
		{name: "Authorization not a bearer token", want: worker.ErrPushUnsigned, req: func() *http.Request {
			r := signedPush(pushSecret, now, pushBody)
			r.SetBasicAuth("baton", pushSecret)
			return r
		}},
		{name: "no Baton-Timestamp", want: worker.ErrPushUnsigned, req: func() *http.Request {
			r := signedPush(pushSecret, now, pushBody)
			r.Header.Del("Baton-Timestamp")
			return r
		}},
		{name: "no Baton-Signature", want: worker.ErrPushUnsigned, req: func() *http.Request {
			r := signedPush(pushSecret, now, pushBody)
			r.Header.Del("Baton-Signature")
			return r
		}},
		{name: "no headers at all", want: worker.ErrPushUnsigned, req: func() *http.Request {
			return httptest.NewRequest(http.MethodPost, "/run", strings.NewReader(pushBody))
		}},
		{name: "stale timestamp", want: worker.ErrPushTimestamp,
			req: func() *http.Request { return signedPush(pushSecret, now.Add(-6*time.Minute), pushBody) }},
		{name: "future timestamp", want: worker.ErrPushTimestamp,
			req: func() *http.Request { return signedPush(pushSecret, now.Add(6*time.Minute), pushBody) }},
		{name: "older than a narrower tolerance", tolerance: time.Minute, want: worker.ErrPushTimestamp,
			req: func() *http.Request { return signedPush(pushSecret, now.Add(-2*time.Minute), pushBody) }},
		{name: "timestamp in milliseconds", want: worker.ErrPushTimestamp, req: func() *http.Request {
			r := signedPush(pushSecret, now, pushBody)
			r.Header.Set("Baton-Timestamp", strconv.FormatInt(now.UnixMilli(), 10))
			return r
		}},
		{name: "timestamp not a number", want: worker.ErrPushTimestamp, req: func() *http.Request {
			r := signedPush(pushSecret, now, pushBody)
			r.Header.Set("Baton-Timestamp", now.UTC().Format(time.RFC3339))
			return r
		}},
		{name: "signed timestamp", want: worker.ErrPushTimestamp, req: func() *http.Request {
			r := signedPush(pushSecret, now, pushBody)
			r.Header.Set("Baton-Timestamp", "+"+r.Header.Get("Baton-Timestamp"))
			return r
		}},
		{name: "signature without its scheme", want: worker.ErrPushSignature, req: func() *http.Request {
			r := signedPush(pushSecret, now, pushBody)
			r.Header.Set("Baton-Signature", strings.TrimPrefix(r.Header.Get("Baton-Signature"), "v1="))
			return r
		}},
		{name: "signature in another scheme", want: worker.ErrPushSignature, req: func() *http.Request {
			r := signedPush(pushSecret, now, pushBody)
			r.Header.Set("Baton-Signature", "sha256="+strings.TrimPrefix(r.Header.Get("Baton-Signature"), "v1="))
			return r
		}},
		{name: "signature not hex", want: worker.ErrPushSignature, req: func() *http.Request {
			r := signedPush(pushSecret, now, pushBody)
			r.Header.Set("Baton-Signature", "v1=not-hex")
			return r
		}},
		{name: "signature truncated", want: worker.ErrPushSignature, req: func() *http.Request {
			r := signedPush(pushSecret, now, pushBody)
			sig := r.Header.Get("Baton-Signature")
			r.Header.Set("Baton-Signature", sig[:len(sig)-8])
			return r
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			secret := c.secret
			if secret == "" {
				secret = pushSecret
			}
			r := c.req()
			sent, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(strings.NewReader(string(sent)))
			body, err := worker.VerifyPushRequest(r, secret, c.tolerance)
			if c.want != nil {
				if !errors.Is(err, c.want) || !errors.Is(err, worker.ErrPushUnauthorized) {
					t.Fatalf("err %v, want %v (an ErrPushUnauthorized)", err, c.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("refused a valid delivery: %v", err)
			}
			again, _ := io.ReadAll(r.Body)
			if string(body) != string(sent) || string(again) != string(sent) {
				t.Fatalf("returned body %q, body left to read %q; want both %q", body, again, sent)
			}
		})
	}
}

// A bearer token match alone lets the body be read; a wrong token is refused before it.
func TestVerifyPushRequestReadsNoBodyForAWrongToken(t *testing.T) {
	t.Parallel()
	r := signedPush(pushSecret, time.Now(), pushBody)
	r.Body = io.NopCloser(iotest.ErrReader(errors.New("the body was read")))
	if _, err := worker.VerifyPushRequest(r, "whsec-other", 0); !errors.Is(err, worker.ErrPushToken) {
		t.Fatalf("err %v, want ErrPushToken", err)
	}
	if _, err := worker.VerifyPushRequest(r, pushSecret, 0); err == nil || errors.Is(err, worker.ErrPushUnauthorized) ||
		!strings.Contains(err.Error(), "the body was read") {
		t.Fatalf("err %v, want the body's read error, not an authentication refusal", err)
	}
}

func TestVerifyPushRequestNeedsASecret(t *testing.T) {
	t.Parallel()
	r := signedPush("", time.Now(), pushBody)
	r.Header.Set("Authorization", "Bearer x")
	if _, err := worker.VerifyPushRequest(r, "", 0); err == nil {
		t.Fatal("an empty secret verified a request")
	}
}

func TestSignPushIsWhatVerifyPushRequestAccepts(t *testing.T) {
	t.Parallel()
	now := time.Now()
	ts, sig := worker.SignPush(pushSecret, now, []byte(pushBody))
	want := signedPush(pushSecret, now, pushBody)
	if ts != want.Header.Get("Baton-Timestamp") || sig != want.Header.Get("Baton-Signature") {
		t.Fatalf("SignPush = %q, %q; want %q, %q", ts, sig, want.Header.Get("Baton-Timestamp"), want.Header.Get("Baton-Signature"))
	}
}

func TestPushAuth(t *testing.T) {
	t.Parallel()
	var got []string // bodies the wrapped handler read
	h := worker.PushAuth(pushSecret, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, string(b))
		w.WriteHeader(http.StatusAccepted)
	}))
	serve := func(r *http.Request) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec
	}

	if rec := serve(signedPush(pushSecret, time.Now(), pushBody)); rec.Code != http.StatusAccepted || len(got) != 1 || got[0] != pushBody {
		t.Fatalf("valid delivery: %d %s, handler read %q", rec.Code, rec.Body, got)
	}

	for _, c := range []struct {
		name   string
		req    *http.Request
		status int
		says   string
	}{
		{"forged", signedPush("whsec-forged", time.Now(), pushBody), http.StatusUnauthorized, "wrong bearer token"},
		{"stale", signedPush(pushSecret, time.Now().Add(-time.Hour), pushBody), http.StatusUnauthorized, "bad timestamp"},
		{"unsigned", httptest.NewRequest(http.MethodPost, "/run", strings.NewReader(pushBody)), http.StatusUnauthorized, "unsigned"},
	} {
		rec := serve(c.req)
		var answer struct{ Error string }
		if err := json.Unmarshal(rec.Body.Bytes(), &answer); err != nil || rec.Code != c.status ||
			rec.Header().Get("Content-Type") != "application/json" || !strings.Contains(answer.Error, c.says) {
			t.Errorf("%s: %d %s %q, want %d with a JSON error saying %q", c.name, rec.Code, rec.Header().Get("Content-Type"), rec.Body, c.status, c.says)
		}
	}
	unreadable := signedPush(pushSecret, time.Now(), pushBody)
	unreadable.Body = io.NopCloser(iotest.ErrReader(errors.New("connection reset")))
	if rec := serve(unreadable); rec.Code != http.StatusBadRequest {
		t.Errorf("unreadable body: %d %s, want 400", rec.Code, rec.Body)
	}
	if len(got) != 1 {
		t.Fatalf("the handler ran for %d requests, want only the valid one", len(got))
	}
}

func TestPushAuthPanicsWithoutASecret(t *testing.T) {
	t.Parallel()
	defer func() {
		if recover() == nil {
			t.Fatal("PushAuth accepted an empty secret")
		}
	}()
	worker.PushAuth("", http.NotFoundHandler())
}
