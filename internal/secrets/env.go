package secrets

import (
	"context"
	"fmt"
	"os"
	"strings"
)

// EnvPrefix begins the name of every environment variable Env reads.
const EnvPrefix = "BATON_SECRET_"

// EnvVar is the environment variable Env reads a name from: EnvPrefix and the name upper-cased
// (monad_rpc_key is read from BATON_SECRET_MONAD_RPC_KEY).
func EnvVar(name string) string {
	return EnvPrefix + strings.ToUpper(name)
}

// Env reads each secret from the environment variable EnvVar names, at each Lookup. An empty
// value counts as missing.
func Env() Provider {
	return EnvWith(os.LookupEnv)
}

// EnvWith is Env over another environment: lookup answers a variable's value and whether it is
// set, as os.LookupEnv does.
func EnvWith(lookup func(string) (string, bool)) Provider {
	return env{lookup: lookup}
}

type env struct {
	lookup func(string) (string, bool)
}

func (e env) Lookup(_ context.Context, name string) (string, error) {
	if err := CheckName(name); err != nil {
		return "", err
	}
	if v, ok := e.lookup(EnvVar(name)); ok && v != "" {
		return v, nil
	}
	return "", fmt.Errorf("secret %s: %w in env (%s is unset or empty)", name, ErrNotFound, EnvVar(name))
}

func (env) Name() string { return "env" }
