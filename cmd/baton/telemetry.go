package main

import (
	"context"
	"flag"
	"log/slog"
	"strings"
	"time"

	"github.com/baton-dev/baton/internal/telemetry"
)

// traceFlushTimeout bounds how long a process that stops waits for its last spans to be sent.
const traceFlushTimeout = 5 * time.Second

// otlpFlag is --otlp-endpoint: where the process sends its traces, checked when the flag is
// parsed (a bad URL is a usage error). Unset, tracing is off.
type otlpFlag struct {
	endpoint string // as telemetry.ParseEndpoint returns it; "" when unset
	command  string // the command that registered it: server, dev, worker
}

func (o *otlpFlag) String() string { return o.endpoint }

func (o *otlpFlag) Set(v string) error {
	if v == "" {
		o.endpoint = ""
		return nil
	}
	u, err := telemetry.ParseEndpoint(v)
	if err != nil {
		return err
	}
	o.endpoint = u
	return nil
}

// register adds --otlp-endpoint to fs, a command's flag set named "baton <command>".
func (o *otlpFlag) register(fs *flag.FlagSet) {
	o.command = strings.TrimPrefix(fs.Name(), "baton ")
	fs.Var(o, "otlp-endpoint", "send OpenTelemetry traces to this OTLP/HTTP `URL`, e.g. http://localhost:4318 (/v1/traces is added to a URL without a path); unset: no tracing")
}

// start starts tracing as the flag says; stop flushes the spans not sent yet when the process
// stops, logging a failure.
func (o *otlpFlag) start(ctx context.Context, log *slog.Logger) (t *telemetry.Tracing, stop func(), err error) {
	t, err = telemetry.Setup(ctx, telemetry.Config{Endpoint: o.endpoint, Command: o.command})
	if err != nil {
		return nil, nil, err
	}
	if t.On() {
		log.Info("tracing", "otlp_endpoint", o.endpoint)
	}
	return t, func() {
		flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), traceFlushTimeout)
		defer cancel()
		if err := t.Shutdown(flushCtx); err != nil {
			log.Warn("traces not all sent", "err", err)
		}
	}, nil
}
