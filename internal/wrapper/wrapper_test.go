package wrapper

import (
	"encoding/base64"
	"testing"
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
