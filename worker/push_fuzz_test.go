package worker_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/worker"
)

// FuzzPushAuth sends fuzzed push deliveries (Authorization, Baton-Timestamp, Baton-Signature and
// body) through PushAuth, the handler wrapper a push target puts in front of its handler. In the
// fuzzed text "$SECRET" is the target's secret, "$NOW" the current Unix time and "$SIG" the right
// signature of the (expanded) timestamp and body. The wrapper must let through exactly the
// deliveries the signing scheme allows — computed here from the documented algorithm — with the
// body intact for the handler, and refuse the others with a JSON 401 that has an "error".
func FuzzPushAuth(f *testing.F) {
	f.Add("Bearer $SECRET", "$NOW", "$SIG", []byte(pushBody))
	f.Add("bearer $SECRET", "$NOW", "$SIG", []byte(""))
	f.Add("Bearer  $SECRET ", "$NOW", "$SIG", []byte("{}"))
	f.Add("Bearer whsec-wrong", "$NOW", "$SIG", []byte(pushBody))
	f.Add("Basic $SECRET", "$NOW", "$SIG", []byte(pushBody))
	f.Add("Bearer $SECRET", "1700000000", "$SIG", []byte(pushBody))
	f.Add("Bearer $SECRET", "+$NOW", "$SIG", []byte(pushBody))
	f.Add("Bearer $SECRET", "$NOW", "v1=00", []byte(pushBody))
	f.Add("Bearer $SECRET", "$NOW", "V1=$SIG", []byte(pushBody))
	f.Add("", "", "", []byte(nil))
	f.Fuzz(func(t *testing.T, authorization, timestamp, signature string, body []byte) {
		now := time.Now()
		ts := strings.TrimSpace(strings.ReplaceAll(timestamp, "$NOW", strconv.FormatInt(now.Unix(), 10)))
		m := hmac.New(sha256.New, []byte(pushSecret))
		m.Write([]byte(ts + "." + string(body)))
		right := "v1=" + hex.EncodeToString(m.Sum(nil))
		authz := strings.TrimSpace(strings.ReplaceAll(authorization, "$SECRET", pushSecret))
		sig := strings.TrimSpace(strings.ReplaceAll(signature, "$SIG", right))

		r := httptest.NewRequest(http.MethodPost, "/run", strings.NewReader(string(body)))
		for _, h := range [][2]string{{"Authorization", authz}, {"Baton-Timestamp", ts}, {"Baton-Signature", sig}} {
			if h[1] == "" || strings.ContainsFunc(h[1], func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }) {
				continue // no client can send it; net/http refuses it
			}
			r.Header.Set(h[0], h[1])
		}
		// What the scheme allows: the bearer token is the secret, the timestamp is Unix seconds
		// within five minutes of now, and the signature is the HMAC of timestamp "." body.
		scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		sec, tsErr := strconv.ParseInt(r.Header.Get("Baton-Timestamp"), 10, 64)
		tsRead := r.Header.Get("Baton-Timestamp")
		age := now.Sub(time.Unix(sec, 0)).Abs()
		if tsErr == nil && (age > 5*time.Minute-2*time.Second && age < 5*time.Minute+2*time.Second) {
			return // at the edge of the tolerance: the verifier's clock reading decides
		}
		allowed := strings.EqualFold(scheme, "Bearer") && strings.TrimSpace(token) == pushSecret &&
			tsErr == nil && tsRead[0] >= '0' && tsRead[0] <= '9' && age <= 5*time.Minute &&
			r.Header.Get("Baton-Signature") == right

		var reached bool
		var seen []byte
		h := worker.PushAuth(pushSecret, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			reached = true
			seen, _ = io.ReadAll(r.Body)
			w.WriteHeader(http.StatusNoContent)
		}))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if reached != allowed {
			t.Fatalf("handler reached: %v, the scheme allows: %v (Authorization %q, timestamp %q, signature %q; right one %q)",
				reached, allowed, r.Header.Get("Authorization"), tsRead, r.Header.Get("Baton-Signature"), right)
		}
		if reached {
			if string(seen) != string(body) || rec.Code != http.StatusNoContent {
				t.Fatalf("the handler read %q (want %q) and answered %d", seen, body, rec.Code)
			}
			return
		}
		var refusal map[string]any
		if rec.Code != http.StatusUnauthorized || json.Unmarshal(rec.Body.Bytes(), &refusal) != nil || refusal["error"] == "" || refusal["error"] == nil {
			t.Fatalf("refused with %d %s, want a JSON 401 with an error", rec.Code, rec.Body)
		}
	})
}
