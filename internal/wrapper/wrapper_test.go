package wrapper

import (
	"encoding/base64"
	"testing"

	"github.com/baton-dev/baton/worker"
)

func TestLeaseFromToken(t *testing.T) {
	t.Parallel()
	payload := `{"task_id":"t","lease_token":"lease-1"}`
	tok := "e30." + base64.RawURLEncoding.EncodeToString([]byte(payload)) + ".sig"
	if got := leaseFromToken(tok); got != "lease-1" {
		t.Fatalf("lease %q", got)
	}
	for _, bad := range []string{"", "a.b", "a.!!!.c", "e30.e30.x"} {
		if got := leaseFromToken(bad); got != "" {
			t.Errorf("leaseFromToken(%q) = %q", bad, got)
		}
	}
}

// A pushed task reports to, and downloads its bundle from, the server its delivery names; a
// claimed one, the configured server.
func TestPublicURLOfATask(t *testing.T) {
	t.Parallel()
	w := New(Config{PublicURL: "http://configured:8080/"})
	if got := w.publicURLOf(&worker.Task{}); got != "http://configured:8080" {
		t.Errorf("claimed task: %q", got)
	}
	if got := w.publicURLOf(&worker.Task{PublicURL: "http://pushed:8080"}); got != "http://pushed:8080" {
		t.Errorf("pushed task: %q", got)
	}
}
