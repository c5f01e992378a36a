package lifecycle

import (
	"math"
	"time"
)

// TaskStatus is a task's state in the store.
type TaskStatus string

const (
	Waiting   TaskStatus = "waiting"   // some parent has not completed
	Pending   TaskStatus = "pending"   // ready to claim, maybe backing off until available_at
	Running   TaskStatus = "running"   // leased to a worker
	Completed TaskStatus = "completed" // terminal
	Failed    TaskStatus = "failed"    // terminal, dead-lettered
	Canceled  TaskStatus = "canceled"  // terminal
	Skipped   TaskStatus = "skipped"   // terminal: a parent failed, was canceled or skipped
)

// Terminal reports whether no further transition happens without a resume.
func (s TaskStatus) Terminal() bool {
	switch s {
	case Completed, Failed, Canceled, Skipped:
		return true
	}
	return false
}

// Unsuccessful reports whether s is terminal without having completed; such a task's descendants
// are skipped.
func (s TaskStatus) Unsuccessful() bool {
	return s == Failed || s == Canceled || s == Skipped
}

// JobStatus is a job's state as the producer API reports it.
type JobStatus string

const (
	JobProcessing     JobStatus = "processing"
	JobCompleted      JobStatus = "completed"
	JobPartialFailure JobStatus = "partial_failure"
	JobCanceled       JobStatus = "canceled"
)

// FinishedJobStatus is the status of a job whose tasks are all terminal
// (docs/lifecycle.md#job-status-and-resume). A job whose every task completed is completed even if
// a cancel arrived too late to stop any of them.
func FinishedJobStatus(cancelRequested bool, allCompleted bool) JobStatus {
	switch {
	case allCompleted:
		return JobCompleted
	case cancelRequested:
		return JobCanceled
	default:
		return JobPartialFailure
	}
}

// Category classifies a failure; it decides the default retry behaviour
// (docs/lifecycle.md#retries).
type Category string

const (
	UserCode       Category = "USER_CODE"
	DataQuality    Category = "DATA_QUALITY"
	Infrastructure Category = "INFRASTRUCTURE"
	Configuration  Category = "CONFIGURATION"
	Timeout        Category = "TIMEOUT"
	Cancelled      Category = "CANCELLED"
)

// Categories lists every valid category.
var Categories = []Category{UserCode, DataQuality, Infrastructure, Configuration, Timeout, Cancelled}

// Valid reports whether c is a known category.
func (c Category) Valid() bool {
	for _, k := range Categories {
		if c == k {
			return true
		}
	}
	return false
}

// RetryableByDefault reports the default for c (docs/lifecycle.md#retries).
func (c Category) RetryableByDefault() bool {
	switch c {
	case UserCode, Infrastructure, Timeout:
		return true
	}
	return false
}

// Reasons recorded with failures the dispatcher itself detects.
const (
	ReasonHeartbeatTimeout = "HEARTBEAT_TIMEOUT"
	ReasonExecutionTimeout = "EXECUTION_TIMEOUT"
	ReasonCancelTimeout    = "CANCEL_TIMEOUT"
)

// ShouldRetry is the retry rule (docs/lifecycle.md#retries): a failure is retried iff it is
// retryable (the explicit flag wins over the category's default) and the attempts used in this run
// are fewer than maxAttempts.
func ShouldRetry(c Category, explicit *bool, attemptsUsed, maxAttempts int) bool {
	retryable := c.RetryableByDefault()
	if explicit != nil {
		retryable = *explicit
	}
	return retryable && attemptsUsed < maxAttempts
}

// Backoff is the delay before retrying after the given attempt (1-based):
// min(max, base·2^(attempt-1)) scaled by a jitter factor in [0.5, 1.5). jitter is a uniform sample
// in [0, 1).
func Backoff(attempt int, base, max time.Duration, jitter float64) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := float64(max)
	if exp := float64(base) * math.Pow(2, float64(attempt-1)); exp < d {
		d = exp
	}
	return time.Duration(d * (0.5 + jitter))
}
