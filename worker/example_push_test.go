package worker_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
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
