package secrets

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// canaryForms are the texts the canary takes in a log line, each of which a Redactor that knows
// the canary must redact, computed here apart from the package's own list.
func canaryForms(t *testing.T) map[string]string {
	t.Helper()
	b := []byte(canary)
	marshal, err := json.Marshal(canary)
	if err != nil {
		t.Fatal(err)
	}
	var noHTML bytes.Buffer
	enc := json.NewEncoder(&noHTML)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(canary); err != nil {
		t.Fatal(err)
	}
	forms := map[string]string{
		"value":             canary,
		"base64":            base64.StdEncoding.EncodeToString(b),
		"base64 raw":        base64.RawStdEncoding.EncodeToString(b),
		"base64 url":        base64.URLEncoding.EncodeToString(b),
		"base64 url raw":    base64.RawURLEncoding.EncodeToString(b),
		"query escape":      url.QueryEscape(canary),
		"path escape":       url.PathEscape(canary),
		"json":              strings.Trim(string(marshal), `"`),
		"json without html": strings.Trim(strings.TrimSpace(noHTML.String()), `"`),
		"go quoted":         strings.Trim(strconv.Quote(canary), `"`),
		"hex":               hex.EncodeToString(b),
		"hex upper":         strings.ToUpper(hex.EncodeToString(b)),
	}
	// The canary is chosen so that the forms differ: a form equal to another tests nothing new.
	seen := map[string]string{}
	for name, f := range forms {
		if other, ok := seen[f]; ok {
			t.Fatalf("the canary's %s and %s forms are the same", name, other)
		}
		seen[f] = name
	}
	return forms
}

func canaryRedactor() *Redactor {
	r := NewRedactor()
	r.Add(canary)
	return r
}

func TestRedactReplacesEachFormOfAValue(t *testing.T) {
	t.Parallel()
	r := canaryRedactor()
	for name, f := range canaryForms(t) {
		if got, want := r.Redact("before "+f+" after"), "before "+Redacted+" after"; got != want {
			t.Errorf("%s: Redact = %q, want %q", name, got, want)
		}
		if got := r.Redact(f + f); got != Redacted+Redacted && got != Redacted {
			t.Errorf("%s twice: Redact = %q", name, got)
		}
		if got, want := string(r.RedactBytes([]byte("<"+f+">"))), "<"+Redacted+">"; got != want {
			t.Errorf("%s: RedactBytes = %q, want %q", name, got, want)
		}
	}
}

// Inside a longer base64 text the value starts at one of three bit alignments: what the value
// alone decides of the encoding is redacted, and only the characters it shares with its
// neighbours stay.
func TestRedactFindsAValueInsideLongerBase64(t *testing.T) {
	t.Parallel()
	r := canaryRedactor()
	n := len(canary)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		for p := range 6 {
			for s := range 4 {
				text := enc.EncodeToString([]byte("PQRSTU"[:p] + canary + "vwx"[:s]))
				first, last := (8*p+5)/6, 8*(p+n)/6
				got := r.Redact(text)
				rest, ok := strings.CutPrefix(got, text[:first]+Redacted)
				if !ok || !strings.HasSuffix(text, rest) || len(rest) > len(text)-last {
					t.Errorf("%d bytes before, %d after: Redact(%q) = %q, want %q%s and at most the last %d characters",
						p, s, text, got, text[:first], Redacted, len(text)-last)
				}
			}
		}
	}
}

func TestRedactIgnoresShortValues(t *testing.T) {
	t.Parallel()
	r := NewRedactor()
	for _, v := range []string{"", "a", "abc"} {
		r.Add(v)
	}
	if got := r.Redact("a abc abcd"); got != "a abc abcd" {
		t.Errorf("Redact = %q", got)
	}
	r.Add("abcd")
	if got := r.Redact("a abc abcd"); got != "a abc "+Redacted {
		t.Errorf("Redact = %q", got)
	}
}

// Occurrences that overlap (two secrets sharing a part) are redacted as one: no part of either
// is left.
func TestRedactMergesOverlappingSecrets(t *testing.T) {
	t.Parallel()
	var r Redactor // the zero value is ready
	r.Add("tokenABC")
	r.Add("ABCdefgh")
	r.Add("token")
	r.Add("tokenABCdefghXYZ")
	tests := map[string]string{
		"tokenABCdefgh":       Redacted,
		"x tokenABCdefgh y":   "x " + Redacted + " y",
		"tokenABCdefghXYZ!":   Redacted + "!",
		"token tokenABC":      Redacted + " " + Redacted,
		"ABCdefghABCdefgh":    Redacted + Redacted,
		"tokenABtokenABCdefg": Redacted + "AB" + Redacted + "defg",
	}
	for in, want := range tests {
		if got := r.Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRedactAllocatesNothingWithoutASecretInTheText(t *testing.T) {
	line := "level=INFO msg=\"task claimed\" task=0192f0a4-7f3e-7c1d-b2a1-4be1c2d3e4f5 attempt=2"
	b := []byte(line)
	r := NewRedactor()
	check := func(when string) {
		if n := testing.AllocsPerRun(100, func() { _ = r.Redact(line) }); n != 0 {
			t.Errorf("%s: Redact allocates %v times", when, n)
		}
		if n := testing.AllocsPerRun(100, func() { _ = r.RedactBytes(b) }); n != 0 {
			t.Errorf("%s: RedactBytes allocates %v times", when, n)
		}
		if got := r.RedactBytes(b); &got[0] != &b[0] {
			t.Errorf("%s: RedactBytes returned a copy", when)
		}
	}
	check("nothing added")
	r.Add(canary)
	r.Add("another-secret-value")
	check("secrets added")
}

func TestRedactBytesLeavesItsArgumentAlone(t *testing.T) {
	t.Parallel()
	r := canaryRedactor()
	b := []byte("x " + canary + " y")
	got := r.RedactBytes(b)
	if string(got) != "x "+Redacted+" y" || string(b) != "x "+canary+" y" {
		t.Errorf("RedactBytes = %q, argument now %q", got, b)
	}
}

func TestRedactorIsSafeForConcurrentUse(t *testing.T) {
	t.Parallel()
	r := NewRedactor()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 20 {
				v := fmt.Sprintf("secret-%d-%d", i, j)
				r.Add(v)
				if got := r.Redact("<" + v + ">"); got != "<"+Redacted+">" {
					t.Errorf("Redact after Add(%q) = %q", v, got)
				}
			}
		})
	}
	wg.Wait()
}
