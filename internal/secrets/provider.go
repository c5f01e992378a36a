// Package secrets reads the values of the secrets a pipeline job declares by logical name, from a
// provider, and keeps them out of every log line.
//
// A Provider answers a secret's current value by its logical name (Env, Dir, or a Chain of them,
// as Open builds from the server's --secrets flag). A Redactor learns each value a provider has
// delivered and replaces it, and its usual encodings, wherever it appears in what is logged: in
// slog records through Redactor.Handler and in byte streams through Redactor.Writer.
//
// No error of this package carries a secret's value: errors name the secret and the provider,
// never what was read.
package secrets

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Provider reads a secret's current value by logical name. Lookup answers ErrNotFound (wrapped,
// naming the secret, never any value) when the provider has no such secret.
type Provider interface {
	Lookup(ctx context.Context, name string) (string, error)
	// Name says what the provider is, for a log line: "env", "dir:/run/secrets".
	Name() string
}

// ErrNotFound is the answer of a provider that has no secret of the name asked for.
var ErrNotFound = errors.New("secret not found")

// notFound is the error a provider answers for a secret it does not have.
func notFound(name string, p Provider) error {
	return fmt.Errorf("secret %s: %w in %s", name, ErrNotFound, p.Name())
}

// Chain asks each provider in turn; the first that has the secret answers. A provider's error
// other than ErrNotFound (an unreadable file, a file too large) ends the search and is returned:
// a broken secret is reported, not silently replaced by a later provider's.
func Chain(ps ...Provider) Provider {
	return chain(append([]Provider(nil), ps...))
}

type chain []Provider

func (c chain) Lookup(ctx context.Context, name string) (string, error) {
	if err := CheckName(name); err != nil {
		return "", err
	}
	for _, p := range c {
		if err := ctx.Err(); err != nil {
			return "", fmt.Errorf("secret %s: %w", name, err)
		}
		v, err := p.Lookup(ctx, name)
		if err == nil {
			return v, nil
		}
		if !errors.Is(err, ErrNotFound) {
			return "", err
		}
	}
	return "", notFound(name, c)
}

// Name lists the providers as Open reads them: "env,dir:/run/secrets".
func (c chain) Name() string {
	names := make([]string, len(c))
	for i, p := range c {
		names[i] = p.Name()
	}
	return strings.Join(names, ",")
}

// Open parses a provider list as the server's --secrets flag gives it: "env", "dir:/run/secrets",
// or several joined by commas, which make a Chain (the first that has a secret wins). "" means
// "env". A directory's path cannot hold a comma.
func Open(spec string) (Provider, error) {
	if strings.TrimSpace(spec) == "" {
		return Env(), nil
	}
	var ps []Provider
	for item := range strings.SplitSeq(spec, ",") {
		p, err := openOne(strings.TrimSpace(item))
		if err != nil {
			return nil, fmt.Errorf("secrets provider list %q: %w", spec, err)
		}
		ps = append(ps, p)
	}
	if len(ps) == 1 {
		return ps[0], nil
	}
	return Chain(ps...), nil
}

// openOne opens one item of a provider list.
func openOne(item string) (Provider, error) {
	switch {
	case item == "env":
		return Env(), nil
	case strings.HasPrefix(item, "dir:"):
		dir := strings.TrimPrefix(item, "dir:")
		if dir == "" {
			return nil, errors.New("dir: needs a directory, as in dir:/run/secrets")
		}
		return Dir(dir)
	case item == "":
		return nil, errors.New("empty provider: want env or dir:PATH")
	default:
		return nil, fmt.Errorf("unknown provider %q: want env or dir:PATH", item)
	}
}
