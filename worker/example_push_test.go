package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/baton-dev/baton/worker"
)

// A push target that takes only Baton's deliveries (baton server --push-secret resize=...).
func ExamplePushAuth() {
	run := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var env struct {
			TaskID, CallbackBaseURL, TaskToken string
		}
		if err := json.NewDecoder(r.Body).Decode(&env); err != nil { // the body as Baton sent it
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusAccepted) // then run the task and report to env.CallbackBaseURL
	})
	http.Handle("POST /run", worker.PushAuth(os.Getenv("RESIZE_PUSH_SECRET"), run))
}

// The same check in a handler that wants to answer refusals itself.
func ExampleVerifyPushRequest() {
	http.HandleFunc("POST /run", func(w http.ResponseWriter, r *http.Request) {
		body, err := worker.VerifyPushRequest(r, os.Getenv("RESIZE_PUSH_SECRET"), 2*time.Minute)
		switch {
		case errors.Is(err, worker.ErrPushUnauthorized):
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		case err != nil:
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		_ = body // the TaskEnvelope JSON
		w.WriteHeader(http.StatusAccepted)
	})
}

// A push target that runs the deliveries of resize (baton server --push-target
// resize=http://HOST:8090/ --push-secret resize=...) with a handler, as a Worker would run them
// claimed, until SIGTERM.
func ExampleNewPushHandler() {
	ph := worker.NewPushHandler(func(ctx context.Context, t *worker.Task) (any, error) {
		var in struct{ Width int }
		if err := json.Unmarshal(t.Input, &in); err != nil {
			return nil, worker.Permanent(err)
		}
		return map[string]any{"width": in.Width}, nil
	}, worker.WithPushSecret(os.Getenv("RESIZE_PUSH_SECRET")), worker.WithPushConcurrency(4))
	srv := &http.Server{Addr: ":8090", Handler: ph}
	go func() { _ = srv.ListenAndServe() }()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	shutdown, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = ph.Shutdown(shutdown) // running tasks finish, or are handed back
	_ = srv.Shutdown(shutdown)
}
