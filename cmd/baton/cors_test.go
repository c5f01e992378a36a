package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/baton-dev/baton/internal/store/storetest"
)

// parseServerFlags parses args as `baton dev` and `baton server` do.
func parseServerFlags(args ...string) (*serverFlags, error) {
	var f serverFlags
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.register(fs)
	return &f, fs.Parse(args)
}

func TestCORSOriginsFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"*"}}, // the default: every origin, as the producer contract answers
		{[]string{"--cors-origins", "*"}, []string{"*"}},
		{[]string{"--cors-origins", "https://ui.example.com, http://localhost:5173"}, []string{"https://ui.example.com", "http://localhost:5173"}},
		{[]string{"--cors-origins=none"}, nil},
	} {
		f, err := parseServerFlags(c.args...)
		if err != nil || !slices.Equal(f.corsOrigins.origins, c.want) || (c.want == nil) != (f.corsOrigins.origins == nil) {
			t.Errorf("%q: origins %q, %v; want %q", c.args, f.corsOrigins.origins, err, c.want)
		}
	}
	for _, c := range []struct{ value, wantErr string }{
		{"", "empty"},
		{"https://ui.example.com/", "is not an origin"},
		{"ui.example.com", "is not an origin"},
		{"*,https://ui.example.com", "stands alone"},
	} {
		if _, err := parseServerFlags("--cors-origins", c.value); err == nil || !strings.Contains(err.Error(), "cors-origins") || !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("--cors-origins %q: %v; want an error about %q", c.value, err, c.wantErr)
		}
	}
	// Both commands refuse a bad value before they open anything.
	for _, cmd := range []string{"dev", "server"} {
		var out, errOut bytes.Buffer
		args := []string{cmd, "--cors-origins", "https://ui.example.com/app"}
		if cmd == "dev" {
			args = append(args, "--data-dir", t.TempDir())
		}
		if code := run(context.Background(), args, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), `invalid value "https://ui.example.com/app" for flag -cors-origins`) {
			t.Errorf("baton %s with a bad --cors-origins: exit %d, %s", cmd, code, errOut.String())
		}
	}
}

// serveWithFlags runs serve, the wiring of `baton dev` and `baton server`, on a SQLite store with
// the given flags and returns the producer listener's URL.
func serveWithFlags(t *testing.T, args ...string) string {
	t.Helper()
	f, err := parseServerFlags(append([]string{"--listen", "127.0.0.1:0", "--internal-listen", "127.0.0.1:0", "--shutdown-timeout", "5s"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	ls, err := f.bind(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	st := storetest.OpenSQLite(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, f, ls, st, slog.New(slog.DiscardHandler)) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return "http://" + ls.producer.Addr().String()
}

// allowOrigin sends GET /jobs from a page of origin and returns the answer's
// Access-Control-Allow-Origin.
func allowOrigin(t *testing.T, base, origin string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/jobs", nil)
	req.Header.Set("Origin", origin)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET /jobs without a key: %d", res.StatusCode)
	}
	return res.Header.Get("Access-Control-Allow-Origin")
}

func TestServeAppliesCORSOrigins(t *testing.T) {
	t.Run("default", func(t *testing.T) {
		base := serveWithFlags(t)
		if got := allowOrigin(t, base, "https://ui.example.com"); got != "*" {
			t.Errorf("Access-Control-Allow-Origin %q, want *", got)
		}
	})
	t.Run("list", func(t *testing.T) {
		base := serveWithFlags(t, "--cors-origins", "https://ui.example.com,http://localhost:5173")
		if got := allowOrigin(t, base, "http://localhost:5173"); got != "http://localhost:5173" {
			t.Errorf("listed origin: Access-Control-Allow-Origin %q", got)
		}
		if got := allowOrigin(t, base, "https://other.example.com"); got != "" {
			t.Errorf("unlisted origin: Access-Control-Allow-Origin %q", got)
		}
	})
	t.Run("none", func(t *testing.T) {
		base := serveWithFlags(t, "--cors-origins", "none")
		if got := allowOrigin(t, base, "https://ui.example.com"); got != "" {
			t.Errorf("Access-Control-Allow-Origin %q, want none", got)
		}
	})
}
