package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// startTransport starts the run's own Redis or NATS server on a spare port, so that killing it
// harms nothing but the run. Redis keeps nothing across a restart (no persistence: the streams
// and consumer groups are gone, as after a failover to an empty replica); NATS keeps its
// JetStream stream on disk.
func (r *run) startTransport(ctx context.Context) error {
	if r.cfg.Transport == TransportStore {
		return nil
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	dir := filepath.Join(r.cfg.Dir, r.cfg.Transport)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	p := &proc{name: r.cfg.Transport + "-server", out: filepath.Join(r.cfg.Dir, r.cfg.Transport+".log"), ready: portReady(port)}
	switch r.cfg.Transport {
	case TransportRedis:
		p.path = r.cfg.RedisServer
		p.args = []string{"--bind", "127.0.0.1", "--port", fmt.Sprint(port), "--save", "", "--appendonly", "no", "--dir", dir}
		r.transportURL = fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	case TransportNATS:
		p.path = r.cfg.NATSServer
		p.args = []string{"-a", "127.0.0.1", "-p", fmt.Sprint(port), "-js", "-sd", dir}
		r.transportURL = fmt.Sprintf("nats://127.0.0.1:%d", port)
	}
	r.transport = p
	return p.start(ctx)
}
