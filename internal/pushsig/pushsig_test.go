package pushsig_test

import (
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/pushsig"
)

// The signature format is a contract with targets written in any language: this vector was
// computed outside Go (Python's hmac module), so a change of format fails here.
func TestSignPushMatchesTheDocumentedAlgorithm(t *testing.T) {
	t.Parallel()
	body := []byte(`{"taskId":"t-1"}` + "\n")
	ts, sig := pushsig.Sign("shh-its-a-secret", time.Unix(1700000000, 999_000_000), body)
	if ts != "1700000000" {
		t.Errorf("timestamp %q, want Unix seconds 1700000000", ts)
	}
	if want := "v1=949cd577deba4de4fa9cb8117b0afeb450c1749269be9d1e2431856b37f1e758"; sig != want {
		t.Errorf("signature %q, want %q", sig, want)
	}
	if err := pushsig.Check("shh-its-a-secret", ts, body, sig); err != nil {
		t.Errorf("own signature refused: %v", err)
	}
}

func TestCheckPushSignatureRefusesWhatItDidNotSign(t *testing.T) {
	t.Parallel()
	body := []byte(`{"attempt":1}`)
	ts, sig := pushsig.Sign("s1", time.Unix(1700000000, 0), body)
	for _, c := range []struct {
		name, secret, ts string
		body             []byte
		sig, want        string
	}{
		{"other secret", "s2", ts, body, sig, "does not match"},
		{"other body", "s1", ts, []byte(`{"attempt":2}`), sig, "does not match"},
		{"other timestamp", "s1", "1700000001", body, sig, "does not match"},
		{"no scheme", "s1", ts, body, strings.TrimPrefix(sig, "v1="), "malformed"},
		{"other scheme", "s1", ts, body, "v0=" + strings.TrimPrefix(sig, "v1="), "malformed"},
		{"uppercase hex", "s1", ts, body, "v1=" + strings.ToUpper(sig[3:]), "malformed"},
		{"short", "s1", ts, body, sig[:len(sig)-2], "malformed"},
		{"not hex", "s1", ts, body, "v1=" + strings.Repeat("z", 64), "malformed"},
		{"empty", "s1", ts, body, "", "malformed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := pushsig.Check(c.secret, c.ts, c.body, c.sig)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want one saying %q", err, c.want)
			}
		})
	}
}

func TestCheckPushSecret(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		secret string
		ok     bool
	}{
		{"s3cr3t-~!#$%&'*+/=?^_`{|}", true},
		{"", false},
		{"two words", false},
		{"tab\there", false},
		{"line\n", false},
		{"café", false},
	} {
		if err := pushsig.CheckSecret(c.secret); (err == nil) != c.ok {
			t.Errorf("CheckSecret(%q) = %v, want ok %v", c.secret, err, c.ok)
		}
	}
}
