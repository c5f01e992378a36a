package secrets

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestEnvVarIsThePrefixAndTheUpperCasedName(t *testing.T) {
	t.Parallel()
	if got := EnvVar("monad_rpc_key"); got != "BATON_SECRET_MONAD_RPC_KEY" {
		t.Errorf("EnvVar = %q", got)
	}
}

func TestEnvReadsTheVariableAtEachLookup(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"BATON_SECRET_MONAD_RPC_KEY": "v1", "BATON_SECRET_EMPTY": ""}
	p := EnvWith(func(k string) (string, bool) { v, ok := vars[k]; return v, ok })
	ctx := context.Background()
	tests := []struct {
		name, want string
		err        error
	}{
		{name: "monad_rpc_key", want: "v1"},
		{name: "empty", err: ErrNotFound},
		{name: "missing", err: ErrNotFound},
		{name: "MONAD_RPC_KEY", err: ErrInvalidName},
		{name: "../x", err: ErrInvalidName},
	}
	for _, tt := range tests {
		got, err := p.Lookup(ctx, tt.name)
		if got != tt.want || !errors.Is(err, tt.err) {
			t.Errorf("Lookup(%q) = %q, %v; want %q, %v", tt.name, got, err, tt.want, tt.err)
		}
		if err != nil && tt.err == ErrNotFound && !strings.Contains(err.Error(), tt.name) {
			t.Errorf("Lookup(%q): error %q does not name the secret", tt.name, err)
		}
	}
	vars["BATON_SECRET_MONAD_RPC_KEY"] = "v2"
	if got, err := p.Lookup(ctx, "monad_rpc_key"); got != "v2" || err != nil {
		t.Errorf("after a change: %q, %v; want v2", got, err)
	}
	if p.Name() != "env" {
		t.Errorf("Name = %q", p.Name())
	}
}

// Not parallel: it sets the process's environment.
func TestEnvReadsTheProcessEnvironment(t *testing.T) {
	t.Setenv("BATON_SECRET_PROCESS_TEST_KEY", "from the process")
	got, err := Env().Lookup(context.Background(), "process_test_key")
	if got != "from the process" || err != nil {
		t.Errorf("Lookup = %q, %v", got, err)
	}
}
