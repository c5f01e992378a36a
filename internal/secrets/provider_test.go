package secrets

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// mapProvider is a provider over a map, which answers err for every name not in it.
type mapProvider struct {
	name   string
	values map[string]string
	err    error
}

func (m mapProvider) Name() string { return m.name }

func (m mapProvider) Lookup(_ context.Context, name string) (string, error) {
	if v, ok := m.values[name]; ok {
		return v, nil
	}
	if m.err != nil {
		return "", m.err
	}
	return "", notFound(name, m)
}

func TestChainAsksEachProviderInTurn(t *testing.T) {
	t.Parallel()
	first := mapProvider{name: "first", values: map[string]string{"both": "from first", "only_first": "1"}}
	second := mapProvider{name: "second", values: map[string]string{"both": "from second", "only_second": "2"}}
	p := Chain(first, second)
	tests := []struct {
		name, want string
		err        error
	}{
		{name: "both", want: "from first"},
		{name: "only_first", want: "1"},
		{name: "only_second", want: "2"},
		{name: "neither", err: ErrNotFound},
		{name: "../x", err: ErrInvalidName},
	}
	for _, tt := range tests {
		got, err := p.Lookup(context.Background(), tt.name)
		if got != tt.want || !errors.Is(err, tt.err) {
			t.Errorf("Lookup(%q) = %q, %v; want %q, %v", tt.name, got, err, tt.want, tt.err)
		}
	}
	if p.Name() != "first,second" {
		t.Errorf("Name = %q", p.Name())
	}
	if _, err := p.Lookup(context.Background(), "neither"); !strings.Contains(err.Error(), "neither") {
		t.Errorf("%q does not name the secret", err)
	}
}

func TestChainStopsAtAProviderThatFails(t *testing.T) {
	t.Parallel()
	broken := errors.New("secret key: unreadable")
	p := Chain(mapProvider{name: "broken", err: broken}, mapProvider{name: "later", values: map[string]string{"key": "v"}})
	if got, err := p.Lookup(context.Background(), "key"); !errors.Is(err, broken) {
		t.Errorf("Lookup = %q, %v; want the first provider's error", got, err)
	}
}

func TestChainOfNoProviderHasNoSecret(t *testing.T) {
	t.Parallel()
	if _, err := Chain().Lookup(context.Background(), "key"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Lookup = %v, want ErrNotFound", err)
	}
}

func TestOpenReadsAProviderList(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	other := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		spec, name string // name is the provider's Name; "" when Open must fail
	}{
		{spec: "", name: "env"},
		{spec: "  ", name: "env"},
		{spec: "env", name: "env"},
		{spec: "dir:" + dir, name: "dir:" + dir},
		{spec: "dir:" + dir + "/", name: "dir:" + dir},
		{spec: "env,dir:" + dir, name: "env,dir:" + dir},
		{spec: "dir:" + dir + ", env , dir:" + other, name: "dir:" + dir + ",env,dir:" + other},
		{spec: "dir:"},
		{spec: "dir:" + filepath.Join(dir, "missing")},
		{spec: "dir:" + file},
		{spec: "env,"},
		{spec: ",env"},
		{spec: "env,,env"},
		{spec: "ENV"},
		{spec: "vault:secret/baton"},
		{spec: "/run/secrets"},
	}
	for _, tt := range tests {
		p, err := Open(tt.spec)
		switch {
		case tt.name == "" && err == nil:
			t.Errorf("Open(%q) = %s, want an error", tt.spec, p.Name())
		case tt.name != "" && err != nil:
			t.Errorf("Open(%q): %v", tt.spec, err)
		case tt.name != "" && p.Name() != tt.name:
			t.Errorf("Open(%q) = %s, want %s", tt.spec, p.Name(), tt.name)
		}
	}
}

func TestOpenedChainReadsEachProvider(t *testing.T) {
	t.Parallel()
	first, second := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(first, "both"), "first")
	writeFile(t, filepath.Join(second, "both"), "second")
	writeFile(t, filepath.Join(second, "only_second"), "second")
	p, err := Open("dir:" + first + ",dir:" + second)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"both": "first", "only_second": "second"} {
		if got, err := p.Lookup(context.Background(), name); got != want || err != nil {
			t.Errorf("Lookup(%q) = %q, %v; want %q", name, got, err, want)
		}
	}
}
