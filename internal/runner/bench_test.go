//go:build unix

package runner

import (
	"context"
	"os/exec"
	"testing"
)

// What a child costs: /bin/true run by Run, contained as far as this system allows (its work
// directory, payload and pipes included), against the same program started plainly.

func BenchmarkRunTrue(b *testing.B) {
	b.Logf("isolation: %s", Isolation())
	for b.Loop() {
		if _, err := Run(context.Background(), Spec{Command: []string{"/bin/true"}}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRunTrueUncontained(b *testing.B) {
	for b.Loop() {
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}
