package codec

import (
	"net/http"

	"github.com/baton-dev/baton/internal/lifecycle"
)

// InternalStatus is a task status in the internal dialect's words.
func InternalStatus(st lifecycle.TaskStatus) string {
	switch st {
	case lifecycle.Waiting:
		return "Waiting"
	case lifecycle.Pending:
		return "Pending"
	case lifecycle.Running:
		return "Running"
	case lifecycle.Completed:
		return "Completed"
	case lifecycle.Failed:
		return "Failed"
	case lifecycle.Canceled:
		return "Canceled"
	case lifecycle.Skipped:
		return "Skipped"
	}
	return string(st)
}

// StreamStatusName names an HTTP status for the "error" member of dialects that use codes.
func StreamStatusName(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_request"
	case http.StatusUnauthorized:
		return "unauthorized"
	case http.StatusForbidden:
		return "forbidden"
	case http.StatusNotFound:
		return "not_found"
	case http.StatusConflict:
		return "conflict"
	case http.StatusRequestEntityTooLarge:
		return "payload_too_large"
	case http.StatusRequestTimeout:
		return "request_timeout"
	case http.StatusTooManyRequests:
		return "rate_limited"
	case 499:
		return "request_canceled"
	case http.StatusServiceUnavailable:
		return "unavailable"
	}
	if status >= 500 {
		return "internal_error"
	}
	return "error"
}

// CallbackState is a task status in the callback dialect's words. A failed attempt whose retry is
// scheduled (the task is pending again) ended FAILED; willRetry says the rest.
func CallbackState(st lifecycle.TaskStatus) string {
	switch st {
	case lifecycle.Completed:
		return "SUCCEEDED"
	case lifecycle.Canceled, lifecycle.Skipped:
		return "CANCELLED"
	}
	return "FAILED"
}
