package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/api"
	"github.com/baton-dev/baton/internal/mtls"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// internalRoutes are every route of the internal listener, from the API's route table.
func internalRoutes() []api.Route {
	var routes []api.Route
	for _, rt := range api.New(api.Config{}).Routes() {
		if rt.Listener == api.InternalListener {
			routes = append(routes, rt)
		}
	}
	return routes
}

func devCerts(t *testing.T) mtls.DevCerts {
	t.Helper()
	dc, err := mtls.WriteDevCerts(filepath.Join(t.TempDir(), "certs"), nil, time.Now(), false)
	if err != nil {
		t.Fatal(err)
	}
	return dc
}

func tlsArgs(dc mtls.DevCerts) []string {
	return []string{"--internal-tls-cert", dc.ServerCert, "--internal-tls-key", dc.ServerKey, "--internal-tls-client-ca", dc.CA}
}

// startMTLSServer runs serve, the wiring of `baton dev` and `baton server`, on a SQLite store with
// the internal listener's TLS flags pointing at dc, and returns the two base URLs.
func startMTLSServer(t *testing.T, dc mtls.DevCerts) (producerURL, internalURL string) {
	t.Helper()
	var f serverFlags
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	f.register(fs)
	args := append([]string{"--listen", "127.0.0.1:0", "--internal-listen", "127.0.0.1:0", "--shutdown-timeout", "5s"}, tlsArgs(dc)...)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	ls, err := f.bind(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !ls.internalTLS {
		t.Fatal("bind did not turn on TLS for the internal listener")
	}
	st := storetest.OpenSQLite(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, &f, ls, st, slog.New(slog.DiscardHandler)) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return "http://" + ls.producer.Addr().String(), "https://" + ls.internal.Addr().String()
}

// mtlsClient trusts dc's CA and presents cert, if any. Each test gets fresh connections.
func mtlsClient(t *testing.T, dc mtls.DevCerts, cert *tls.Certificate) *http.Client {
	t.Helper()
	pem, err := os.ReadFile(dc.CA)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	conf := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if cert != nil {
		conf.Certificates = []tls.Certificate{*cert}
	}
	tr := &http.Transport{TLSClientConfig: conf, DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func loadPair(t *testing.T, certFile, keyFile string) *tls.Certificate {
	t.Helper()
	c, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return &c
}

func call(c *http.Client, method, url string) (*http.Response, error) {
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader(`{}`)
	}
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp, nil
}

// mustBeRefusedByTLS asserts that the request got no HTTP answer because the server refused the
// handshake: it answered with a TLS alert (or, racing the alert, reset the connection).
func mustBeRefusedByTLS(t *testing.T, resp *http.Response, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("got HTTP %d; want the TLS handshake to fail", resp.StatusCode)
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		t.Fatalf("could not connect at all: %v", err)
	}
	if !errors.As(err, &opErr) || (opErr.Op != "remote error" && !errors.Is(err, syscall.ECONNRESET)) {
		t.Fatalf("not refused by the server's TLS: %v", err)
	}
	t.Logf("refused: %v", err)
}

func TestInternalRoutesRequireAClientCertificateOfTheCA(t *testing.T) {
	t.Parallel()
	dc := devCerts(t)
	other := devCerts(t)
	_, internalURL := startMTLSServer(t, dc)

	for _, r := range internalRoutes() {
		t.Run(r.Method+" "+r.Pattern, func(t *testing.T) {
			t.Parallel()
			t.Run("no client certificate", func(t *testing.T) {
				resp, err := call(mtlsClient(t, dc, nil), r.Method, internalURL+r.Pattern)
				mustBeRefusedByTLS(t, resp, err)
			})
			t.Run("certificate of another CA", func(t *testing.T) {
				resp, err := call(mtlsClient(t, dc, loadPair(t, other.ClientCert, other.ClientKey)), r.Method, internalURL+r.Pattern)
				mustBeRefusedByTLS(t, resp, err)
			})
			t.Run("valid client certificate", func(t *testing.T) {
				resp, err := call(mtlsClient(t, dc, loadPair(t, dc.ClientCert, dc.ClientKey)), r.Method, internalURL+r.Pattern)
				if err != nil {
					t.Fatalf("no HTTP answer: %v", err)
				}
				// Any status will do: the transport let the request through to the handler.
				t.Logf("HTTP %d", resp.StatusCode)
			})
		})
	}
}

func TestInternalListenerRequiresACertificateOverTLS12Too(t *testing.T) {
	t.Parallel()
	dc := devCerts(t)
	_, internalURL := startMTLSServer(t, dc)
	c := mtlsClient(t, dc, nil)
	c.Transport.(*http.Transport).TLSClientConfig.MaxVersion = tls.VersionTLS12
	resp, err := call(c, http.MethodPost, internalURL+"/internal/task-claim")
	mustBeRefusedByTLS(t, resp, err)
}

func TestInternalListenerAnswersPlainHTTPWithoutRouting(t *testing.T) {
	t.Parallel()
	dc := devCerts(t)
	_, internalURL := startMTLSServer(t, dc)
	resp, err := call(&http.Client{Timeout: 10 * time.Second}, http.MethodPost, "http"+strings.TrimPrefix(internalURL, "https")+"/internal/task-claim")
	if err != nil {
		t.Fatal(err)
	}
	// Go's TLS server recognises plain HTTP and answers 400 itself; no handler runs.
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("plain HTTP to the mTLS listener: HTTP %d, want 400", resp.StatusCode)
	}
}

