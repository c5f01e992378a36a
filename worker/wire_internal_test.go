package worker

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"
)

func TestBackoffHonoursRetryAfter(t *testing.T) {
	unavailable := fmt.Errorf("report: %w", &apiError{Status: http.StatusServiceUnavailable, RetryAfter: 2 * time.Second})
	var b backoff
	for range 3 { // the backoff is below 2 s for its first tries: Retry-After wins
		if d := b.after(unavailable); d != 2*time.Second {
			t.Fatalf("delay after a 503 with Retry-After: 2: %s", d)
		}
	}
	// Without Retry-After, or with a shorter one, the backoff decides.
	b.reset()
	if d := b.after(errors.New("connection refused")); d < minBackoff/2 || d > minBackoff*3/2 {
		t.Fatalf("first delay after a network error: %s", d)
	}
	// An absurd Retry-After is capped.
	if d := b.after(&apiError{Status: http.StatusTooManyRequests, RetryAfter: time.Hour}); d != maxRetryAfter {
		t.Fatalf("delay after Retry-After: 3600: %s, want %s", d, maxRetryAfter)
	}
}

func TestTransientAndGone(t *testing.T) {
	for _, c := range []struct {
		err             error
		transient, gone bool
	}{
		{errors.New("dial tcp: connection refused"), true, false},
		{&apiError{Status: 503}, true, false},
		{&apiError{Status: 500}, true, false},
		{&apiError{Status: 502}, true, false},
		{&apiError{Status: 429}, true, false},
		{&apiError{Status: 408}, true, false},
		{&apiError{Status: 409}, false, true},
		{&apiError{Status: 410}, false, true},
		{&apiError{Status: 404}, false, true},
		{&apiError{Status: 400}, false, false},
		{&apiError{Status: 413}, false, false},
	} {
		if transient(c.err) != c.transient || gone(c.err) != c.gone {
			t.Errorf("%v: transient %v gone %v, want %v %v", c.err, transient(c.err), gone(c.err), c.transient, c.gone)
		}
	}
}
