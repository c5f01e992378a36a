package server

import (
	"crypto/tls"
	"fmt"
	"net"
	"strconv"

	"github.com/baton-dev/baton/internal/mtls"
)

// ListenConfig is where a server listens.
type ListenConfig struct {
	Producer, Internal string // HOST:PORT of the producer and the worker-facing /internal/* APIs
	// InternalTLSCert, InternalTLSKey and InternalTLSClientCA, when set, put the internal listener
	// behind mutual TLS: its PEM certificate and key, and the CA bundle that workers' client
	// certificates must chain to. Set all three or none.
	InternalTLSCert, InternalTLSKey, InternalTLSClientCA string
	// Metrics is HOST:PORT of GET /metrics; "": no metrics listener.
	Metrics string
	// MetricsNearby makes the metrics listener optional (baton dev): when Metrics cannot be
	// bound, the first free port of the next ones on its host is taken instead, or none, and
	// Listeners.Warnings says so.
	MetricsNearby bool
}

// Listeners are a server's bound listeners.
type Listeners struct {
	Producer, Internal net.Listener
	Metrics            net.Listener // nil: none
	// InternalTLS says that the internal listener requires a client certificate.
	InternalTLS bool
	// Warnings say what Listen settled for instead of what was asked (an optional listener's
	// port).
	Warnings []string
}

// Listen loads the internal listener's certificates, when its TLS files are set, and opens the
// listeners, so that a port in use fails fast and clearly, before anything is printed. A TLS
// handshake runs on each connection's own goroutine, bounded by the server's ReadHeaderTimeout
// (HTTPLimits), so a stalled client does not hold up Accept.
func Listen(cfg ListenConfig) (*Listeners, error) {
	var tlsConf *tls.Config
	if cfg.InternalTLSCert != "" || cfg.InternalTLSKey != "" || cfg.InternalTLSClientCA != "" {
		var err error
		if tlsConf, err = mtls.ServerConfig(cfg.InternalTLSCert, cfg.InternalTLSKey, cfg.InternalTLSClientCA); err != nil {
			return nil, fmt.Errorf("internal listener TLS: %w", err)
		}
	}
	p, err := net.Listen("tcp", cfg.Producer)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", cfg.Producer, err)
	}
	i, err := net.Listen("tcp", cfg.Internal)
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("listen on %s: %w", cfg.Internal, err)
	}
	if tlsConf != nil {
		i = tls.NewListener(i, tlsConf)
	}
	var m net.Listener
	var warnings []string
	if cfg.Metrics != "" {
		if m, err = net.Listen("tcp", cfg.Metrics); err != nil && cfg.MetricsNearby {
			m, warnings = listenNearby(cfg.Metrics, err)
			err = nil
		}
		if err != nil {
			p.Close()
			i.Close()
			return nil, fmt.Errorf("--metrics-listen %s: %w", cfg.Metrics, err)
		}
	}
	return &Listeners{Producer: p, Internal: i, Metrics: m, InternalTLS: tlsConf != nil, Warnings: warnings}, nil
}

// Close closes the listeners, for a caller that will not serve.
func (ls *Listeners) Close() {
	ls.Producer.Close()
	ls.Internal.Close()
	if ls.Metrics != nil {
		ls.Metrics.Close()
	}
}

// nearbyPorts is how many ports after a busy metrics port listenNearby tries.
const nearbyPorts = 16

// listenNearby is the metrics listener of a server for which it is optional (baton dev), when
// addr could not be bound (failed): the first free port of the nearbyPorts after addr's on the
// same host, or none. The warnings say what it settled for.
func listenNearby(addr string, failed error) (net.Listener, []string) {
	host, port, _ := net.SplitHostPort(addr)
	n, err := strconv.Atoi(port)
	if err == nil && n > 0 {
		for p := n + 1; p <= n+nearbyPorts && p <= 65535; p++ {
			next := net.JoinHostPort(host, strconv.Itoa(p))
			if l, err := net.Listen("tcp", next); err == nil {
				return l, []string{fmt.Sprintf("--metrics-listen %s: %v; serving the metrics on %s instead", addr, failed, next)}
			}
		}
	}
	return nil, []string{fmt.Sprintf("--metrics-listen %s: %v; no free port nearby either: running without a metrics listener", addr, failed)}
}
