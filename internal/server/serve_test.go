package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/server"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// limitedServer runs Serve (baton dev's and baton server's wiring) on SQLite with small listener
// limits, so that a test can go past them in a second; it returns the two base URLs and an API key.
func limitedServer(t *testing.T, lim server.HTTPLimits) (producerURL, internalURL, key string) {
	t.Helper()
	ls, err := server.Listen(server.ListenConfig{Producer: "127.0.0.1:0", Internal: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	st := storetest.OpenSQLite(t)
	_, key, err = auth.CreateKey(context.Background(), st, "limits", "acme", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- server.Serve(ctx, server.ServeConfig{Server: server.Config{Store: st, Logger: quiet, Limits: auth.DefaultLimits},
			Listeners: *ls, HTTP: lim, ShutdownTimeout: 5 * time.Second})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return "http://" + ls.Producer.Addr().String(), "http://" + ls.Internal.Addr().String(), key
}

// The limits of these tests: a write timeout below the long poll and the stream below.
var testLimits = server.HTTPLimits{ReadHeader: 2 * time.Second, Read: 500 * time.Millisecond, Write: time.Second,
	Idle: 5 * time.Second, MaxHeaderBytes: 4 << 10}

func TestListenerLimits(t *testing.T) {
	producer, internal, key := limitedServer(t, testLimits)

	t.Run("headers too large", func(t *testing.T) {
		for _, base := range []string{producer, internal} {
			req, _ := http.NewRequest("GET", base+"/healthz", nil)
			// net/http allows MaxHeaderBytes plus 4 KiB of slack.
			req.Header.Set("X-Padding", strings.Repeat("a", testLimits.MaxHeaderBytes+8<<10))
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
				t.Fatalf("%s with %d bytes of headers: %d, want 431", base, testLimits.MaxHeaderBytes+8<<10, res.StatusCode)
			}
		}
		// Headers within the limit pass.
		req, _ := http.NewRequest("GET", producer+"/healthz", nil)
		req.Header.Set("X-Padding", strings.Repeat("a", testLimits.MaxHeaderBytes/2))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("headers within the limit: %d", res.StatusCode)
		}
	})

	t.Run("slow body is cut", func(t *testing.T) {
		// A client that announces a body and sends it a byte at a time, far too slowly.
		c, err := net.Dial("tcp", strings.TrimPrefix(producer, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		fmt.Fprintf(c, "POST /jobs HTTP/1.1\r\nHost: baton\r\nx-api-key: %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{", key)
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					if _, err := c.Write([]byte(" ")); err != nil {
						return
					}
				}
			}
		}()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no answer to the slow body: %v", err)
		}
		body, _ := io.ReadAll(res.Body) // ends with the connection
		took := time.Since(start)
		if res.StatusCode != http.StatusRequestTimeout || took < testLimits.Read || took > 5*time.Second {
			t.Fatalf("slow body: %d %s after %s; want 408 after the read timeout of %s", res.StatusCode, body, took, testLimits.Read)
		}
		if !res.Close && res.Header.Get("Connection") != "close" {
			t.Logf("answer headers: %v", res.Header)
		}
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatal("the connection stayed open after the slow body was refused")
		}
	})

	t.Run("long poll outlasts the write timeout", func(t *testing.T) {
		start := time.Now()
		wait := 2 * testLimits.Write
		res, err := http.Post(internal+"/internal/worker/claim", "application/json",
			strings.NewReader(fmt.Sprintf(`{"worker_id":"w","streams":["nothing-here"],"max_wait_ms":%d}`, wait.Milliseconds())))
		if err != nil {
			t.Fatalf("long poll of %s with a write timeout of %s: %v", wait, testLimits.Write, err)
		}
		defer res.Body.Close()
		var ans map[string]any
		if err := json.NewDecoder(res.Body).Decode(&ans); err != nil || res.StatusCode != http.StatusOK || ans["claimed"] != false {
			t.Fatalf("long poll: %d %v %v", res.StatusCode, ans, err)
		}
		if took := time.Since(start); took < wait {
			t.Fatalf("long poll answered after %s, before its wait of %s", took, wait)
		}
	})

	t.Run("event stream outlasts the write timeout", func(t *testing.T) {
		post := func(base, path, body string) map[string]any {
			t.Helper()
			req, _ := http.NewRequest("POST", base+path, strings.NewReader(body))
			req.Header.Set("x-api-key", key)
			req.Header.Set("Content-Type", "application/json")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			var out map[string]any
			if err := json.NewDecoder(res.Body).Decode(&out); err != nil || res.StatusCode/100 != 2 {
				t.Fatalf("POST %s: %d %v %v", path, res.StatusCode, out, err)
			}
			return out
		}
		job := post(producer, "/jobs", `{"tasks":[{"taskId":"only","name":"sse-q","dependsOn":[]}]}`)
		req, _ := http.NewRequest("GET", producer+"/jobs/"+job["jobId"].(string)+"/events", nil)
		req.Header.Set("x-api-key", key)
		req.Header.Set("Accept", "text/event-stream")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("event stream: %d", res.StatusCode)
		}
		events := make(chan string, 100)
		go func() {
			defer close(events)
			sc := bufio.NewScanner(res.Body)
			for sc.Scan() {
				if name, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
					events <- name
				}
			}
		}()
		next := func() string {
			t.Helper()
			select {
			case e, ok := <-events:
				if !ok {
					t.Fatal("the event stream ended early")
				}
				return e
			case <-time.After(10 * time.Second):
				t.Fatal("no event within 10 s")
			}
			return ""
		}
		if e := next(); e != "Job Created" {
			t.Fatalf("first event %q", e)
		}
		// Let the stream live past the write timeout, then finish the job.
		<-time.After(testLimits.Write + 300*time.Millisecond)
		claim := post(internal, "/internal/worker/claim", `{"worker_id":"w","streams":["sse-q"],"max_wait_ms":0}`)
		body, _ := json.Marshal(map[string]any{"worker_id": "w", "job_id": claim["job_id"], "attempt_id": claim["attempt_id"],
			"lease_token": claim["lease_token"], "result": map[string]any{}})
		post(internal, "/internal/worker/complete", string(body))
		for {
			if e := next(); e == "end" {
				return
			}
		}
	})
}
