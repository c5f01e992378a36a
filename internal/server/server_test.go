package server_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/server"
	"github.com/baton-dev/baton/internal/service"
	"github.com/baton-dev/baton/internal/sink"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

var quiet = slog.New(slog.DiscardHandler)

var errRollback = errors.New("rollback")

// unsent counts the outbox messages not yet marked sent, changing nothing.
func unsent(t *testing.T, st store.Store) int {
	t.Helper()
	var n int
	err := st.InTx(t.Context(), func(tx store.Tx) error {
		msgs, err := tx.OutboxClaim(t.Context(), store.OutboxClaimParams{Now: time.Now().Add(time.Hour), Limit: 1000})
		n = len(msgs)
		if err != nil {
			return err
		}
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		t.Fatal(err)
	}
	return n
}

// A started server runs its services: the relay marks a new task's wake-up sent without anyone
// calling it, and the handlers answer. Stop ends them; a second Stop does nothing, and the server
// does not start again.
func TestServerRunsItsServicesUntilStopped(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		s, err := server.New(server.Config{Store: st, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		stopped := false
		defer func() {
			if !stopped {
				s.Stop()
			}
		}()
		if err := s.Start(t.Context()); !errors.Is(err, service.ErrStarted) {
			t.Fatalf("second Start: %v, want service.ErrStarted", err)
		}
		job, err := s.Dispatcher.CreateJob(t.Context(), dispatch.CreateJobParams{Tenant: "acme",
			Tasks: []lifecycle.TaskSpec{{Key: "a", Name: "work"}}})
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for unsent(t, st) > 0 {
			if time.Now().After(deadline) {
				t.Fatal("the relay did not mark the task's wake-up sent")
			}
			time.Sleep(10 * time.Millisecond)
		}
		_, tasks, err := s.Dispatcher.GetJob(t.Context(), "acme", job.Job.ID)
		if err != nil || len(tasks) != 1 {
			t.Fatalf("the job's tasks: %v %v", tasks, err)
		}
		internal := httptest.NewServer(s.InternalHandler())
		res, err := http.Post(internal.URL+"/internal/task-claim", "application/json", strings.NewReader(`{"worker_id":"w","task_id":"`+tasks[0].ID+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || !strings.Contains(string(body), `"status":"Claimed"`) {
			t.Errorf("claim through the internal handler: %d %s", res.StatusCode, body)
		}
		s.Drain()
		internal.Close()
		s.Stop()
		s.Stop()
		stopped = true
		if err := s.Start(context.Background()); !errors.Is(err, service.ErrStarted) {
			t.Fatalf("Start after Stop: %v, want service.ErrStarted", err)
		}
	})
}

func TestServerConfigRefusals(t *testing.T) {
	if _, err := server.New(server.Config{}); err == nil {
		t.Error("a server without a store was built")
	}
	st := storetest.OpenSQLite(t)
	if _, err := server.New(server.Config{Store: st, Logger: quiet, Sink: &sink.Config{}}); err == nil || !strings.Contains(err.Error(), "sink needs") {
		t.Errorf("a sink without object storage or a data database: %v", err)
	}
	s, err := server.New(server.Config{Store: st, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	s.Stop() // before Start: safe, and final
	if err := s.Start(t.Context()); !errors.Is(err, service.ErrStarted) {
		t.Fatalf("Start after Stop: %v, want service.ErrStarted", err)
	}
}
