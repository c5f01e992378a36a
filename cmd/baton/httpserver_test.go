package main

import (
	"testing"

	"github.com/baton-dev/baton/internal/server"
)

// baton dev and baton server serve with the default listener limits (their values are
// internal/server's TestDefaultHTTPLimits).
func TestDefaultHTTPLimits(t *testing.T) {
	f, err := parseServerFlags()
	if err != nil {
		t.Fatal(err)
	}
	if f.http != server.DefaultHTTPLimits {
		t.Fatalf("listener limits %+v, want server.DefaultHTTPLimits %+v", f.http, server.DefaultHTTPLimits)
	}
}
