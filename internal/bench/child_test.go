package bench_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/baton-dev/baton/internal/bench"
)

// A child whose address another server took is told apart from a child that is not ready: the
// server that answers there must take the child's key, and a child that could not listen says so.
// Either way StartChild answers ErrAddrTaken, for the caller to start it again on other ports.
func TestStartChildNoticesItsAddressTaken(t *testing.T) {
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			return // 200: a server of its own, ready
		}
		http.Error(w, `{"error":"invalid API key"}`, http.StatusUnauthorized)
	}))
	defer other.Close()
	for name, cfg := range map[string]bench.ChildConfig{
		"another server answers": {Path: "/bin/sh", Args: []string{"-c", "exec sleep 30"}, ProducerURL: other.URL, APIKey: "the-childs-key"},
		"the child cannot listen": {Path: "/bin/sh", Args: []string{"-c", "echo 'listen tcp 127.0.0.1:1: bind: address already in use' >&2; exit 1"},
			ProducerURL: "http://127.0.0.1:1", APIKey: "k"},
	} {
		c, err := bench.StartChild(context.Background(), cfg)
		if !errors.Is(err, bench.ErrAddrTaken) {
			t.Errorf("%s: %v, want ErrAddrTaken", name, err)
		}
		if c != nil {
			c.Stop(0)
		}
	}
}
