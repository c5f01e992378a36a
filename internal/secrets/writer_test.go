package secrets

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// writeAll writes each part through a Writer of r and closes it, and returns what reached the
// wrapped writer.
func writeAll(t *testing.T, r *Redactor, parts ...string) string {
	t.Helper()
	var buf bytes.Buffer
	w := r.Writer(&buf)
	for _, p := range parts {
		if n, err := w.Write([]byte(p)); n != len(p) || err != nil {
			t.Fatalf("Write = %d, %v; want %d", n, err, len(p))
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

func TestWriterRedactsASecretSplitAtEveryOffset(t *testing.T) {
	t.Parallel()
	r := canaryRedactor()
	for name, f := range canaryForms(t) {
		text := "line with " + f + " in it\n"
		want := "line with " + Redacted + " in it\n"
		for i := range len(text) + 1 {
			if got := writeAll(t, r, text[:i], text[i:]); got != want {
				t.Errorf("%s split at %d: %q, want %q", name, i, got, want)
			}
		}
		if got := writeAll(t, r, strings.Split(text, "")...); got != want {
			t.Errorf("%s a byte at a time: %q, want %q", name, got, want)
		}
		if got := writeAll(t, r, f, f, "\n"); got != Redacted+Redacted+"\n" && got != Redacted+"\n" {
			t.Errorf("%s twice: %q", name, got)
		}
	}
}

// Two secrets that overlap across a Write's end are both redacted whole.
func TestWriterRedactsOverlappingSecretsAcrossWrites(t *testing.T) {
	t.Parallel()
	r := NewRedactor()
	r.Add("tokenABC")
	r.Add("ABCdefgh")
	text := "x tokenABCdefgh y"
	for i := range len(text) + 1 {
		for j := i; j < len(text)+1; j++ {
			if got := writeAll(t, r, text[:i], text[i:j], text[j:]); got != "x "+Redacted+" y" {
				t.Errorf("split at %d and %d: %q", i, j, got)
			}
		}
	}
}

func TestWriterHoldsNothingBackWithoutSecrets(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	w := NewRedactor().Writer(&buf)
	if _, err := w.Write([]byte("partial line")); err != nil {
		t.Fatal(err)
	}
	if buf.String() != "partial line" {
		t.Errorf("before Close: %q", buf.String())
	}
}

// What a Writer holds back is at most the longest form less one byte, and Close writes it.
func TestWriterHoldsBackLessThanTheLongestForm(t *testing.T) {
	t.Parallel()
	r := canaryRedactor()
	longest := 0
	for _, f := range forms(canary) {
		longest = max(longest, len(f))
	}
	var buf bytes.Buffer
	w := r.Writer(&buf)
	text := strings.Repeat("a log line without a secret\n", 20)
	if _, err := w.Write([]byte(text)); err != nil {
		t.Fatal(err)
	}
	if held := len(text) - buf.Len(); held != longest-1 {
		t.Errorf("held back %d bytes, want %d", held, longest-1)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if buf.String() != text {
		t.Errorf("after Close: %q", buf.String())
	}
}

type failingWriter struct{ err error }

func (f failingWriter) Write([]byte) (int, error) { return 0, f.err }

func TestWriterKeepsTheWrappedWritersError(t *testing.T) {
	t.Parallel()
	broken := errors.New("disk full")
	w := canaryRedactor().Writer(failingWriter{broken})
	long := strings.Repeat("x", 1000)
	if n, err := w.Write([]byte(long)); n != 0 || !errors.Is(err, broken) {
		t.Errorf("Write = %d, %v; want 0, disk full", n, err)
	}
	if _, err := w.Write([]byte("more")); !errors.Is(err, broken) {
		t.Errorf("later Write = %v", err)
	}
	if err := w.Close(); !errors.Is(err, broken) {
		t.Errorf("Close = %v", err)
	}
}

// A run of overlapping occurrences is held back whole while it grows, but not without bound.
func TestWriterBoundsWhatItHoldsBack(t *testing.T) {
	t.Parallel()
	r := NewRedactor()
	r.Add("abab")
	var buf bytes.Buffer
	w := r.Writer(&buf)
	chunk := []byte(strings.Repeat("ab", 512))
	for range 3 * maxHeld / len(chunk) {
		if _, err := w.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if buf.Len() == 0 {
		t.Error("nothing written: the run is held back whole")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if out := buf.String(); strings.ReplaceAll(out, Redacted, "") != "" {
		t.Errorf("after Close: %.100q…", out)
	}
}