func TestProducerListenerStaysPlainHTTPWhenInternalUsesMTLS(t *testing.T) {
	t.Parallel()
	producerURL, _ := startMTLSServer(t, devCerts(t))
	resp, err := call(&http.Client{Timeout: 10 * time.Second}, http.MethodGet, producerURL+"/healthz")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("producer /healthz: HTTP %d", resp.StatusCode)
	}
}

func runBaton(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := run(ctx, args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// A URL no test could ever reach: the TLS checks must come first, so it is never dialled.
const unusedDatabaseURL = "postgres://baton@127.0.0.1:1/baton?connect_timeout=2"

func TestServerRefusesToStartWithoutInternalTLS(t *testing.T) {
	t.Parallel()
	code, _, stderr := runBaton(t, "server", "--database-url", unusedDatabaseURL, "--listen", "127.0.0.1:0", "--internal-listen", "127.0.0.1:0")
	if code != 2 {
		t.Fatalf("exit %d, want 2; stderr:\n%s", code, stderr)
	}
	for _, want := range []string{"--internal-tls-cert", "--internal-tls-key", "--internal-tls-client-ca", "baton certs dev", "--internal-insecure"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not mention %s:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, "postgres") {
		t.Errorf("the database was tried before the TLS check:\n%s", stderr)
	}
}

func TestServerChecksInternalTLSBeforeTheDatabaseURL(t *testing.T) {
	t.Setenv("BATON_DATABASE_URL", "")
	code, _, stderr := runBaton(t, "server")
	if code != 2 || !strings.Contains(stderr, "--internal-tls-cert") {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
}

func TestServerRejectsPartialOrContradictoryInternalTLSFlags(t *testing.T) {
	t.Parallel()
	dc := devCerts(t)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"only the certificate", []string{"--internal-tls-cert", dc.ServerCert}, "missing --internal-tls-key, --internal-tls-client-ca"},
		{"no client CA", []string{"--internal-tls-cert", dc.ServerCert, "--internal-tls-key", dc.ServerKey}, "missing --internal-tls-client-ca"},
		{"TLS and insecure", append(tlsArgs(dc), "--internal-insecure"), "--internal-insecure"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"server", "--database-url", unusedDatabaseURL, "--listen", "127.0.0.1:0", "--internal-listen", "127.0.0.1:0"}, tc.args...)
			code, _, stderr := runBaton(t, args...)
			if code != 2 || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, want 2 with %q; stderr:\n%s", code, tc.want, stderr)
			}
		})
	}
}

