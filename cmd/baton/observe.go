package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
)

// logFormat is --log-format: slog's key=value lines (text) or one JSON object a line (json).
type logFormat string

const (
	logText logFormat = "text"
	logJSON logFormat = "json"
)

func (f *logFormat) String() string {
	if f == nil || *f == "" {
		return string(logText)
	}
	return string(*f)
}

func (f *logFormat) Set(v string) error {
	switch logFormat(v) {
	case logText, logJSON:
		*f = logFormat(v)
		return nil
	}
	return errors.New("want text or json")
}

// register adds --log-format to fs, text by default.
func (f *logFormat) register(fs *flag.FlagSet) {
	*f = logText
	fs.Var(f, "log-format", "log lines as `text` (key=value) or json (one JSON object a line, for log collectors)")
}

// handler is the slog handler of the format, writing to w.
func (f logFormat) handler(w io.Writer, opts *slog.HandlerOptions) slog.Handler {
	if f == logJSON {
		return slog.NewJSONHandler(w, opts)
	}
	return slog.NewTextHandler(w, opts)
}

// devMetricsListen is the default --metrics-listen of `baton dev`; `baton server` has none. It is
// beside the producer (8080) and worker (8081) APIs, and not 9090, the port of Prometheus itself,
// the program most likely to run beside a Baton whose metrics it scrapes.
const devMetricsListen = "127.0.0.1:8082"

// metricsAddr is --metrics-listen: HOST:PORT, or empty for no metrics listener. It is checked
// as it is parsed, so that a mistake is a usage error rather than a failure to listen.
type metricsAddr string

func (a *metricsAddr) String() string {
	if a == nil {
		return ""
	}
	return string(*a)
}

func (a *metricsAddr) Set(v string) error {
	if v != "" {
		_, port, err := net.SplitHostPort(v)
		if err != nil {
			return errors.New(`want HOST:PORT (such as 127.0.0.1:8082), or "" for no metrics listener`)
		}
		if n, err := strconv.Atoi(port); port != "" && (err != nil || n < 0 || n > 65535) {
			if _, err := net.LookupPort("tcp", port); err != nil {
				return fmt.Errorf("port %q: want a number from 0 to 65535", port)
			}
		}
	}
	*a = metricsAddr(v)
	return nil
}

// metricsLine is how a startup message names the metrics listener: its URL, or "off".
func metricsLine(l net.Listener) string {
	if l == nil {
		return "off"
	}
	return "http://" + l.Addr().String() + "/metrics"
}
