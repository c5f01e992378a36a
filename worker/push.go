package worker

// Push targets: with `--push-secret NAME=SECRET`, Baton sends every push delivery for task name
// NAME with
//
//	Authorization: Bearer <SECRET>
//	Baton-Timestamp: <Unix seconds>
//	Baton-Signature: v1=<lowercase hex of HMAC-SHA256(key = SECRET, message = timestamp "." body)>
//
// A target checks them with VerifyPushRequest, or wraps its handler in PushAuth, and so refuses
// deliveries that are forged, tampered with, or replayed outside the timestamp tolerance. Within
// the tolerance a replay carries the delivery's Idempotency-Key again: deduplicate on it.

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/baton-dev/baton/internal/pushsig"
)

// DefaultPushTolerance is how far a push delivery's timestamp may be from the target's clock,
// either way, when VerifyPushRequest is given no tolerance.
const DefaultPushTolerance = 5 * time.Minute

// Why VerifyPushRequest refused a request. Each is an ErrPushUnauthorized: answer 401.
var (
	// ErrPushUnauthorized is what every refusal below is (errors.Is).
	ErrPushUnauthorized = errors.New("push request not authenticated")
	// ErrPushUnsigned: the Authorization bearer token, Baton-Timestamp or Baton-Signature is
	// missing.
	ErrPushUnsigned = fmt.Errorf("%w: unsigned", ErrPushUnauthorized)
	// ErrPushToken: the bearer token is not the secret.
	ErrPushToken = fmt.Errorf("%w: wrong bearer token", ErrPushUnauthorized)
	// ErrPushTimestamp: Baton-Timestamp is not Unix seconds, or is further from now than the
	// tolerance (a replay, or a clock far off).
	ErrPushTimestamp = fmt.Errorf("%w: bad timestamp", ErrPushUnauthorized)
	// ErrPushSignature: Baton-Signature is malformed or does not sign this body and timestamp.
	ErrPushSignature = fmt.Errorf("%w: bad signature", ErrPushUnauthorized)
)

// VerifyPushRequest checks that r is a push delivery Baton signed with secret no further than
// tolerance (0: DefaultPushTolerance) from now, and returns its body.
//
// The headers are checked before the body is read, so a request without the right bearer token
// or with a stale timestamp costs no more than its headers. Then r.Body is read to the end and
// replaced by a reader of the same bytes, so the handler can read it again. An error is an ErrPushUnauthorized (see the ErrPush* errors),
// or the error of reading the body; the body is not limited here (http.MaxBytesReader can).
func VerifyPushRequest(r *http.Request, secret string, tolerance time.Duration) ([]byte, error) {
	if secret == "" {
		return nil, errors.New("worker: VerifyPushRequest needs the push secret")
	}
	if tolerance <= 0 {
		tolerance = DefaultPushTolerance
	}
	token, ok := bearerToken(r.Header.Get("Authorization"))
	if !ok {
		return nil, fmt.Errorf("%w: no Authorization bearer token", ErrPushUnsigned)
	}
	ts, sig := r.Header.Get(pushsig.TimestampHeader), r.Header.Get(pushsig.SignatureHeader)
	switch {
	case ts == "":
		return nil, fmt.Errorf("%w: no %s header", ErrPushUnsigned, pushsig.TimestampHeader)
	case sig == "":
		return nil, fmt.Errorf("%w: no %s header", ErrPushUnsigned, pushsig.SignatureHeader)
	}
	// Compared as digests: equal length, so the comparison tells nothing about the secret's.
	got, want := sha256.Sum256([]byte(token)), sha256.Sum256([]byte(secret))
	if !hmac.Equal(got[:], want[:]) {
		return nil, ErrPushToken
	}
	if err := checkPushTimestamp(ts, time.Now(), tolerance); err != nil {
		return nil, err
	}
	var body []byte
	if r.Body != nil {
		var err error
		if body, err = io.ReadAll(r.Body); err != nil {
			return nil, fmt.Errorf("read push request body: %w", err)
		}
		r.Body.Close()
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	if err := pushsig.Check(secret, ts, body, sig); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPushSignature, err)
	}
	return body, nil
}

// bearerToken is the token of an "Authorization: Bearer <token>" value (the scheme is
// case-insensitive).
func bearerToken(h string) (string, bool) {
	scheme, token, ok := strings.Cut(h, " ")
	token = strings.TrimSpace(token)
	return token, ok && strings.EqualFold(scheme, "Bearer") && token != ""
}

func checkPushTimestamp(ts string, now time.Time, tolerance time.Duration) error {
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || ts[0] < '0' || ts[0] > '9' {
		return fmt.Errorf("%w: %s %q is not Unix seconds", ErrPushTimestamp, pushsig.TimestampHeader, ts)
	}
	// Compared as times: a far-off timestamp would overflow a Duration.
	switch signed := time.Unix(sec, 0); {
	case signed.Before(now.Add(-tolerance)):
		return fmt.Errorf("%w: signed %s ago, longer than the %s tolerance", ErrPushTimestamp, now.Sub(signed).Truncate(time.Second), tolerance)
	case signed.After(now.Add(tolerance)):
		return fmt.Errorf("%w: signed %s ahead of this clock, more than the %s tolerance", ErrPushTimestamp, signed.Sub(now).Truncate(time.Second), tolerance)
	}
	return nil
}

// SignPush returns the Baton-Timestamp and Baton-Signature values Baton sends with a push
// delivery of body at ts, for tests of a target (Authorization is "Bearer " and the secret).
func SignPush(secret string, ts time.Time, body []byte) (timestamp, signature string) {
	return pushsig.Sign(secret, ts, body)
}

// PushAuth wraps a push target's handler: it lets through only requests VerifyPushRequest
// accepts with secret and the default tolerance, and answers the others 401 (400 if the body
// could not be read) with a JSON {"error": "..."}. The handler can read the body as sent. It
// panics if secret is empty.
func PushAuth(secret string, next http.Handler) http.Handler {
	if secret == "" {
		panic("worker.PushAuth: empty secret")
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := VerifyPushRequest(r, secret, 0); err != nil {
			status := http.StatusBadRequest
			if errors.Is(err, ErrPushUnauthorized) {
				status = http.StatusUnauthorized
				w.Header().Set("WWW-Authenticate", `Bearer realm="baton-push"`)
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
			return
		}
		next.ServeHTTP(w, r)
	})
}
