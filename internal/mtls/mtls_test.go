package mtls

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func writeDevCerts(t *testing.T) DevCerts {
	t.Helper()
	dc, err := WriteDevCerts(filepath.Join(t.TempDir(), "certs"), nil, time.Now(), false)
	if err != nil {
		t.Fatalf("WriteDevCerts: %v", err)
	}
	return dc
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("%s: no CERTIFICATE block", path)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func TestWriteDevCertsWritesTheSixFilesWithPrivateKeys(t *testing.T) {
	t.Parallel()
	dc := writeDevCerts(t)
	info, err := os.Stat(dc.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := info.Mode().Perm(); got != 0o700 {
		t.Errorf("directory mode = %v, want 0700", got)
	}
	want := map[string]fs.FileMode{
		"ca.pem": 0o644, "ca-key.pem": 0o600,
		"server.pem": 0o644, "server-key.pem": 0o600,
		"client.pem": 0o644, "client-key.pem": 0o600,
	}
	for _, p := range []string{dc.CA, dc.CAKey, dc.ServerCert, dc.ServerKey, dc.ClientCert, dc.ClientKey} {
		info, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		mode, ok := want[filepath.Base(p)]
		if !ok || filepath.Dir(p) != dc.Dir {
			t.Errorf("unexpected path %s", p)
			continue
		}
		if got := info.Mode().Perm(); got != mode {
			t.Errorf("%s mode = %v, want %v", filepath.Base(p), got, mode)
		}
		delete(want, filepath.Base(p))
	}
	if len(want) > 0 {
		t.Errorf("files not reported: %v", want)
	}
}

func TestWriteDevCertsMakesACAAServerAndAClientCertificate(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	dc, err := WriteDevCerts(t.TempDir(), []string{"baton.internal", "10.0.0.5", "baton.internal"}, now, false)
	if err != nil {
		t.Fatal(err)
	}
	ca, server, client := readCert(t, dc.CA), readCert(t, dc.ServerCert), readCert(t, dc.ClientCert)

	if !ca.IsCA || ca.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Errorf("CA: IsCA=%v KeyUsage=%v", ca.IsCA, ca.KeyUsage)
	}
	for _, c := range []*x509.Certificate{ca, server, client} {
		if c.PublicKeyAlgorithm != x509.ECDSA {
			t.Errorf("%s: key algorithm %v, want ECDSA", c.Subject.CommonName, c.PublicKeyAlgorithm)
		}
		if !c.NotAfter.Equal(now.Add(365 * 24 * time.Hour)) {
			t.Errorf("%s: NotAfter %v, want a year after %v", c.Subject.CommonName, c.NotAfter, now)
		}
		if c.NotBefore.After(now) {
			t.Errorf("%s: NotBefore %v is after now", c.Subject.CommonName, c.NotBefore)
		}
	}
	if !dc.NotAfter.Equal(now.Add(365 * 24 * time.Hour)) {
		t.Errorf("DevCerts.NotAfter = %v", dc.NotAfter)
	}
	if !slices.Equal(dc.Hosts, []string{"baton.internal", "10.0.0.5"}) {
		t.Errorf("Hosts = %v", dc.Hosts)
	}
	if !slices.Equal(server.DNSNames, []string{"baton.internal"}) || len(server.IPAddresses) != 1 || !server.IPAddresses[0].Equal(net.ParseIP("10.0.0.5")) {
		t.Errorf("server SANs: DNS %v IP %v", server.DNSNames, server.IPAddresses)
	}
	if !slices.Equal(server.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) {
		t.Errorf("server ExtKeyUsage = %v", server.ExtKeyUsage)
	}
	if client.Subject.CommonName != "baton-worker" || !slices.Equal(client.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) {
		t.Errorf("client CN %q ExtKeyUsage %v", client.Subject.CommonName, client.ExtKeyUsage)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	if _, err := server.Verify(x509.VerifyOptions{Roots: roots, DNSName: "10.0.0.5", CurrentTime: now}); err != nil {
		t.Errorf("server certificate does not verify for 10.0.0.5: %v", err)
	}
	if _, err := client.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, CurrentTime: now}); err != nil {
		t.Errorf("client certificate does not verify: %v", err)
	}
}

