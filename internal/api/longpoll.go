package api

import (
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Long-lived answers: claim long polls and event streams outlast the write timeout a listener
// gives ordinary requests, and a worker may hold only so many claims waiting at once.

// DefaultMaxPollsPerWorker is how many claim long polls one worker id may have waiting at once.
// One is all a worker needs: a claim asks for as many tasks as the worker has free slots
// (claim-batch takes up to 256), and the Go SDK holds one per WithBatchSize, 1 by default. Eight
// leaves room for a client that polls per thread or per group of queues, and for a few processes
// that share an id by mistake, while a client that loops without waiting for its answers cannot
// make the server hold more than eight goroutines, connections and claims per wake-up for it.
const DefaultMaxPollsPerWorker = 8

// pollRetryAfter is the Retry-After, in seconds, of a claim refused for too many waiting polls.
const pollRetryAfter = 1

// answerWindow is how long a long-lived answer may take to be written once it is ready: past a
// long poll's wait, and for each write of an event stream.
const answerWindow = 30 * time.Second

// pollCounter counts the waiting long polls of each worker id.
type pollCounter struct {
	max int // < 0: no cap
	mu  sync.Mutex
	n   map[string]int
}

func newPollCounter(max int) *pollCounter {
	if max == 0 {
		max = DefaultMaxPollsPerWorker
	}
	return &pollCounter{max: max, n: map[string]int{}}
}

// acquire counts one more waiting poll of workerID, unless it already holds the most it may.
func (c *pollCounter) acquire(workerID string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.max > 0 && c.n[workerID] >= c.max {
		return false
	}
	c.n[workerID]++
	return true
}

func (c *pollCounter) release(workerID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[workerID]--; c.n[workerID] <= 0 {
		delete(c.n, workerID)
	}
}

// longPoll admits a claim of workerID that may wait up to wait: it refuses it with a 429 when
// the worker already has its most claims waiting, and otherwise lets the answer be written
// past the listener's write timeout. A claim that does not wait is neither counted nor refused.
// The caller calls release once the claim is answered (or refused for another reason).
func (s *Server) longPoll(w http.ResponseWriter, workerID string, wait time.Duration) (release func(), err error) {
	if wait <= 0 {
		return func() {}, nil
	}
	if !s.polls.acquire(workerID) {
		he := errorf(http.StatusTooManyRequests, "worker_id %q already has %d claims waiting, the most one worker may have; "+
			"send the next one when one of them is answered (one claim-batch can claim for every free slot)", workerID, s.polls.max)
		he.header = http.Header{"Retry-After": {strconv.Itoa(pollRetryAfter)}}
		return nil, he
	}
	holdOpen(w, wait)
	return func() { s.polls.release(workerID) }, nil
}

// holdOpen lets the answer to the request be written until wait plus answerWindow from now, past
// the write timeout of the listener (http.Server.WriteTimeout), which bounds ordinary requests.
// The read timeout needs nothing: the server clears the read deadline once the body is read.
func holdOpen(w http.ResponseWriter, wait time.Duration) {
	// A writer without deadlines (a test's recorder) has no timeout to outlast.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(wait + answerWindow))
}
