package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/baton-dev/baton/internal/transport"
	"github.com/baton-dev/baton/internal/transport/dial"
)

// transportFlags select the wake-up transport, shared by the server and `baton worker`.
type transportFlags struct {
	kind, redisURL, natsURL, namespace string
}

func (f *transportFlags) register(fs *flag.FlagSet, what string) {
	fs.StringVar(&f.kind, "transport", "store", what+" (env BATON_TRANSPORT)")
	fs.StringVar(&f.redisURL, "redis-url", "redis://127.0.0.1:6379/0", "Redis server of --transport redis (env BATON_REDIS_URL)")
	fs.StringVar(&f.natsURL, "nats-url", "nats://127.0.0.1:4222", "NATS server with JetStream of --transport nats (env BATON_NATS_URL)")
	fs.StringVar(&f.namespace, "transport-namespace", dial.DefaultNamespace, "prefix of the transport's keys, streams and subjects; servers and workers must agree")
}

// check validates the flags.
func (f *transportFlags) check() error {
	switch f.kind {
	case "store", "redis", "nats":
	default:
		return fmt.Errorf("--transport %q: want store, redis or nats", f.kind)
	}
	if f.namespace == "" {
		return fmt.Errorf("--transport-namespace must not be empty")
	}
	return nil
}

// url is the server URL of the chosen transport ("" for store).
func (f *transportFlags) url() string {
	switch f.kind {
	case "redis":
		return f.redisURL
	case "nats":
		return f.natsURL
	}
	return ""
}

// open connects to the chosen transport; it returns nil for the store transport.
func (f *transportFlags) open(ctx context.Context) (transport.Transport, error) {
	if f.kind == "store" {
		return nil, nil
	}
	tr, err := dial.Open(ctx, f.kind, f.url(), f.namespace)
	if err != nil {
		return nil, fmt.Errorf("--transport %s at %s: %w", f.kind, f.url(), err)
	}
	return tr, nil
}
