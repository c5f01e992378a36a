package main

import (
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/baton-dev/baton/internal/mtls"
)

func TestCertsDevWritesTheFilesAndSaysHowToUseThem(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "certs")
	code, stdout, stderr := runBaton(t, "certs", "dev", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	for _, name := range []string{"ca.pem", "ca-key.pem", "server.pem", "server-key.pem", "client.pem", "client-key.pem"} {
		if _, err := os.Stat(filepath.Join(out, name)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	for _, want := range []string{
		"--internal-tls-cert " + filepath.Join(out, "server.pem"),
		"--internal-tls-key " + filepath.Join(out, "server-key.pem"),
		"--internal-tls-client-ca " + filepath.Join(out, "ca.pem"),
		"--cacert " + filepath.Join(out, "ca.pem"),
		"--cert " + filepath.Join(out, "client.pem"),
		"--key " + filepath.Join(out, "client-key.pem"),
		"baton-worker",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output does not mention %q:\n%s", want, stdout)
		}
	}
}

// The printed `baton dev` line is a working command.
func TestCertsDevPrintedFlagsStartAnMTLSDevServer(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "certs")
	code, stdout, stderr := runBaton(t, "certs", "dev", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	var devArgs []string
	for _, line := range strings.Split(stdout, "\n") {
		if fields := strings.Fields(line); len(fields) > 2 && fields[0] == "baton" && fields[1] == "dev" {
			devArgs = fields[2:]
		}
	}
	if devArgs == nil {
		t.Fatalf("no `baton dev` line in:\n%s", stdout)
	}
	banner := startDev(t, devArgs...)
	m := workerAPILine.FindStringSubmatch(banner)
	if m == nil || m[1] != "https" {
		t.Fatalf("banner:\n%s", banner)
	}
	dc := mtls.DevCerts{CA: filepath.Join(out, "ca.pem")}
	resp, err := call(mtlsClient(t, dc, loadPair(t, filepath.Join(out, "client.pem"), filepath.Join(out, "client-key.pem"))), http.MethodGet, "https://"+m[2]+"/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz with the client certificate: %v %v", resp, err)
	}
}

func TestCertsDevRefusesToOverwriteWithoutForce(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	if code, _, stderr := runBaton(t, "certs", "dev", "--out", out); code != 0 {
		t.Fatalf("first run: exit %d; stderr:\n%s", code, stderr)
	}
	before, _ := os.ReadFile(filepath.Join(out, "ca.pem"))
	code, _, stderr := runBaton(t, "certs", "dev", "--out", out)
	if code != 1 || !strings.Contains(stderr, "--force") || !strings.Contains(stderr, filepath.Join(out, "ca.pem")) {
		t.Fatalf("second run: exit %d, want 1 naming the files and --force; stderr:\n%s", code, stderr)
	}
	if after, _ := os.ReadFile(filepath.Join(out, "ca.pem")); string(after) != string(before) {
		t.Fatal("the refused run changed ca.pem")
	}
	if code, _, stderr := runBaton(t, "certs", "dev", "--out", out, "--force"); code != 0 {
		t.Fatalf("--force: exit %d; stderr:\n%s", code, stderr)
	}
	if after, _ := os.ReadFile(filepath.Join(out, "ca.pem")); string(after) == string(before) {
		t.Fatal("--force kept the old CA")
	}
}

func TestCertsDevHostFlagsNameTheServerCertificate(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	code, stdout, stderr := runBaton(t, "certs", "dev", "--out", out, "--host", "baton.internal", "--host", "10.1.2.3,fd00::1")
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	data, err := os.ReadFile(filepath.Join(out, "server.pem"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	var ips []string
	for _, ip := range cert.IPAddresses {
		ips = append(ips, ip.String())
	}
	if !slices.Equal(cert.DNSNames, []string{"baton.internal"}) || !slices.Equal(ips, []string{"10.1.2.3", "fd00::1"}) {
		t.Errorf("SANs: DNS %v IP %v", cert.DNSNames, ips)
	}
	if !strings.Contains(stdout, "https://baton.internal:8081/healthz") {
		t.Errorf("curl example does not use the first host:\n%s", stdout)
	}
}

func TestCertsUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no subcommand", []string{"certs"}, "baton certs dev --out DIR"},
		{"unknown subcommand", []string{"certs", "prod"}, `unknown command "prod"`},
		{"no --out", []string{"certs", "dev"}, "--out is required"},
		{"empty host", []string{"certs", "dev", "--out", "x", "--host", "a,,b"}, "empty host name"},
		{"extra argument", []string{"certs", "dev", "--out", "x", "extra"}, `unexpected argument "extra"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, _, stderr := runBaton(t, tc.args...)
			if code != 2 || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, want 2 with %q; stderr:\n%s", code, tc.want, stderr)
			}
		})
	}
}
