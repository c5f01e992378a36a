package api

// The task-scoped dialect (docs/contracts/task-scoped.md), served on the public listener: the same
// four fenced operations and bodies as the internal dialect (internal.go), callable by untrusted
// code. A call must carry its attempt's capability token in X-Trace-Task-Capability (401 without a
// valid one), and the body's {task_id, attempt, lease_token} must be the token's (403 otherwise)
// before the core checks them against the live lease (409/410). Its routes are in the route table
// (routes.go).

// capabilityHeader carries the task-scoped dialect's capability token.
const capabilityHeader = "X-Trace-Task-Capability"
