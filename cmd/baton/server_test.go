package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/store/storetest"
	_ "github.com/jackc/pgx/v5/stdlib"
)

// freeAddr returns a loopback address that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestServerReplicasOnPostgres runs the commands a production setup runs: migrate, create a key,
// and two `baton server` replicas on one database that serve the same job.
func TestServerReplicasOnPostgres(t *testing.T) {
	url := storetest.NewPostgresSchema(t)
	ctx := context.Background()
	var out, errOut bytes.Buffer
	if code := run(ctx, []string{"server", "--database-url", url, "--internal-insecure"}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "baton migrate") {
		t.Fatalf("server before migrate: exit %d, %s", code, errOut.String())
	}
	if code := run(ctx, []string{"migrate", "--database-url", url}, &out, &errOut); code != 0 {
		t.Fatalf("migrate: exit %d, %s", code, errOut.String())
	}
	out.Reset()
	if code := run(ctx, []string{"apikey", "create", "--name", "ci", "--tenant", "acme", "--database-url", url}, &out, &errOut); code != 0 {
		t.Fatalf("apikey create: exit %d, %s", code, errOut.String())
	}
	key := strings.TrimSpace(out.String())

	srvCtx, stop := context.WithCancel(ctx)
	defer stop()
	var urls []string
	exits := make(chan int, 2)
	for i := 0; i < 2; i++ {
		addr, internal := freeAddr(t), freeAddr(t)
		urls = append(urls, "http://"+addr)
		go func() {
			var o, e bytes.Buffer
			exits <- run(srvCtx, []string{"server", "--database-url", url, "--listen", addr,
				"--internal-listen", internal, "--internal-insecure"}, &o, &e)
		}()
	}
	call := func(method, u string, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, u, strings.NewReader(body))
		req.Header.Set("x-api-key", key)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, nil
		}
		defer res.Body.Close()
		var v map[string]any
		_ = json.NewDecoder(res.Body).Decode(&v)
		return res.StatusCode, v
	}
	for _, u := range urls {
		deadline := time.Now().Add(20 * time.Second)
		for {
			if code, _ := call("GET", u+"/readyz", ""); code == 200 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("replica %s never became ready", u)
			}
			time.Sleep(50 * time.Millisecond) // waiting for a real process to listen
		}
	}
	example, err := os.ReadFile("../../examples/job.json")
	if err != nil {
		t.Fatal(err)
	}
	code, created := call("POST", urls[0]+"/jobs", string(example))
	if code != 201 || created["totalTasks"] != float64(5) {
		t.Fatalf("create through replica A: %d %v", code, created)
	}
	id := created["jobId"].(string)
	code, job := call("GET", urls[1]+"/jobs/"+id, "")
	if code != 200 || job["status"] != "processing" || len(job["tasks"].([]any)) != 5 {
		t.Fatalf("read through replica B: %d %v", code, job)
	}
	if code, _ := call("POST", urls[1]+"/jobs/"+id+"/cancel", ""); code != 200 {
		t.Fatalf("cancel through replica B: %d", code)
	}
	if code, job := call("GET", urls[0]+"/jobs/"+id, ""); code != 200 || job["status"] != "canceled" {
		t.Fatalf("replica A after cancel: %d %v", code, job["status"])
	}
	stop()
	for i := 0; i < 2; i++ {
		select {
		case code := <-exits:
			if code != 0 {
				t.Errorf("replica exited %d after shutdown", code)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a replica did not shut down")
		}
	}
}
