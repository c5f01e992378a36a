package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	neturl "net/url"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/faultnet"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// TestServerWhileItsDatabaseIsPartitioned runs `baton server` with its PostgreSQL behind a
// partitioning proxy: cut off, it answers 503 with Retry-After within a few seconds instead of
// hanging; healed, it serves again without a restart.
func TestServerWhileItsDatabaseIsPartitioned(t *testing.T) {
	direct := storetest.NewPostgresSchema(t)
	ctx := context.Background()
	var out, errOut bytes.Buffer
	if code := run(ctx, []string{"migrate", "--database-url", direct}, &out, &errOut); code != 0 {
		t.Fatalf("migrate: exit %d, %s", code, errOut.String())
	}
	out.Reset()
	if code := run(ctx, []string{"apikey", "create", "--name", "ci", "--tenant", "acme", "--database-url", direct}, &out, &errOut); code != 0 {
		t.Fatalf("apikey create: exit %d, %s", code, errOut.String())
	}
	key := strings.TrimSpace(out.String())
	u, err := neturl.Parse(direct)
	if err != nil || u.Port() == "" {
		t.Skipf("the PostgreSQL URL needs an explicit host:port to run through a proxy: %v", err)
	}
	p, err := faultnet.Listen("127.0.0.1:0", net.JoinHostPort(u.Hostname(), u.Port()))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	u.Host = p.Addr()

	addr := freeAddr(t)
	srvCtx, stop := context.WithCancel(ctx)
	exit := make(chan int, 1)
	go func() {
		var o, e bytes.Buffer
		exit <- run(srvCtx, []string{"server", "--database-url", u.String(), "--listen", addr,
			"--internal-listen", freeAddr(t), "--internal-insecure"}, &o, &e)
	}()
	defer func() {
		p.Partition(false)
		stop()
		select {
		case code := <-exit:
			if code != 0 {
				t.Errorf("server exited %d", code)
			}
		case <-time.After(30 * time.Second):
			t.Error("the server did not shut down")
		}
	}()
	client := &http.Client{Timeout: 30 * time.Second}
	call := func(method, path, body string) (int, http.Header, time.Duration) {
		t.Helper()
		start := time.Now()
		req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
		req.Header.Set("x-api-key", key)
		req.Header.Set("Content-Type", "application/json")
		res, err := client.Do(req)
		if err != nil {
			return 0, nil, time.Since(start)
		}
		defer res.Body.Close()
		var v map[string]any
		_ = json.NewDecoder(res.Body).Decode(&v)
		return res.StatusCode, res.Header, time.Since(start)
	}
	waitReady := func(what string) time.Duration {
		t.Helper()
		start := time.Now()
		for {
			if code, _, _ := call("GET", "/readyz", ""); code == http.StatusOK {
				return time.Since(start)
			}
			if time.Since(start) > 20*time.Second {
				t.Fatalf("not ready %s", what)
			}
			time.Sleep(50 * time.Millisecond) // waiting for a real process
		}
	}
	waitReady("after starting")
	const job = `{"tasks":[{"taskId":"a","name":"n","dependsOn":[]}]}`
	if code, _, _ := call("POST", "/jobs", job); code != http.StatusCreated {
		t.Fatalf("create before the partition: %d", code)
	}

	p.Partition(true)
	for _, c := range []struct{ method, path, body string }{{"GET", "/readyz", ""}, {"POST", "/jobs", job}, {"GET", "/jobs", ""}} {
		code, h, took := call(c.method, c.path, c.body)
		t.Logf("%s %s during the partition: %d after %s", c.method, c.path, code, took.Round(time.Millisecond))
		if code != http.StatusServiceUnavailable || took > 5*time.Second {
			t.Fatalf("%s %s during the partition: %d after %s; want 503 within 5 s", c.method, c.path, code, took)
		}
		if c.path != "/readyz" && h.Get("Retry-After") == "" {
			t.Fatalf("%s %s: 503 without Retry-After", c.method, c.path)
		}
	}
	p.Partition(false)
	t.Logf("ready %s after the partition healed", waitReady("after the partition healed").Round(time.Millisecond))
	if code, _, _ := call("POST", "/jobs", job); code != http.StatusCreated {
		t.Fatalf("create after the partition: %d", code)
	}
}
