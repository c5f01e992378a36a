package dispatch

import (
	"errors"
	"fmt"
	"strings"

	"github.com/baton-dev/baton/internal/lifecycle"
)

var (
	ErrJobNotFound  = errors.New("job not found")
	ErrTaskNotFound = errors.New("task not found")
	// ErrJobFinished: the job is finished (or being canceled) and takes no new tasks or cancels.
	ErrJobFinished = errors.New("job already finished")
	// ErrJobNotFinished: only a finished job can be resumed.
	ErrJobNotFinished = errors.New("job is still processing")
	// ErrNothingToResume: every task of the job completed.
	ErrNothingToResume = errors.New("job has no failed, canceled or skipped tasks to resume")
	// ErrLeaseMismatch: the lease token is not the current attempt's (docs/lifecycle.md#fencing).
	ErrLeaseMismatch = errors.New("lease token does not match the current attempt")
	// ErrTaskExpired: the attempt timed out or was given up on; the worker must abort
	// (docs/lifecycle.md#heartbeats-and-expiry).
	ErrTaskExpired = errors.New("task attempt expired")
	// ErrCancelRequested: the attempt must not start because its task's cancellation was requested.
	ErrCancelRequested = errors.New("task cancellation requested")
	// ErrOutcomeConflict: the attempt already reported a different outcome.
	ErrOutcomeConflict = errors.New("attempt already reported a different outcome")
	// ErrIdempotencyMismatch: the idempotency key was used for a different request.
	ErrIdempotencyMismatch = errors.New("idempotency key already used with a different request")
	// ErrInvalidCursor: a list cursor that this server did not issue.
	ErrInvalidCursor = errors.New("invalid cursor")
)

// ValidationError lists what is wrong with a submission, in the validator's order and wording
// (lifecycle.ValidateDAG).
type ValidationError struct{ Errors []string }

func (e *ValidationError) Error() string { return strings.Join(e.Errors, "; ") }

// InvalidError is a bad argument to a transition other than a DAG (e.g. an unknown error category).
type InvalidError struct{ Message string }

func (e *InvalidError) Error() string { return e.Message }

// ForbiddenError: the attempt is the current one, but what it asks for is not its to do (such as
// publishing into a buffered dataset that its job does not write).
type ForbiddenError struct{ Message string }

func (e *ForbiddenError) Error() string { return e.Message }

// ConflictError: the report contradicts what is stored or current (a dataset version registered
// with other values, a batch of a dataset version that is no longer current). Nothing of the
// report is applied; answered 409 with Code as the internal dialects' error code.
type ConflictError struct{ Code, Message string }

func (e *ConflictError) Error() string { return e.Message }

// AttemptMismatchError: the call names an attempt other than the task's current one
// (docs/lifecycle.md#fencing).
type AttemptMismatchError struct{ Expected, Received int }

func (e *AttemptMismatchError) Error() string {
	return fmt.Sprintf("attempt mismatch: current attempt is %d, got %d", e.Expected, e.Received)
}

// TerminalError: the task already ended; the worker must not run or report it.
type TerminalError struct{ State lifecycle.TaskStatus }

func (e *TerminalError) Error() string { return fmt.Sprintf("task already %s", e.State) }

// NotClaimedReason says why a claim did not take a task (the internal dialect's reasons plus three
// more precise ones for the states it does not name).
type NotClaimedReason string

const (
	NotClaimedAlreadyRunning NotClaimedReason = "AlreadyRunning"
	NotClaimedCompleted      NotClaimedReason = "Completed"
	NotClaimedCanceled       NotClaimedReason = "Canceled"
	NotClaimedNotFound       NotClaimedReason = "NotFound"
	NotClaimedFailed         NotClaimedReason = "Failed"
	NotClaimedSkipped        NotClaimedReason = "Skipped"
	NotClaimedNotReady       NotClaimedReason = "NotReady" // waiting for parents or backing off
)

// NotClaimedError is a claim's refusal (docs/lifecycle.md#claim): the worker must not run the task.
type NotClaimedError struct{ Reason NotClaimedReason }

func (e *NotClaimedError) Error() string { return "task not claimed: " + string(e.Reason) }

func notClaimedReason(s lifecycle.TaskStatus) NotClaimedReason {
	switch s {
	case lifecycle.Running:
		return NotClaimedAlreadyRunning
	case lifecycle.Completed:
		return NotClaimedCompleted
	case lifecycle.Canceled:
		return NotClaimedCanceled
	case lifecycle.Failed:
		return NotClaimedFailed
	case lifecycle.Skipped:
		return NotClaimedSkipped
	}
	return NotClaimedNotReady
}
