package api

import (
	"net/http"
	"strconv"
	"time"

	"github.com/baton-dev/baton/internal/request"
)

// DefaultMaxPollsPerWorker is how many claim long polls one worker id may have waiting at once.
// One is all a worker needs: a claim asks for as many tasks as the worker has free slots
// (claim-batch takes up to 256), and the Go SDK holds one per WithBatchSize, 1 by default. Eight
// leaves room for a client that polls per thread or per group of queues, and for a few processes
// that share an id by mistake, while a client that loops without waiting for its answers cannot
// make the server hold more than eight goroutines, connections and claims per wake-up for it.
const DefaultMaxPollsPerWorker = 8

// pollRetryAfter is the Retry-After, in seconds, of a claim refused for too many waiting polls.
const pollRetryAfter = 1

// newPollCounter counts the waiting long polls of each worker id: max of them (0:
// DefaultMaxPollsPerWorker, negative: no cap).
func newPollCounter(max int) *request.Waiting {
	if max == 0 {
		max = DefaultMaxPollsPerWorker
	}
	return request.NewWaiting(max)
}

// longPoll admits a claim of workerID that may wait up to wait: it refuses it with a 429 when
// the worker already has its most claims waiting, and otherwise lets the answer be written
// past the listener's write timeout (request.HoldOpen). A claim that does not wait is neither
// counted nor refused. The caller calls release once the claim is answered (or refused for
// another reason).
func (s *Server) longPoll(w http.ResponseWriter, workerID string, wait time.Duration) (release func(), err error) {
	if wait <= 0 {
		return func() {}, nil
	}
	if !s.polls.Acquire(workerID) {
		he := request.Errorf(http.StatusTooManyRequests, "worker_id %q already has %d claims waiting, the most one worker may have; "+
			"send the next one when one of them is answered (one claim-batch can claim for every free slot)", workerID, s.polls.Max())
		he.Header = http.Header{"Retry-After": {strconv.Itoa(pollRetryAfter)}}
		return nil, he
	}
	request.HoldOpen(w, wait)
	return func() { s.polls.Release(workerID) }, nil
}