func TestWriteDevCertsDefaultHostsCoverLoopback(t *testing.T) {
	t.Parallel()
	dc := writeDevCerts(t)
	server := readCert(t, dc.ServerCert)
	if !slices.Equal(server.DNSNames, []string{"localhost"}) {
		t.Errorf("DNS SANs = %v", server.DNSNames)
	}
	var ips []string
	for _, ip := range server.IPAddresses {
		ips = append(ips, ip.String())
	}
	if !slices.Equal(ips, []string{"127.0.0.1", "::1"}) {
		t.Errorf("IP SANs = %v", ips)
	}
}

func TestWriteDevCertsRefusesToOverwriteUnlessForced(t *testing.T) {
	t.Parallel()
	dc := writeDevCerts(t)
	before, err := os.ReadFile(dc.CAKey)
	if err != nil {
		t.Fatal(err)
	}
	_, err = WriteDevCerts(dc.Dir, nil, time.Now(), false)
	if err == nil || !strings.Contains(err.Error(), dc.CAKey) {
		t.Fatalf("second WriteDevCerts: err = %v, want a refusal naming %s", err, dc.CAKey)
	}
	if after, _ := os.ReadFile(dc.CAKey); string(after) != string(before) {
		t.Fatal("the refused call changed ca-key.pem")
	}

	// One leftover file is enough to refuse, and nothing is written.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "client.pem"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteDevCerts(dir, nil, time.Now(), false); err == nil {
		t.Fatal("WriteDevCerts over client.pem succeeded")
	}
	if _, err := os.Stat(filepath.Join(dir, "ca.pem")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("ca.pem written despite the refusal: %v", err)
	}

	if _, err := WriteDevCerts(dc.Dir, nil, time.Now(), true); err != nil {
		t.Fatalf("forced WriteDevCerts: %v", err)
	}
	if after, _ := os.ReadFile(dc.CAKey); string(after) == string(before) {
		t.Fatal("forced call kept the old CA key")
	}
	if _, err := ServerConfig(dc.ServerCert, dc.ServerKey, dc.CA); err != nil {
		t.Fatalf("replaced files do not load: %v", err)
	}
}

func TestDevCertsLoadWithBothConfigs(t *testing.T) {
	t.Parallel()
	dc := writeDevCerts(t)
	srv, err := ServerConfig(dc.ServerCert, dc.ServerKey, dc.CA)
	if err != nil {
		t.Fatalf("ServerConfig: %v", err)
	}
	if srv.ClientAuth != tls.RequireAndVerifyClientCert || srv.MinVersion != tls.VersionTLS12 || srv.ClientCAs == nil || len(srv.Certificates) != 1 {
		t.Errorf("server config: ClientAuth %v MinVersion %x ClientCAs %v certs %d", srv.ClientAuth, srv.MinVersion, srv.ClientCAs != nil, len(srv.Certificates))
	}
	cli, err := ClientConfig(dc.CA, dc.ClientCert, dc.ClientKey)
	if err != nil {
		t.Fatalf("ClientConfig: %v", err)
	}
	if cli.RootCAs == nil || len(cli.Certificates) != 1 || cli.MinVersion != tls.VersionTLS12 {
		t.Errorf("client config: RootCAs %v certs %d MinVersion %x", cli.RootCAs != nil, len(cli.Certificates), cli.MinVersion)
	}
}

// handshake runs one connection over a loopback listener served with srv and reports the
// server's handshake error and the client's error (dial, handshake or reading the server's reply).
// With TLS 1.3 a client finishes its side of the handshake before the server has checked its
// certificate, so only the read shows whether the server accepted it.
func handshake(t *testing.T, srv, cli *tls.Config) (serverErr, clientErr error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		tc := tls.Server(c, srv)
		if err := tc.Handshake(); err != nil {
			done <- err
			return
		}
		_, err = tc.Write([]byte("ok"))
		done <- err
	}()
	clientErr = func() error {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", ln.Addr().String(), cli)
		if err != nil {
			return err
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 2)
		if _, err := io.ReadFull(conn, buf); err != nil {
			return err
		}
		if string(buf) != "ok" {
			return errors.New("unexpected reply " + string(buf))
		}
		return nil
	}()
	return <-done, clientErr
}

