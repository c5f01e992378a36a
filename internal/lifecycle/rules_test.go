package lifecycle

import (
	"testing"
	"time"
)

func TestRule7_RetryDecisionByCategory(t *testing.T) {
	t.Parallel()
	yes, no := true, false
	tests := []struct {
		category     Category
		explicit     *bool
		used, max    int
		wantRetry    bool
		wantDefaults bool
	}{
		{UserCode, nil, 1, 3, true, true},
		{Infrastructure, nil, 1, 3, true, true},
		{Timeout, nil, 1, 3, true, true},
		{DataQuality, nil, 1, 3, false, false},
		{Configuration, nil, 1, 3, false, false},
		{Cancelled, nil, 1, 3, false, false},
		{DataQuality, &yes, 1, 3, true, false},
		{UserCode, &no, 1, 3, false, true},
		{UserCode, nil, 3, 3, false, true},
		{UserCode, &yes, 3, 3, false, true},
		{Timeout, nil, 2, 3, true, true},
	}
	for _, tc := range tests {
		if got := tc.category.RetryableByDefault(); got != tc.wantDefaults {
			t.Errorf("%s default retryable = %v, want %v", tc.category, got, tc.wantDefaults)
		}
		if got := ShouldRetry(tc.category, tc.explicit, tc.used, tc.max); got != tc.wantRetry {
			t.Errorf("ShouldRetry(%s, %v, %d, %d) = %v, want %v", tc.category, tc.explicit, tc.used, tc.max, got, tc.wantRetry)
		}
	}
}

func TestRule7_BackoffBounds(t *testing.T) {
	t.Parallel()
	base, max := 10*time.Second, 10*time.Minute
	tests := []struct {
		attempt int
		nominal time.Duration
	}{
		{0, 10 * time.Second},
		{1, 10 * time.Second},
		{2, 20 * time.Second},
		{3, 40 * time.Second},
		{6, 320 * time.Second},
		{7, 10 * time.Minute},  // 640 s capped at 600 s
		{60, 10 * time.Minute}, // no overflow far past the cap
	}
	for _, tc := range tests {
		lo := Backoff(tc.attempt, base, max, 0)
		hi := Backoff(tc.attempt, base, max, 0.999999)
		mid := Backoff(tc.attempt, base, max, 0.5)
		if lo != tc.nominal/2 {
			t.Errorf("attempt %d: lowest backoff %v, want %v", tc.attempt, lo, tc.nominal/2)
		}
		if hi >= tc.nominal*3/2 || hi < tc.nominal*149/100 {
			t.Errorf("attempt %d: highest backoff %v, want just under %v", tc.attempt, hi, tc.nominal*3/2)
		}
		if mid != tc.nominal {
			t.Errorf("attempt %d: middle backoff %v, want %v", tc.attempt, mid, tc.nominal)
		}
	}
	if got := Backoff(3, 0, max, 0.7); got != 0 {
		t.Errorf("zero base: backoff %v, want 0", got)
	}
}

func TestRule10_FinishedJobStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cancel, allCompleted bool
		want                 JobStatus
	}{
		{false, true, JobCompleted},
		{false, false, JobPartialFailure},
		{true, false, JobCanceled},
		{true, true, JobCompleted},
	}
	for _, tc := range tests {
		if got := FinishedJobStatus(tc.cancel, tc.allCompleted); got != tc.want {
			t.Errorf("FinishedJobStatus(%v, %v) = %s, want %s", tc.cancel, tc.allCompleted, got, tc.want)
		}
	}
}

func TestTaskStatusClasses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		s                      TaskStatus
		terminal, unsuccessful bool
	}{
		{Waiting, false, false},
		{Pending, false, false},
		{Running, false, false},
		{Completed, true, false},
		{Failed, true, true},
		{Canceled, true, true},
		{Skipped, true, true},
	}
	for _, tc := range tests {
		if tc.s.Terminal() != tc.terminal || tc.s.Unsuccessful() != tc.unsuccessful {
			t.Errorf("%s: terminal=%v unsuccessful=%v, want %v %v", tc.s, tc.s.Terminal(), tc.s.Unsuccessful(), tc.terminal, tc.unsuccessful)
		}
	}
}
