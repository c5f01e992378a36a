package dispatch

import (
	"errors"

	"github.com/baton-dev/baton/internal/metrics"
	"github.com/baton-dev/baton/internal/store"
)

// The dispatcher's metrics (Config.Metrics): transitions are counted by the public methods once
// their transaction committed or failed, with their outcome; what a transaction did to retries,
// dead letters and expiries is tallied in its changes and recorded only once it committed.

// count counts one transition of kind k that ended with err.
func (d *Dispatcher) count(k metrics.Kind, err error) {
	d.cfg.Metrics.Transitions(k, outcomeOf(err), 1)
}

// countClaims counts the claims a claim call made (one refused or failed call when err is set)
// and each claimed task's hand-off: from the time it became claimable to its claim.
func (d *Dispatcher) countClaims(claims []*Claim, err error) {
	m := d.cfg.Metrics
	if m == nil {
		return
	}
	if err != nil {
		m.Transitions(metrics.Claim, outcomeOf(err), 1)
		return
	}
	m.Transitions(metrics.Claim, metrics.OK, len(claims))
	for _, c := range claims {
		m.HandOff(c.Task.StartedAt.Sub(c.Task.AvailableAt))
	}
}

// reportKind is the kind of transition a worker's report is, by its outcome.
func reportKind(p *CompleteParams) metrics.Kind {
	switch p.Outcome {
	case store.OutcomeFailed:
		return metrics.Fail
	case store.OutcomeCanceled:
		return metrics.Stop
	}
	return metrics.Complete
}

// outcomeOf classifies a transition's error: nil is ok; the rules' refusals (a lost lease, a stale
// attempt, a task or job in the wrong state, a bad argument) are refused; anything else (the
// database, a canceled request) is an error.
func outcomeOf(err error) metrics.Outcome {
	if err == nil {
		return metrics.OK
	}
	for _, r := range refusals {
		if errors.Is(err, r) {
			return metrics.Refused
		}
	}
	var (
		mismatch   *AttemptMismatchError
		terminal   *TerminalError
		notClaimed *NotClaimedError
		invalid    *InvalidError
		validation *ValidationError
	)
	if errors.As(err, &mismatch) || errors.As(err, &terminal) || errors.As(err, &notClaimed) ||
		errors.As(err, &invalid) || errors.As(err, &validation) {
		return metrics.Refused
	}
	return metrics.Error
}

// refusals are the sentinel errors of outcomeOf's refused.
var refusals = []error{ErrLeaseMismatch, ErrTaskExpired, ErrOutcomeConflict, ErrCancelRequested, ErrTaskNotFound,
	ErrJobNotFound, ErrJobFinished, ErrJobNotFinished, ErrNothingToResume, ErrIdempotencyMismatch}
