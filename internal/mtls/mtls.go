// Package mtls makes and loads the certificates of the internal listener's mutual TLS: the
// server's and clients' TLS configurations, and the development CA and certificates of baton dev.
package mtls

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The /internal/* listener is for trusted platform components only (docs/security.md): it requires
// a client certificate signed by the operator's CA. Only the trusted worker wrapper holds that
// certificate, so untrusted task code, which never sees it, cannot call the worker API.

// ServerConfig is the internal listener's mutual-TLS configuration: it presents the server
// certificate and accepts only clients whose certificate chains to a CA in clientCAFile.
func ServerConfig(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	cert, err := loadKeyPair("server", certFile, keyFile)
	if err != nil {
		return nil, err
	}
	pool, err := loadCAPool("client CA", clientCAFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
	}, nil
}

// ClientConfig is a worker's configuration for the internal listener: it trusts only the CA in
// caFile and presents the client certificate.
func ClientConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	pool, err := loadCAPool("CA", caFile)
	if err != nil {
		return nil, err
	}
	cert, err := loadKeyPair("client", certFile, keyFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		RootCAs:      pool,
		Certificates: []tls.Certificate{cert},
	}, nil
}

// readPEM reads a file that must hold PEM data; errors name the file and what it was meant to be.
func readPEM(what, file string) ([]byte, error) {
	if file == "" {
		return nil, fmt.Errorf("no %s file given", what)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read %s %s: %w", what, file, err)
	}
	if block, _ := pem.Decode(data); block == nil {
		return nil, fmt.Errorf("%s %s: no PEM data found", what, file)
	}
	return data, nil
}

func loadKeyPair(role, certFile, keyFile string) (tls.Certificate, error) {
	certPEM, err := readPEM(role+" certificate", certFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	keyPEM, err := readPEM(role+" key", keyFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("load %s certificate %s with key %s: %w", role, certFile, keyFile, err)
	}
	return cert, nil
}

func loadCAPool(what, file string) (*x509.CertPool, error) {
	data, err := readPEM(what+" bundle", file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("%s bundle %s: no PEM certificates found", what, file)
	}
	return pool, nil
}

// File names WriteDevCerts uses inside its directory.
const (
	DevCAFile         = "ca.pem"
	DevCAKeyFile      = "ca-key.pem"
	DevServerCertFile = "server.pem"
	DevServerKeyFile  = "server-key.pem"
	DevClientCertFile = "client.pem"
	DevClientKeyFile  = "client-key.pem"
)

// DevClientCommonName is the subject common name of the development client certificate.
const DevClientCommonName = "baton-worker"

// DefaultDevHosts are the names the development server certificate covers when none are given.
var DefaultDevHosts = []string{"localhost", "127.0.0.1", "::1"}

// devCertLifetime bounds the CA and both leaf certificates.
const devCertLifetime = 365 * 24 * time.Hour

// DevCerts are the paths of the files WriteDevCerts wrote.
type DevCerts struct {
	Dir                   string
	CA, CAKey             string
	ServerCert, ServerKey string
	ClientCert, ClientKey string
	Hosts                 []string  // the names and addresses the server certificate covers
	NotAfter              time.Time // when all three certificates expire
}

// WriteDevCerts makes a development CA, a server certificate for hosts (DefaultDevHosts when
// empty; IP addresses become IP SANs) and a client certificate (CN baton-worker), all ECDSA P-256
// and valid for a year from now, and writes them to dir. It refuses to replace existing files
// unless force is set (the error then matches fs.ErrExist). These are for development: the CA key sits beside the certificates.
func WriteDevCerts(dir string, hosts []string, now time.Time, force bool) (DevCerts, error) {
	if dir == "" {
		return DevCerts{}, errors.New("no directory given for the certificates")
	}
	hosts, dnsNames, ips, err := splitHosts(hosts)
	if err != nil {
		return DevCerts{}, err
	}
	dc := DevCerts{
		Dir:        dir,
		CA:         filepath.Join(dir, DevCAFile),
		CAKey:      filepath.Join(dir, DevCAKeyFile),
		ServerCert: filepath.Join(dir, DevServerCertFile),
		ServerKey:  filepath.Join(dir, DevServerKeyFile),
		ClientCert: filepath.Join(dir, DevClientCertFile),
		ClientKey:  filepath.Join(dir, DevClientKeyFile),
		Hosts:      hosts,
	}
	if !force {
		var existing []string
		for _, p := range dc.paths() {
			if _, err := os.Lstat(p); err == nil {
				existing = append(existing, p)
			} else if !errors.Is(err, fs.ErrNotExist) {
				return DevCerts{}, fmt.Errorf("check %s: %w", p, err)
			}
		}
		if len(existing) > 0 {
			return DevCerts{}, fmt.Errorf("refusing to overwrite existing %s: %w", strings.Join(existing, ", "), fs.ErrExist)
		}
	}

	// Back-date by an hour so a client whose clock runs a little behind still accepts them.
	notBefore := now.Add(-time.Hour).UTC().Truncate(time.Second)
	notAfter := now.Add(devCertLifetime).UTC().Truncate(time.Second)
	dc.NotAfter = notAfter

	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return DevCerts{}, err
	}
	caTmpl := &x509.Certificate{
		Subject:               pkix.Name{Organization: []string{"Baton development"}, CommonName: "Baton development CA"},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, caCert, err := signCert(caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return DevCerts{}, fmt.Errorf("make the CA certificate: %w", err)
	}
	serverKey, serverDER, err := leaf(caCert, caKey, &x509.Certificate{
		Subject:     pkix.Name{Organization: []string{"Baton development"}, CommonName: hosts[0]},
		NotBefore:   notBefore,
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    dnsNames,
		IPAddresses: ips,
	})
	if err != nil {
		return DevCerts{}, fmt.Errorf("make the server certificate: %w", err)
	}
	clientKey, clientDER, err := leaf(caCert, caKey, &x509.Certificate{
		Subject:     pkix.Name{Organization: []string{"Baton development"}, CommonName: DevClientCommonName},
		NotBefore:   notBefore,
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return DevCerts{}, fmt.Errorf("make the client certificate: %w", err)
	}

	type file struct {
		path string
		data []byte
		mode fs.FileMode
	}
	var files []file
	for _, k := range []struct {
		path string
		key  *ecdsa.PrivateKey
	}{{dc.CAKey, caKey}, {dc.ServerKey, serverKey}, {dc.ClientKey, clientKey}} {
		der, err := x509.MarshalPKCS8PrivateKey(k.key)
		if err != nil {
			return DevCerts{}, fmt.Errorf("encode the key for %s: %w", k.path, err)
		}
		files = append(files, file{k.path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600})
	}
	files = append(files,
		file{dc.CA, certPEM(caDER), 0o644},
		file{dc.ServerCert, certPEM(serverDER), 0o644},
		file{dc.ClientCert, certPEM(clientDER), 0o644},
	)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return DevCerts{}, fmt.Errorf("create %s: %w", dir, err)
	}
	for _, f := range files {
		if err := writeNew(f.path, f.data, f.mode, force); err != nil {
			return DevCerts{}, err
		}
	}
	return dc, nil
}

func (dc DevCerts) paths() []string {
	return []string{dc.CA, dc.CAKey, dc.ServerCert, dc.ServerKey, dc.ClientCert, dc.ClientKey}
}

// splitHosts deduplicates hosts (defaulting to DefaultDevHosts) and sorts them into DNS names and
// IP addresses.
func splitHosts(in []string) (hosts, dnsNames []string, ips []net.IP, err error) {
	if len(in) == 0 {
		in = DefaultDevHosts
	}
	seen := map[string]bool{}
	for _, h := range in {
		h = strings.TrimSpace(h)
		if h == "" {
			return nil, nil, nil, errors.New("empty host name")
		}
		if seen[h] {
			continue
		}
		seen[h] = true
		hosts = append(hosts, h)
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip)
		} else {
			dnsNames = append(dnsNames, h)
		}
	}
	return hosts, dnsNames, ips, nil
}

func leaf(ca *x509.Certificate, caKey *ecdsa.PrivateKey, tmpl *x509.Certificate) (*ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, _, err := signCert(tmpl, ca, &key.PublicKey, caKey)
	return key, der, err
}

func signCert(tmpl, parent *x509.Certificate, pub *ecdsa.PublicKey, signer *ecdsa.PrivateKey) ([]byte, *x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, nil, err
	}
	tmpl.SerialNumber = serial
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return der, cert, err
}

func certPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// writeNew writes data to path with exactly mode. Without force it never replaces a file, even one
// created since the check; with force it replaces the file (a symlink is replaced, not followed).
func writeNew(path string, data []byte, mode fs.FileMode, force bool) error {
	if force {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("replace %s: %w", path, err)
		}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	// The umask may have narrowed the mode; certificates are meant to be readable.
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
