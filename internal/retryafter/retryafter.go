// Package retryafter reads the Retry-After header of an HTTP answer, for the clients of Baton's
// APIs (the producer client and the worker SDK).
package retryafter

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Parse reads a Retry-After value: a number of seconds or an HTTP date. It returns 0 for none,
// a negative number, a date in the past, or a value it cannot read.
func Parse(v string) time.Duration {
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && secs >= 0 {
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}
