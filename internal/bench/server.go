package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/store/postgres"
)

// ProfileChild is the hidden first argument of `baton bench` with which the bench starts its
// server under the CPU profiler: baton bench profile-child FILE dev|server ...
const ProfileChild = "profile-child"

// ServerConfig is the server StartServer runs: this binary as `baton dev` on a fresh SQLite
// database in DataDir, or as `baton server` on DatabaseURL.
type ServerConfig struct {
	DataDir     string // baton dev's data directory, used when DatabaseURL is ""
	DatabaseURL string // PostgreSQL: baton server on it, migrated first
	// The server's wake-up transport, passed as its --transport, --redis-url, --nats-url and
	// --transport-namespace.
	Transport, RedisURL, NATSURL, TransportNamespace string
	// CPUProfile, if set, is the file the server writes its CPU profile to as it stops.
	CPUProfile string
	// Flags are more flags for the server.
	Flags []string
	// Output, if not nil, also receives the server's output.
	Output io.Writer
}

// RunServer runs the bench on a server it starts (StartServer) and stops after the run: baton dev
// on a fresh SQLite database in a temporary directory, unless sc names a DataDir or a
// DatabaseURL; with Via callback, the server pushes to a target of the bench's. A server that did
// not stop cleanly fails the run. The result's Store is sqlite or postgres.
func RunServer(ctx context.Context, cfg Config, sc ServerConfig) (*Result, error) {
	if cfg.Via == ViaCallback {
		push, err := NewPushTarget(2*cfg.Tasks + 1024)
		if err != nil {
			return nil, err
		}
		defer push.Close()
		cfg.Push = push
	}
	var res *Result
	err := withServer(ctx, &cfg, sc, func() (err error) {
		res, err = Run(ctx, cfg)
		return err
	})
	if err != nil {
		return nil, err
	}
	res.Store = sc.store()
	return res, nil
}

// SoakServer runs a soak (Soak) on a server it starts, as RunServer does. The result's Store is
// sqlite or postgres.
func SoakServer(ctx context.Context, cfg Config, sc ServerConfig, soak SoakConfig) (*SoakResult, error) {
	var res *SoakResult
	err := withServer(ctx, &cfg, sc, func() (err error) {
		res, err = Soak(ctx, cfg, soak)
		return err
	})
	if err != nil {
		return nil, err
	}
	res.Store = sc.store()
	return res, nil
}

func (sc ServerConfig) store() string {
	if sc.DatabaseURL != "" {
		return "postgres"
	}
	return "sqlite"
}

// withServer starts the server of sc (StartServer), runs fn against it (cfg filled in: its URLs,
// key and process id), and stops it; a server that did not stop cleanly fails the run.
func withServer(ctx context.Context, cfg *Config, sc ServerConfig, fn func() error) error {
	if sc.DatabaseURL == "" && sc.DataDir == "" {
		dir, err := os.MkdirTemp("", "baton-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir) // after the server stopped: defers run last in, first out
		sc.DataDir = dir
	}
	child, err := StartServer(ctx, cfg, sc)
	if err != nil {
		return err
	}
	cfg.ServerPID = child.PID()
	defer child.Stop(30 * time.Second)
	err = fn()
	if stopErr := child.Stop(30 * time.Second); stopErr != nil && err == nil {
		err = stopErr
	}
	return err
}

// StartServer starts the server of sc as a child process with free loopback ports and no
// per-job, rate or quota limits, and fills in cfg's ProducerURL, InternalURL and APIKey (a new
// key, unless cfg has one). With cfg.Push, the server pushes cfg.TaskName's tasks to it.
func StartServer(ctx context.Context, cfg *Config, sc ServerConfig) (*Child, error) {
	// A free port may be taken by another process between the pick and the child's listen (tests
	// start servers side by side): then the child starts again on other ports.
	for attempt := 1; ; attempt++ {
		c, err := startServerOnce(ctx, cfg, sc)
		if errors.Is(err, ErrAddrTaken) && attempt < 3 {
			if sc.Output != nil {
				fmt.Fprintf(sc.Output, "bench: %v; starting the server again on other ports\n", err)
			}
			continue
		}
		return c, err
	}
}

func startServerOnce(ctx context.Context, cfg *Config, sc ServerConfig) (*Child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find this program to start the server: %w", err)
	}
	producer, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	internal, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	common := []string{"--listen", producer, "--internal-listen", internal,
		"--max-tasks-per-job", "0", "--rate-limit", "0", "--daily-quota", "0", "--shutdown-timeout", "10s",
		"--transport", sc.Transport, "--redis-url", sc.RedisURL, "--nats-url", sc.NATSURL, "--transport-namespace", sc.TransportNamespace}
	if cfg.Push != nil {
		common = append(common, "--push-target", cfg.TaskName+"="+cfg.Push.URL(), "--public-url", "http://"+producer)
	}
	common = append(common, sc.Flags...)
	var args, env []string
	if sc.DatabaseURL == "" {
		if cfg.APIKey == "" {
			cfg.APIKey = "bench-" + randomHex(16)
		}
		// No metrics listener: it would take dev's default port, which a developer's own
		// baton dev may hold.
		args = append([]string{"dev", "--data-dir", sc.DataDir, "--metrics-listen="}, common...)
		env = []string{"BATON_API_KEY=" + cfg.APIKey}
	} else {
		if cfg.APIKey == "" { // made on the first start; a start again on other ports keeps it
			if cfg.APIKey, err = postgresKey(ctx, sc.DatabaseURL, cfg.TaskName); err != nil {
				return nil, err
			}
		}
		args = append([]string{"server", "--database-url", sc.DatabaseURL, "--internal-insecure"}, common...)
	}
	if sc.CPUProfile != "" {
		args = append([]string{"bench", ProfileChild, sc.CPUProfile}, args...)
	}
	cfg.ProducerURL, cfg.InternalURL = "http://"+producer, "http://"+internal
	return StartChild(ctx, ChildConfig{Path: exe, Args: args, Env: env, ProducerURL: cfg.ProducerURL, APIKey: cfg.APIKey, Output: sc.Output})
}

// postgresKey migrates the database and creates an API key on it, as `baton migrate` and
// `baton apikey create` would.
func postgresKey(ctx context.Context, dbURL, name string) (string, error) {
	st, err := postgres.Open(ctx, dbURL, postgres.Options{MaxConns: 2, Migrate: true})
	if err != nil {
		return "", err
	}
	defer st.Close()
	_, secret, err := auth.CreateKey(ctx, st, name, auth.DefaultTenant, "", time.Now())
	if err != nil {
		return "", fmt.Errorf("create an API key: %w", err)
	}
	return secret, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
