package server_test

import (
	"context"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/mtls"
	"github.com/baton-dev/baton/internal/server"
	"github.com/baton-dev/baton/internal/sink"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// A metrics address in use fails Listen, unless the metrics listener is optional: then it takes a
// port nearby and says so.
func TestListenMetricsNearby(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()
	cfg := server.ListenConfig{Producer: "127.0.0.1:0", Internal: "127.0.0.1:0", Metrics: addr}
	if _, err := server.Listen(cfg); err == nil || !strings.Contains(err.Error(), "--metrics-listen "+addr) {
		t.Fatalf("a busy metrics address: %v", err)
	}
	cfg.MetricsNearby = true
	ls, err := server.Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Close()
	_, port, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(port)
	if ls.Metrics == nil {
		t.Fatalf("no metrics listener nearby; warnings %v", ls.Warnings)
	}
	_, got, _ := net.SplitHostPort(ls.Metrics.Addr().String())
	if m, _ := strconv.Atoi(got); m <= n || m > n+16 || len(ls.Warnings) != 1 || !strings.Contains(ls.Warnings[0], "serving the metrics on") {
		t.Errorf("metrics on %s after %s busy; warnings %v", ls.Metrics.Addr(), addr, ls.Warnings)
	}
	if ls.InternalTLS {
		t.Error("TLS without certificates")
	}
}

// With the three TLS files the internal listener requires a client certificate.
func TestListenInternalTLS(t *testing.T) {
	dc, err := mtls.WriteDevCerts(filepath.Join(t.TempDir(), "certs"), nil, time.Now(), false)
	if err != nil {
		t.Fatal(err)
	}
	ls, err := server.Listen(server.ListenConfig{Producer: "127.0.0.1:0", Internal: "127.0.0.1:0",
		InternalTLSCert: dc.ServerCert, InternalTLSKey: dc.ServerKey, InternalTLSClientCA: dc.CA})
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Close()
	if !ls.InternalTLS || ls.Metrics != nil {
		t.Errorf("internal TLS %v, metrics %v", ls.InternalTLS, ls.Metrics)
	}
	if _, err := server.Listen(server.ListenConfig{Producer: "127.0.0.1:0", Internal: "127.0.0.1:0",
		InternalTLSCert: dc.ServerCert, InternalTLSKey: dc.CA, InternalTLSClientCA: dc.CA}); err == nil || !strings.Contains(err.Error(), "internal listener TLS") {
		t.Errorf("a key that is not the certificate's: %v", err)
	}
}

// A sink needs object storage and a data database: Serve refuses to start one without.
func TestServeRefusesASinkWithoutItsStorage(t *testing.T) {
	ls, err := server.Listen(server.ListenConfig{Producer: "127.0.0.1:0", Internal: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Close()
	err = server.Serve(context.Background(), server.ServeConfig{Listeners: *ls,
		Server: server.Config{Store: storetest.OpenSQLite(t), Logger: quiet, Sink: &sink.Config{}}})
	if err == nil || !strings.Contains(err.Error(), "--sink needs --blob-url and a data database") {
		t.Fatalf("a sink without storage: %v", err)
	}
}
