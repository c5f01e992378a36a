package request

import (
	"net/http"
	"sync"
	"time"
)

// Long-lived answers: long polls and event streams outlast the write timeout a listener gives
// ordinary requests, and a client may hold only so many of them waiting at once.

// AnswerWindow is how long a long-lived answer may take to be written once it is ready: past a
// long poll's wait, and for each write of an event stream.
const AnswerWindow = 30 * time.Second

// HoldOpen lets the answer to the request be written until wait plus AnswerWindow from now, past
// the write timeout of the listener (http.Server.WriteTimeout), which bounds ordinary requests.
// The read timeout needs nothing: the server clears the read deadline once the body is read.
func HoldOpen(w http.ResponseWriter, wait time.Duration) {
	// A writer without deadlines (a test's recorder) has no timeout to outlast.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(wait + AnswerWindow))
}

// Waiting counts the waiting requests of each key (a worker id), up to a cap.
type Waiting struct {
	max int // <= 0: no cap
	mu  sync.Mutex
	n   map[string]int
}

// NewWaiting counts up to max waiting requests per key; a max of 0 or less sets no cap.
func NewWaiting(max int) *Waiting {
	return &Waiting{max: max, n: map[string]int{}}
}

// Max is the cap of each key (0 or less: none).
func (c *Waiting) Max() int { return c.max }

// Acquire counts one more waiting request of key, unless it already holds the most it may.
func (c *Waiting) Acquire(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.max > 0 && c.n[key] >= c.max {
		return false
	}
	c.n[key]++
	return true
}

// Release counts one waiting request of key less.
func (c *Waiting) Release(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[key]--; c.n[key] <= 0 {
		delete(c.n, key)
	}
}
