package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"path/filepath"
	"strings"
	"time"

	"github.com/baton-dev/baton/internal/cmdline"
	"github.com/baton-dev/baton/internal/mtls"
)

const certsUsage = `Usage: baton certs dev --out DIR [--host NAME ...] [--force]

  dev   write a development CA, a server certificate and a worker client certificate to DIR,
        for mutual TLS on the /internal/* listener (--internal-tls-* flags of baton server and dev)

Run 'baton certs dev -h' for its flags.
`

// runCerts is `baton certs`.
func runCerts(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, certsUsage)
		return 2
	}
	switch args[0] {
	case "dev":
		return runCertsDev(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, certsUsage)
		return 0
	}
	fmt.Fprintf(stderr, "baton certs: unknown command %q\n\n%s", args[0], certsUsage)
	return 2
}

// hostList is a repeatable flag; each value may also hold several comma-separated names.
type hostList []string

func (h *hostList) String() string { return strings.Join(*h, ",") }

func (h *hostList) Set(v string) error {
	for _, name := range strings.Split(v, ",") {
		if name = strings.TrimSpace(name); name == "" {
			return fmt.Errorf("empty host name in %q", v)
		}
		*h = append(*h, name)
	}
	return nil
}

func runCertsDev(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("baton certs dev", flag.ContinueOnError)
	flags.SetOutput(stderr)
	out := flags.String("out", "", "directory to write the certificates to (created 0700)")
	var hosts hostList
	flags.Var(&hosts, "host", "DNS name or IP address the server certificate covers; repeat for more (default "+strings.Join(mtls.DefaultDevHosts, ", ")+")")
	force := flags.Bool("force", false, "replace existing files in --out")
	if code, ok := cmdline.ParseFlags(ctx, flags, args); !ok {
		return code
	}
	if flags.NArg() > 0 {
		fmt.Fprintf(stderr, "baton certs dev: unexpected argument %q\n", flags.Arg(0))
		return 2
	}
	if *out == "" {
		fmt.Fprintln(stderr, "baton certs dev: --out is required")
		return 2
	}
	dir, err := filepath.Abs(*out)
	if err != nil {
		fmt.Fprintln(stderr, "baton certs dev:", err)
		return 1
	}
	dc, err := mtls.WriteDevCerts(dir, hosts, time.Now(), *force)
	if errors.Is(err, fs.ErrExist) {
		fmt.Fprintf(stderr, "baton certs dev: %v\n  (pass --force to replace them, or choose another --out)\n", err)
		return 1
	}
	if err != nil {
		fmt.Fprintln(stderr, "baton certs dev:", err)
		return 1
	}
	serverFlags := fmt.Sprintf("--internal-tls-cert %s --internal-tls-key %s --internal-tls-client-ca %s", dc.ServerCert, dc.ServerKey, dc.CA)
	url := "https://" + net.JoinHostPort(dc.Hosts[0], "8081")
	fmt.Fprintf(stdout, `Wrote a development CA and certificates to %s (valid until %s):
  %-15s %-19s the CA; the key can sign more certificates: keep it private
  %-15s %-19s server certificate for %s
  %-15s %-19s client certificate (CN %s) for trusted workers only

Serve /internal/* with mutual TLS:
  baton server %s ...
  baton dev %s

Workers present the client certificate and trust the CA:
  CA %s   certificate %s   key %s
  Go:   mtls.ClientConfig(%q, %q, %q)
  curl: curl --cacert %s --cert %s --key %s %s/healthz

These are for development. Never give the client key to untrusted task code.
`,
		dc.Dir, dc.NotAfter.Format(time.DateOnly),
		mtls.DevCAFile, mtls.DevCAKeyFile,
		mtls.DevServerCertFile, mtls.DevServerKeyFile, strings.Join(dc.Hosts, ", "),
		mtls.DevClientCertFile, mtls.DevClientKeyFile, mtls.DevClientCommonName,
		serverFlags, serverFlags,
		dc.CA, dc.ClientCert, dc.ClientKey,
		dc.CA, dc.ClientCert, dc.ClientKey,
		dc.CA, dc.ClientCert, dc.ClientKey, url)
	return 0
}