func TestMutualTLSHandshake(t *testing.T) {
	t.Parallel()
	dc := writeDevCerts(t)
	other := writeDevCerts(t)
	srv, err := ServerConfig(dc.ServerCert, dc.ServerKey, dc.CA)
	if err != nil {
		t.Fatal(err)
	}
	valid, err := ClientConfig(dc.CA, dc.ClientCert, dc.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	noCert := valid.Clone()
	noCert.Certificates = nil
	foreign := valid.Clone()
	otherPair, err := tls.LoadX509KeyPair(other.ClientCert, other.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	foreign.Certificates = []tls.Certificate{otherPair}
	// A client of the other CA does not trust this server either.
	wrongRoots, err := ClientConfig(other.CA, dc.ClientCert, dc.ClientKey)
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name     string
		cli      *tls.Config
		accepted bool
	}{
		{"client certificate of the CA", valid, true},
		{"client certificate of the CA over TLS 1.2", func() *tls.Config { c := valid.Clone(); c.MaxVersion = tls.VersionTLS12; return c }(), true},
		{"no client certificate", noCert, false},
		{"no client certificate over TLS 1.2", func() *tls.Config { c := noCert.Clone(); c.MaxVersion = tls.VersionTLS12; return c }(), false},
		{"client certificate of another CA", foreign, false},
		{"client that does not trust the server's CA", wrongRoots, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			serverErr, clientErr := handshake(t, srv, tc.cli)
			if tc.accepted {
				if serverErr != nil || clientErr != nil {
					t.Fatalf("rejected: server %v, client %v", serverErr, clientErr)
				}
				return
			}
			if serverErr == nil || clientErr == nil {
				t.Fatalf("accepted: server %v, client %v", serverErr, clientErr)
			}
		})
	}
}

func TestServerRefusesTLSBelow12(t *testing.T) {
	t.Parallel()
	dc := writeDevCerts(t)
	srv, err := ServerConfig(dc.ServerCert, dc.ServerKey, dc.CA)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := ClientConfig(dc.CA, dc.ClientCert, dc.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	cli.MinVersion, cli.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
	if serverErr, clientErr := handshake(t, srv, cli); serverErr == nil || clientErr == nil {
		t.Fatalf("TLS 1.1 accepted: server %v, client %v", serverErr, clientErr)
	}
}

func TestTLSConfigErrorsNameTheFile(t *testing.T) {
	t.Parallel()
	dc := writeDevCerts(t)
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.pem")
	notPEM := filepath.Join(dir, "not-pem.pem")
	if err := os.WriteFile(notPEM, []byte("this is not PEM\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	keyOnly := dc.ServerKey // PEM, but no certificate in it

	for _, tc := range []struct {
		name string
		load func() error
		want []string
	}{
		{"missing server certificate", func() error { _, err := ServerConfig(missing, dc.ServerKey, dc.CA); return err }, []string{"server certificate", missing}},
		{"missing server key", func() error { _, err := ServerConfig(dc.ServerCert, missing, dc.CA); return err }, []string{"server key", missing}},
		{"missing client CA", func() error { _, err := ServerConfig(dc.ServerCert, dc.ServerKey, missing); return err }, []string{"client CA", missing}},
		{"server certificate not PEM", func() error { _, err := ServerConfig(notPEM, dc.ServerKey, dc.CA); return err }, []string{notPEM, "PEM"}},
		{"client CA not PEM", func() error { _, err := ServerConfig(dc.ServerCert, dc.ServerKey, notPEM); return err }, []string{notPEM, "PEM"}},
		{"client CA without certificates", func() error { _, err := ServerConfig(dc.ServerCert, dc.ServerKey, keyOnly); return err }, []string{keyOnly, "no PEM certificates"}},
		{"key of another certificate", func() error { _, err := ServerConfig(dc.ServerCert, dc.ClientKey, dc.CA); return err }, []string{dc.ServerCert, dc.ClientKey}},
		{"empty path", func() error { _, err := ServerConfig("", dc.ServerKey, dc.CA); return err }, []string{"server certificate"}},
		{"missing CA for a client", func() error { _, err := ClientConfig(missing, dc.ClientCert, dc.ClientKey); return err }, []string{"CA", missing}},
		{"missing client certificate", func() error { _, err := ClientConfig(dc.CA, missing, dc.ClientKey); return err }, []string{"client certificate", missing}},
		{"missing client key", func() error { _, err := ClientConfig(dc.CA, dc.ClientCert, missing); return err }, []string{"client key", missing}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.load()
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}
