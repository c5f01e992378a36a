package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/baton-dev/baton/internal/blob"
	"github.com/baton-dev/baton/internal/dataset"
	"github.com/baton-dev/baton/internal/mtls"
	"github.com/baton-dev/baton/internal/sink"
	"github.com/baton-dev/baton/internal/transport"
)

// runSink is `baton sink`: a trusted process that claims buffered batches from a server's internal
// listener (mTLS, like baton worker), loads them into the data database, and reports them.
func runSink(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("baton sink", flag.ContinueOnError)
	fs.SetOutput(stderr)
	internalURL := fs.String("internal-url", "http://127.0.0.1:8081", "URL of the server's /internal/* listener (env BATON_INTERNAL_URL)")
	caFile := fs.String("internal-tls-ca", "", "PEM CA bundle that the internal listener's certificate must chain to")
	certFile := fs.String("internal-tls-cert", "", "PEM client certificate for the internal listener (mTLS)")
	keyFile := fs.String("internal-tls-key", "", "PEM private key of --internal-tls-cert")
	blobURL := fs.String("blob-url", "", "object storage the batches are in, as the server's --blob-url (env BATON_BLOB_URL; S3 settings from the AWS_* variables)")
	dataURL := fs.String("data-database-url", "", "the data database: a PostgreSQL URL, or the SQLite file of `baton dev` (env BATON_DATA_DATABASE_URL)")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	var logFmt logFormat
	logFmt.register(fs)
	var sf sinkFlags
	sf.register(fs)
	var tf transportFlags
	tf.register(fs, "where the sink waits for new batches: store (it long-polls the server), redis or nats, as the server's --transport")
	if code, ok := configureFlags(ctx, fs, args); !ok {
		return code
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "baton sink: "+format+"\n", a...)
		return 2
	}
	switch {
	case fs.NArg() > 0:
		return usageErr("unexpected argument %q", fs.Arg(0))
	case *blobURL == "":
		return usageErr("--blob-url (or BATON_BLOB_URL) is required: the object storage the batches are in")
	case *dataURL == "":
		return usageErr("--data-database-url (or BATON_DATA_DATABASE_URL) is required: where the datasets' tables are")
	}
	if err := sf.check(); err != nil {
		return usageErr("%v", err)
	}
	if err := tf.check(); err != nil {
		return usageErr("%v", err)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return usageErr("--log-level %q: want debug, info, warn or error", *logLevel)
	}
	log := slog.New(logFmt.handler(stderr, &slog.HandlerOptions{Level: level}))
	client := &http.Client{}
	switch n := countSet(*caFile, *certFile, *keyFile); {
	case n == 3:
		tlsConf, err := mtls.ClientConfig(*caFile, *certFile, *keyFile)
		if err != nil {
			fmt.Fprintln(stderr, "baton sink:", err)
			return 1
		}
		client.Transport = &http.Transport{TLSClientConfig: tlsConf, Proxy: http.ProxyFromEnvironment}
	case n != 0:
		return usageErr("mTLS needs all of --internal-tls-ca, --internal-tls-cert and --internal-tls-key")
	}
	if strings.HasPrefix(*internalURL, "http://") {
		log.Warn("the internal URL is not protected by mTLS; use https with --internal-tls-* outside development", "internal_url", *internalURL)
	}
	bs, err := blob.Open(ctx, *blobURL, blob.Options{})
	if err != nil {
		fmt.Fprintln(stderr, "baton sink: --blob-url:", err)
		return 1
	}
	defer bs.Close()
	data, err := dataset.Open(ctx, *dataURL)
	if err != nil {
		fmt.Fprintln(stderr, "baton sink: data database:", err)
		return 1
	}
	defer data.Close()
	cfg := sink.Config{Queue: sink.Remote{URL: *internalURL, Client: client}, Blob: bs, Data: data, GC: sf.gc,
		Workers: sf.workers, Visibility: sf.visibility, Logger: log}
	tr, err := tf.open(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "baton sink:", err)
		return 1
	}
	if tr != nil {
		defer tr.Close()
		cfg.Wakeups = tr.NewConsumer(transport.ConsumerName("sink"))
		defer cfg.Wakeups.Close()
	}
	sk, err := sink.New(cfg)
	if err != nil {
		fmt.Fprintln(stderr, "baton sink:", err)
		return 1
	}
	log.Info("baton sink started", "internal", *internalURL, "blobs", bs.Root(), "data", redactURL(*dataURL), "workers", sf.workers,
		"gc", sf.gc, "transport", tf.kind)
	sk.Run(ctx)
	log.Info("baton sink stopped")
	return 0
}

func countSet(vals ...string) int {
	n := 0
	for _, v := range vals {
		if v != "" {
			n++
		}
	}
	return n
}
