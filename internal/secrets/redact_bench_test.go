package secrets

import (
	"fmt"
	"testing"
)

func BenchmarkRedact(b *testing.B) {
	line := `time=2026-11-29T10:00:00.000Z level=INFO msg="task claimed" task=0192f0a4-7f3e-7c1d-b2a1-4be1c2d3e4f5 attempt=2 queue=default pipeline=monad job=extract worker=w-17`
	for _, n := range []int{0, 1, 20} {
		r := NewRedactor()
		for i := range n {
			r.Add(fmt.Sprintf("secret-value-%04d-abcdefghijkl", i))
		}
		b.Run(fmt.Sprintf("%d secrets, none in the line", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = r.Redact(line)
			}
		})
		if n > 0 {
			with := line + " key=secret-value-0000-abcdefghijkl"
			b.Run(fmt.Sprintf("%d secrets, one in the line", n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					_ = r.Redact(with)
				}
			})
		}
	}
}
