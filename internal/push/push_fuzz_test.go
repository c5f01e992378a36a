package push

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jonboulle/clockwork"

	"github.com/baton-dev/baton/internal/pushsig"
)

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// FuzzPushAnswer feeds fuzzed answers of a push target (a status from 200 to 599 and a body) to
// the push dispatcher's delivery, which reads them into the attempt's error. The envelope needs
// no decoding on Baton's side (Baton writes it); the target's answer is what comes back. A 2xx
// must be taken as delivered; anything else must fail with a message that names the target
// without its password or query, gives the status, and quotes at most 200 bytes of the answer on
// one line, valid UTF-8, its white space collapsed. Every delivery is signed: the request the
// target gets must carry the bearer secret and a signature pushsig.Check accepts.
func FuzzPushAnswer(f *testing.F) {
	const (
		secret = "whsec-fuzz"
		url    = "https://robot:hunter2@target.example/run?token=q-secret#frag"
		shown  = "https://robot:xxxxx@target.example/run"
	)
	var status int
	var body []byte
	var sent *http.Request
	var sentBody []byte
	client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent = r
		sentBody, _ = io.ReadAll(r.Body)
		return &http.Response{StatusCode: status, Status: fmt.Sprintf("%d %s", status, http.StatusText(status)),
			Header: http.Header{"Content-Type": {"text/plain"}}, Body: io.NopCloser(bytes.NewReader(body)), Request: r}, nil
	})}
	p := New(nil, Config{Logger: slog.New(slog.DiscardHandler), Targets: map[string]string{"work": url}, Secrets: map[string]string{"work": secret},
		Client: client, Clock: clockwork.NewFakeClockAt(time.Date(2025, 1, 15, 10, 0, 0, 0, time.UTC))})
	target := p.targets["work"]
	if target.invalid != "" {
		f.Fatal(target.invalid)
	}
	envelope := []byte(`{"taskId":"t-1","attempt":1,"input":{"n":7}}` + "\n")

	f.Add(uint16(0), []byte(`{"accepted":true}`))
	f.Add(uint16(4), []byte{})
	f.Add(uint16(300), []byte("<html>\n  <body>Internal   Server\tError</body>\n</html>\n"))
	f.Add(uint16(229), []byte("too many requests, retry later\r\n"))
	f.Add(uint16(302), []byte(strings.Repeat("é", 150)))
	f.Add(uint16(203), []byte("\xff\xfe invalid \xc3 UTF-8 \u2028 line separator \u00a0 nbsp \x00 NUL"))
	f.Add(uint16(100), []byte(strings.Repeat("x", 5000)))
	f.Fuzz(func(t *testing.T, code uint16, answer []byte) {
		status, body = 200+int(code)%400, answer
		got, err := p.post(context.Background(), target, "job-1/t-1/1", "", envelope)
		if sent == nil || !bytes.Equal(sentBody, envelope) || sent.Header.Get("Authorization") != "Bearer "+secret ||
			pushsig.Check(secret, sent.Header.Get(pushsig.TimestampHeader), sentBody, sent.Header.Get(pushsig.SignatureHeader)) != nil {
			t.Fatalf("the delivery was not sent signed: %+v", sent)
		}
		if status < 300 {
			if err != nil || got != status {
				t.Fatalf("a %d answer: %d, %v", status, got, err)
			}
			return
		}
		if err == nil || got != status {
			t.Fatalf("a %d answer was taken as delivered (%d)", status, got)
		}
		msg := err.Error()
		prefix := "push target " + shown + " answered " + strings.TrimSpace(fmt.Sprintf("%d %s", status, http.StatusText(status)))
		quote, ok := strings.CutPrefix(msg, prefix)
		if !ok {
			t.Fatalf("message %q does not start with %q", msg, prefix)
		}
		// The deliverer reads at most 4 KiB of the answer and quotes it as one line of valid UTF-8:
		// whole when it fits in pushSnippetBytes, else its start and "…". (An answer may itself end
		// with "…", so the mark alone does not tell which.)
		read := answer[:min(len(answer), 4<<10)]
		collapsed := strings.Join(strings.FieldsFunc(strings.ToValidUTF8(string(read), ""), unicode.IsSpace), " ")
		if quote == "" {
			if collapsed != "" {
				t.Fatalf("message %q does not quote the answer %q", msg, collapsed)
			}
			return
		}
		quote, ok = strings.CutPrefix(quote, ": ")
		if !ok || quote == "" {
			t.Fatalf("message %q: the answer is not quoted after \": \"", msg)
		}
		if !utf8.ValidString(quote) || strings.HasPrefix(quote, " ") || strings.HasSuffix(quote, " ") || strings.Contains(quote, "  ") ||
			strings.ContainsFunc(quote, func(r rune) bool { return r != ' ' && unicode.IsSpace(r) }) {
			t.Fatalf("the quoted answer %q is not one line of valid UTF-8 with its white space collapsed", quote)
		}
		if len(collapsed) <= pushSnippetBytes {
			if quote != collapsed {
				t.Fatalf("the quoted answer %q is not the whole answer %q", quote, collapsed)
			}
		} else {
			text, cut := strings.CutSuffix(quote, "…")
			if !cut || len(text) > pushSnippetBytes || !strings.HasPrefix(collapsed, text) {
				t.Fatalf("the quoted answer %q is not at most %d bytes of the start of the answer %q and a \"…\"",
					quote, pushSnippetBytes, collapsed)
			}
		}
		if strings.Contains(msg, "hunter2") && !bytes.Contains(answer, []byte("hunter2")) ||
			strings.Contains(msg, "q-secret") && !bytes.Contains(answer, []byte("q-secret")) {
			t.Fatalf("message %q shows the target's password or query", msg)
		}
	})
}
