package worker

import (
	"errors"
	"fmt"
)

// Category classifies a failure for the server's retry rule. USER_CODE, INFRASTRUCTURE and
// TIMEOUT are retried by default, DATA_QUALITY and CONFIGURATION are not; an explicit
// Error.Retryable wins over the category's default.
type Category string

// The failure categories a handler can report.
const (
	UserCode       Category = "USER_CODE"
	DataQuality    Category = "DATA_QUALITY"
	Infrastructure Category = "INFRASTRUCTURE"
	Configuration  Category = "CONFIGURATION"
	Timeout        Category = "TIMEOUT"
)

// Error is a handler failure that says what kind it is and whether to retry it. A handler may
// return it wrapped (fmt.Errorf("load rows: %w", err)); the worker finds it with errors.As and
// reports the whole error text as the message.
type Error struct {
	Category  Category // "" means USER_CODE
	Message   string
	Retryable *bool // nil: the category's default
	Err       error // the cause, if any
}

func (e *Error) Error() string {
	switch {
	case e.Message != "":
		return e.Message
	case e.Err != nil:
		return e.Err.Error()
	}
	return string(e.category())
}

func (e *Error) Unwrap() error { return e.Err }

func (e *Error) category() Category {
	if e.Category == "" {
		return UserCode
	}
	return e.Category
}

// Errorf returns an *Error of category c with a formatted message. A %w verb makes the wrapped
// error(s) reachable through errors.Is and errors.As.
func Errorf(c Category, format string, args ...any) *Error {
	err := fmt.Errorf(format, args...)
	e := &Error{Category: c, Message: err.Error()}
	switch err.(type) {
	case interface{ Unwrap() error }, interface{ Unwrap() []error }:
		e.Err = err
	}
	return e
}

// Permanent marks err as not to be retried. An *Error in err's chain keeps its category; any
// other error becomes a USER_CODE failure. Permanent(nil) is nil.
func Permanent(err error) *Error {
	if err == nil {
		return nil
	}
	no := false
	c := UserCode
	var e *Error
	if errors.As(err, &e) {
		c = e.category()
	}
	return &Error{Category: c, Message: err.Error(), Retryable: &no, Err: err}
}

// Why a handler's context was cancelled, as context.Cause(ctx) reports it.
var (
	// ErrCancelRequested: the task or its job was cancelled. Whatever the handler returns then,
	// the attempt is reported as cancelled.
	ErrCancelRequested = errors.New("worker: cancellation requested")
	// ErrLeaseLost: the server no longer counts this attempt as running (it timed out, or another
	// attempt replaced it). An error returned then is not reported.
	ErrLeaseLost = errors.New("worker: lease lost")
	// ErrTimeout: the task's execution timeout passed. The server times the attempt out itself
	// (TIMEOUT, retried by the usual rule); an error returned then is not reported.
	ErrTimeout = errors.New("worker: task timeout passed")
	// ErrShutdown: the worker shut down before the handler returned; the attempt was handed back
	// to the server as a retryable INFRASTRUCTURE failure.
	ErrShutdown = errors.New("worker: shut down before the task finished")
)