func TestServerNamesAnUnreadableCertificateBeforeConnecting(t *testing.T) {
	t.Parallel()
	dc := devCerts(t)
	missing := filepath.Join(t.TempDir(), "nope.pem")
	code, _, stderr := runBaton(t, "server", "--database-url", unusedDatabaseURL, "--listen", "127.0.0.1:0", "--internal-listen", "127.0.0.1:0",
		"--internal-tls-cert", missing, "--internal-tls-key", dc.ServerKey, "--internal-tls-client-ca", dc.CA)
	if code != 1 || !strings.Contains(stderr, missing) {
		t.Fatalf("exit %d, want 1 naming %s; stderr:\n%s", code, missing, stderr)
	}
	if strings.Contains(stderr, "postgres") {
		t.Errorf("the database was tried before the certificates were loaded:\n%s", stderr)
	}
}

func TestServerInternalInsecurePassesTheTLSCheck(t *testing.T) {
	t.Parallel()
	// Nothing listens on port 1: getting as far as the database shows the TLS gate let it through.
	code, _, stderr := runBaton(t, "server", "--internal-insecure", "--database-url", unusedDatabaseURL, "--listen", "127.0.0.1:0", "--internal-listen", "127.0.0.1:0")
	if code != 1 || !strings.Contains(stderr, "postgres") {
		t.Fatalf("exit %d, want 1 from the database; stderr:\n%s", code, stderr)
	}
}

// syncBuffer is written by the command's goroutine and read by the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startDev runs `baton dev` with args and returns its banner once printed.
func startDev(t *testing.T, args ...string) string {
	t.Helper()
	var stdout, stderr syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	full := append([]string{"dev", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--internal-listen", "127.0.0.1:0", "--metrics-listen=", "--shutdown-timeout", "5s"}, args...)
	go func() { done <- run(ctx, full, &stdout, &stderr) }()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("baton dev exited %d; stderr:\n%s", code, stderr.String())
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(stdout.String(), "Press Ctrl-C") {
		select {
		case code := <-done:
			done <- code
			t.Fatalf("baton dev exited %d; stderr:\n%s", code, stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no banner; stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
		}
	}
	return stdout.String()
}

var workerAPILine = regexp.MustCompile(`worker API\s+(https?)://(\S+)\s+(.*)`)

func TestDevWithInternalTLSFlagsServesMTLSAndSaysSo(t *testing.T) {
	t.Parallel()
	dc := devCerts(t)
	banner := startDev(t, tlsArgs(dc)...)
	m := workerAPILine.FindStringSubmatch(banner)
	if m == nil || m[1] != "https" || !strings.Contains(m[3], "mTLS") {
		t.Fatalf("banner does not announce https and mTLS:\n%s", banner)
	}
	url := fmt.Sprintf("https://%s/internal/task-claim", m[2])
	resp, err := call(mtlsClient(t, dc, nil), http.MethodPost, url)
	mustBeRefusedByTLS(t, resp, err)
	if _, err := call(mtlsClient(t, dc, loadPair(t, dc.ClientCert, dc.ClientKey)), http.MethodPost, url); err != nil {
		t.Fatalf("valid client certificate: %v", err)
	}
}

func TestDevWithoutTLSFlagsServesPlainHTTPOnLoopback(t *testing.T) {
	t.Parallel()
	banner := startDev(t)
	m := workerAPILine.FindStringSubmatch(banner)
	if m == nil || m[1] != "http" || !strings.Contains(m[3], "WITHOUT TLS") {
		t.Fatalf("banner does not say the worker API is plain HTTP:\n%s", banner)
	}
	resp, err := call(&http.Client{Timeout: 10 * time.Second}, http.MethodGet, "http://"+m[2]+"/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("plain /healthz: %v %v", resp, err)
	}
}

// Without TLS, the dev server's internal listener must be on loopback: on another address anyone
// who reaches it could claim and report tasks. It refuses with a usage error before serving.
func TestDevRefusesAPlainInternalListenerOffLoopback(t *testing.T) {
	t.Parallel()
	var stdout, stderr syncBuffer
	code := run(context.Background(), []string{"dev", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0",
		"--internal-listen", "0.0.0.0:0", "--metrics-listen=", "--sink=false"}, &stdout, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "is not a loopback address") {
		t.Fatalf("baton dev --internal-listen 0.0.0.0:0 = exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	if strings.Contains(stdout.String(), "Baton dev server") {
		t.Errorf("it printed a banner before refusing:\n%s", stdout.String())
	}
}
