package api

// Seed 003's task-scoped dialect, served on the public listener: the same four fenced operations
// and bodies as the internal dialect (internal.go), callable by untrusted code. A call must carry
// its attempt's capability token in X-Trace-Task-Capability (401 without a valid one), and the
// body's {task_id, attempt, lease_token} must be the token's (403 otherwise) before the core
// checks them against the live lease (409/410).

import "net/http"

// capabilityHeader carries seed 003's capability token.
const capabilityHeader = "X-Trace-Task-Capability"

// registerTaskScoped adds seed 003's routes to the public listener. They are not behind the
// producer API key: the capability token is their credential.
func (s *Server) registerTaskScoped(mux *http.ServeMux) {
	route := func(pattern string, op func(fenceFunc) handler) {
		mux.Handle(pattern, s.serve(s.fencedErrors(s.withTaskToken(capabilityHeader, op(s.tokenFence)))))
	}
	route("POST /v1/task/heartbeat", s.fencedHeartbeat)
	route("POST /v1/task/complete", s.fencedComplete)
	route("POST /v1/task/events", s.fencedEvents)
	route("POST /v1/task/buffer-publish", s.fencedBufferPublish)
}
