//go:build linux

package sandbox

import "testing"

func needSeccomp(t *testing.T) {
	if !seccompUsable() {
		t.Skip("this kernel has no seccomp filters: system calls are not filtered here")
	}
}

// The seccomp filter refuses what reaches beyond the program's own process: tracing another,
// a namespace, by unshare or by clone's flags, and personalities past Linux's own.
func TestStartFiltersSystemCalls(t *testing.T) {
	needSeccomp(t)
	for _, c := range []struct{ action, arg, want string }{
		{"ptrace", "", "denied: operation not permitted"},
		{"unshare", "", "denied: operation not permitted"},
		{"clone-namespace", "", "denied: fork/exec /proc/self/exe: operation not permitted"},
		{"personality", "4194304", "denied: operation not permitted"}, // ADDR_NO_RANDOMIZE
		{"personality", "4294967295", "ok"},                           // a query
		{"personality", "18446744073709551615", "ok"},                 // -1
		{"personality", "0", "ok"},
	} {
		if got := outcome(t, Policy{}, c.action, c.arg); got != c.want {
			t.Errorf("%s %s: %q, want %q", c.action, c.arg, got, c.want)
		}
	}
}
