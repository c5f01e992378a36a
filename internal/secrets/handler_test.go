package secrets

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// valuer is a slog.LogValuer whose value is resolved only when a record is handled.
type valuer struct{ s string }

func (v valuer) LogValue() slog.Value { return slog.StringValue("resolved " + v.s) }

// endpoint is a value logged as itself, printed with %v.
type endpoint struct {
	Host string
	Key  string
}

// assertNoForm fails when out holds any form of the canary, or when one of its lines lacks
// Redacted.
func assertNoForm(t *testing.T, what, out string, forms map[string]string) {
	t.Helper()
	for name, f := range forms {
		if strings.Contains(out, f) {
			t.Errorf("%s: the canary's %s form is in %q", what, name, out)
		}
	}
	for line := range strings.Lines(out) {
		if !strings.Contains(line, Redacted) {
			t.Errorf("%s: %q has nothing redacted", what, line)
		}
	}
}

func TestHandlerRedactsEveryPartOfARecord(t *testing.T) {
	t.Parallel()
	forms := canaryForms(t)
	logs := map[string]func(log *slog.Logger, f string){
		"message":      func(log *slog.Logger, f string) { log.Info("connecting with " + f) },
		"string attr":  func(log *slog.Logger, f string) { log.Info("m", "url", "https://rpc/?key="+f) },
		"error attr":   func(log *slog.Logger, f string) { log.Info("m", "err", errors.New("dial "+f+": refused")) },
		"nested group": func(log *slog.Logger, f string) { log.Info("m", slog.Group("a", slog.Group("b", "key", f))) },
		"WithAttrs":    func(log *slog.Logger, f string) { log.With("key", f).Info("m") },
		"WithAttrs group": func(log *slog.Logger, f string) {
			log.With(slog.Group("g", "key", f)).Info("m")
		},
		"WithGroup":  func(log *slog.Logger, f string) { log.WithGroup("rpc").Info("m", "key", f) },
		"group name": func(log *slog.Logger, f string) { log.WithGroup("g"+f).Info("m", "n", 1) },
		"struct":     func(log *slog.Logger, f string) { log.Info("m", "endpoint", endpoint{Host: "rpc", Key: f}) },
		"pointer":    func(log *slog.Logger, f string) { log.Info("m", "endpoint", &endpoint{Host: "rpc", Key: f}) },
		"bytes":      func(log *slog.Logger, f string) { log.Info("m", "body", []byte(f)) },
		"LogValuer":  func(log *slog.Logger, f string) { log.Info("m", "v", valuer{f}) },
		"key":        func(log *slog.Logger, f string) { log.Info("m", f, 1) },
		"Stringer":   func(log *slog.Logger, f string) { log.Info("m", "d", stringer(f)) },
		"map":        func(log *slog.Logger, f string) { log.Info("m", "headers", map[string]string{"Authorization": f}) },
		"LogAttrs": func(log *slog.Logger, f string) {
			log.LogAttrs(context.Background(), slog.LevelWarn, "m", slog.String("k", f))
		},
		"any of text": func(log *slog.Logger, f string) { log.Info("m", "k", any(f)) },
	}
	handlers := map[string]func(*bytes.Buffer) slog.Handler{
		"json": func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
		"text": func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
	}
	r := canaryRedactor()
	for hname, newHandler := range handlers {
		for lname, log := range logs {
			for fname, f := range forms {
				var buf bytes.Buffer
				log(slog.New(r.Handler(newHandler(&buf))), f)
				assertNoForm(t, hname+", "+lname+", "+fname, buf.String(), forms)
			}
		}
	}
}

type stringer string

func (s stringer) String() string { return "stringer " + string(s) }

// A logger built before a secret was known does not leak it once it is.
func TestHandlerRedactsAttrsGivenBeforeTheSecretWasAdded(t *testing.T) {
	t.Parallel()
	r := NewRedactor()
	var buf bytes.Buffer
	log := slog.New(r.Handler(slog.NewJSONHandler(&buf, nil))).With("url", "https://rpc/?key="+canary).WithGroup("g").With("k", canary)
	log.Info("before the secret is known")
	buf.Reset()
	r.Add(canary)
	log.Info("m")
	assertNoForm(t, "With before Add", buf.String(), canaryForms(t))
}

// What holds no secret reaches the wrapped handler as it was: numbers, durations, booleans and
// times keep their kinds.
func TestHandlerPassesTheRestAsItIs(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	r := canaryRedactor()
	emit := func(wrap func(slog.Handler) slog.Handler) string {
		var buf bytes.Buffer
		h := wrap(slog.NewJSONHandler(&buf, nil))
		h = h.WithAttrs([]slog.Attr{slog.String("service", "dispatch")}).WithGroup("task")
		rec := slog.NewRecord(at, slog.LevelWarn, "lease expired", 0)
		rec.AddAttrs(slog.Int("attempt", 2), slog.Duration("after", time.Second), slog.Bool("retry", true),
			slog.Time("at", at), slog.Float64("f", 1.5), slog.String("id", "t1"), slog.Group("g", slog.Int("n", 1)))
		if err := h.Handle(context.Background(), rec); err != nil {
			t.Fatal(err)
		}
		return buf.String()
	}
	plain := emit(func(h slog.Handler) slog.Handler { return h })
	if redacted := emit(r.Handler); redacted != plain {
		t.Errorf("through the handler: %s\nwant %s", redacted, plain)
	}
}

func TestHandlerAsksTheWrappedHandlerIfEnabled(t *testing.T) {
	t.Parallel()
	h := canaryRedactor().Handler(slog.NewTextHandler(&bytes.Buffer{}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx := context.Background()
	if h.Enabled(ctx, slog.LevelInfo) || !h.WithGroup("g").Enabled(ctx, slog.LevelError) {
		t.Error("Enabled does not follow the wrapped handler's level")
	}
}
