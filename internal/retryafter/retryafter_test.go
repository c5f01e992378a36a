package retryafter

import (
	"net/http"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		v    string
		want time.Duration
	}{{"", 0}, {"2", 2 * time.Second}, {" 5 ", 5 * time.Second}, {"-1", 0}, {"soon", 0},
		{time.Now().Add(-time.Minute).UTC().Format(http.TimeFormat), 0}} {
		if got := Parse(c.v); got != c.want {
			t.Errorf("Retry-After %q: %s, want %s", c.v, got, c.want)
		}
	}
	date := time.Now().Add(30 * time.Second).UTC().Format(http.TimeFormat)
	if got := Parse(date); got < 28*time.Second || got > 30*time.Second {
		t.Errorf("Retry-After %q: %s, want about 30 s", date, got)
	}
}
