package secrets

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
)

// Handler wraps h so that every record's message, and every attribute's key and value, pass
// through Redact before h sees them: strings, errors (their text), any other value (its %v text,
// after a slog.LogValuer is resolved; a []byte as its text), groups recursively, and the
// attributes and group names given to WithAttrs and WithGroup.
//
// Values of kind Any therefore reach h as strings, whether or not r knows a secret yet, so that
// a log's shape does not change when one is added. Numbers, booleans, times and durations pass
// as they are.
//
// The attributes given to WithAttrs are kept as given and handed to h redacted with the secrets
// r knows when a record is handled: a logger built before a secret was added does not leak it.
func (r *Redactor) Handler(h slog.Handler) slog.Handler {
	return &handler{r: r, base: h}
}

type handler struct {
	r     *Redactor
	base  slog.Handler
	ops   []handlerOp // the WithGroup and WithAttrs calls since base, in order, as given
	built atomic.Pointer[builtHandler]
}

// handlerOp is one WithGroup (group set) or WithAttrs (attrs set) call.
type handlerOp struct {
	group string
	attrs []slog.Attr
}

// builtHandler is base with the ops applied, redacted with the secrets of one matcher.
type builtHandler struct {
	m *matcher
	h slog.Handler
}

// current returns base with the ops applied, redacted with the secrets r knows now. It is built
// again only after r has learned a secret.
func (h *handler) current() slog.Handler {
	m := h.r.m.Load()
	if b := h.built.Load(); b != nil && b.m == m {
		return b.h
	}
	out := h.base
	for _, op := range h.ops {
		if op.attrs == nil {
			out = out.WithGroup(h.r.Redact(op.group))
		} else {
			out = out.WithAttrs(h.r.attrs(op.attrs))
		}
	}
	h.built.Store(&builtHandler{m: m, h: out})
	return out
}

func (h *handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.current().Enabled(ctx, level)
}

func (h *handler) Handle(ctx context.Context, rec slog.Record) error {
	out := slog.NewRecord(rec.Time, rec.Level, h.r.Redact(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.r.attr(a))
		return true
	})
	return h.current().Handle(ctx, out)
}

func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return h
	}
	return h.with(handlerOp{attrs: slices.Clone(attrs)})
}

func (h *handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return h.with(handlerOp{group: name})
}

func (h *handler) with(op handlerOp) *handler {
	return &handler{r: h.r, base: h.base, ops: append(slices.Clip(h.ops), op)}
}

// attrs returns the attributes redacted.
func (r *Redactor) attrs(as []slog.Attr) []slog.Attr {
	out := make([]slog.Attr, len(as))
	for i, a := range as {
		out[i] = r.attr(a)
	}
	return out
}

// attr returns a redacted, its value resolved.
func (r *Redactor) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		v = slog.StringValue(r.Redact(v.String()))
	case slog.KindGroup:
		v = slog.GroupValue(r.attrs(v.Group())...)
	case slog.KindAny:
		v = slog.StringValue(r.Redact(anyText(v.Any())))
	}
	return slog.Attr{Key: r.Redact(a.Key), Value: v}
}

// anyText is the text of a value of kind Any: a byte slice's bytes, or else its %v text (an
// error's message, a Stringer's String).
func anyText(v any) string {
	if b, ok := v.([]byte); ok {
		return string(b)
	}
	return fmt.Sprint(v)
}
