// Package dial opens a wake-up transport by its --transport name.
package dial

import (
	"context"
	"fmt"
	"strings"

	"github.com/baton-dev/baton/internal/transport"
	"github.com/baton-dev/baton/internal/transport/natsq"
	"github.com/baton-dev/baton/internal/transport/redisq"
)

// DefaultNamespace names the keys and streams of a transport unless told otherwise.
const DefaultNamespace = "baton"

// Kinds are the transports Open knows.
var Kinds = []string{"redis", "nats"}

// Open connects to the transport kind ("redis" or "nats") at url. Its keys (Redis) or stream and
// subjects (NATS) are named after namespace (default "baton"), so that several Baton
// installations can share a server; servers and workers must use the same namespace.
func Open(ctx context.Context, kind, url, namespace string) (transport.Transport, error) {
	if namespace == "" {
		namespace = DefaultNamespace
	}
	if url == "" {
		return nil, fmt.Errorf("transport %s needs a server URL", kind)
	}
	switch kind {
	case "redis":
		return redisq.Open(ctx, url, redisq.Options{Prefix: namespace + ":"})
	case "nats":
		return natsq.Open(ctx, url, natsq.Options{
			Stream:        strings.ToUpper(streamSafe(namespace)) + "_WAKEUPS",
			SubjectPrefix: streamSafe(namespace) + ".wake",
		})
	}
	return nil, fmt.Errorf("unknown transport %q: want one of %s", kind, strings.Join(Kinds, ", "))
}

// streamSafe keeps the letters, digits, '-' and '_' of ns, which NATS stream names and subject
// tokens allow, and replaces the rest with '_'.
func streamSafe(ns string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		}
		return '_'
	}, ns)
}
