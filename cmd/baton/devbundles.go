package main

// `baton dev` runs the tasks of bundle jobs itself: a worker in this process claims them from
// the dev server's own /internal/* listener and runs each bundle as `baton worker` would, so that
// a bundle uploaded and deployed runs with nothing else started.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/baton-dev/baton/internal/bundle"
	"github.com/baton-dev/baton/internal/mtls"
	"github.com/baton-dev/baton/internal/runner"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/udfrun"
	"github.com/baton-dev/baton/internal/wrapper"
	"github.com/baton-dev/baton/worker"
)

// runDevBundles runs bundle tasks in this process until ctx ends; certs are the client
// certificate of the internal listener when it asks for one (the demo's), else zero.
func runDevBundles(ctx context.Context, f *serverFlags, ls *listeners, st store.Store, dataDir string, certs mtls.DevCerts, stderr io.Writer) {
	log := newLogger(stderr, f.logFormat).With("component", "bundles")
	if ls.internalTLS && certs.ClientCert == "" {
		log.Info("bundle tasks are not run by baton dev: its /internal/* asks for a client certificate it does not hold; run `baton worker --task OPERATOR` for them")
		return
	}
	// Beside the data directory, which the children's user may not be able to traverse.
	abs, _ := filepath.Abs(dataDir)
	sum := sha256.Sum256([]byte(abs))
	dir := filepath.Join(os.TempDir(), "baton-dev-bundles-"+strconv.Itoa(os.Geteuid())+"-"+hex.EncodeToString(sum[:4]))
	cache, err := bundle.OpenCache(dir, bundle.DefaultCacheMax)
	if err != nil {
		log.Error("bundle tasks are not run by baton dev", "err", err)
		return
	}
	wc := wrapper.Config{PublicURL: "http://" + ls.producer.Addr().String(), Log: log, Bundles: cache,
		BundleLimits: bundle.Limits{Archive: f.bundleMaxBytes}}
	if os.Geteuid() == 0 {
		if cred, err := runner.LookupChild("nobody"); err == nil {
			wc.Credential = cred
		}
	}
	scheme := "http://"
	opts := []worker.Option{worker.WithLogger(log), worker.WithConcurrency(4), worker.WithBlob(f.blobURL),
		worker.WithShutdownTimeout(5 * time.Second), worker.WithIsolation(runner.Isolation().Level())}
	if ls.internalTLS {
		scheme = "https://"
		opts = append(opts, worker.WithClientCert(certs.CA, certs.ClientCert, certs.ClientKey))
	}
	iso := runner.Isolation()
	log.Info("bundle tasks run in this process, contained", "level", iso.Level(), "containment", iso.String())
	onPull := func(op string) bool { _, ok := ls.pushTargets[op]; return !ok }
	udfrun.NewLocal(udfrun.Config{Store: st, Wrapper: wrapper.New(wc), InternalURL: scheme + ls.internal.Addr().String(),
		Options: opts, OnPull: onPull, Log: log}).Run(ctx)
}
