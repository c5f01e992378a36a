package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/query/engine"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// A server shut down while a statement runs, one whose time goes to the engine's planner where no
// interrupt reaches, still ends within its grace: the statement is stopped, its client answered
// 503 query_stopped, its audit record written, and its files removed.
func TestServeStopsQueriesWithinItsGrace(t *testing.T) {
	if !engine.Available {
		t.Skip("the query engine needs cgo")
	}
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		spill := t.TempDir()
		f, err := parseServerFlags("--listen", "127.0.0.1:0", "--internal-listen", "127.0.0.1:0", "--shutdown-timeout", "4s",
			"--query-spill-dir", spill, "--query-threads", "1")
		if err != nil {
			t.Fatal(err)
		}
		ls, err := f.bind(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		_, key, err := auth.CreateKey(context.Background(), st, "q", "acme", "", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- serve(ctx, f, ls, st, slog.New(slog.DiscardHandler)) }()

		type answer struct {
			code int
			body map[string]any
		}
		answered := make(chan answer, 1)
		go func() {
			sql := strings.Repeat("SELECT (", 27) + "1" + strings.Repeat(")", 27)
			body, _ := json.Marshal(map[string]any{"sql": sql})
			req, _ := http.NewRequest("POST", "http://"+ls.producer.Addr().String()+"/v1/query", bytes.NewReader(body))
			req.Header.Set("x-api-key", key)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				answered <- answer{code: -1, body: map[string]any{"error": err.Error()}}
				return
			}
			defer res.Body.Close()
			var v map[string]any
			json.NewDecoder(res.Body).Decode(&v)
			answered <- answer{res.StatusCode, v}
		}()
		// The statement runs once the audit has nothing and a worker directory is in use.
		time.Sleep(time.Second)
		start := time.Now()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the server did not shut down")
		}
		if d := time.Since(start); d > 4*time.Second+3*time.Second {
			t.Errorf("the server took %v to shut down, its grace 4s", d)
		}
		a := <-answered
		if a.code != http.StatusServiceUnavailable || a.body["error"] != "query_stopped" {
			t.Errorf("the query in flight: %d %v, want 503 query_stopped", a.code, a.body)
		}
		recs, err := st.QueryAuditList(context.Background(), store.QueryAuditListParams{Tenant: "acme", Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 1 || recs[0].Status != "stopped" {
			var got []string
			for _, r := range recs {
				got = append(got, r.Status)
			}
			t.Errorf("audit records %v, want one stopped", got)
		}
		if left, _ := os.ReadDir(spill); len(left) != 0 {
			t.Errorf("the spill directory holds %d entries after shutdown", len(left))
		}
	})
}
