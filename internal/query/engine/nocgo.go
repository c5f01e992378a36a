//go:build !cgo

package engine

import (
	"context"

	"github.com/baton-dev/baton/internal/query"
)

// Available says whether this build has the engine: it was built without cgo, so it has not.
const Available = false

// Engine is absent from this build.
type Engine struct{}

// New answers query.ErrUnavailable: the engine needs cgo.
func New(Config) (*Engine, error) { return nil, query.ErrUnavailable }

// Close does nothing.
func (*Engine) Close() error { return nil }

// Stop does nothing.
func (*Engine) Stop() {}

// Check answers query.ErrUnavailable.
func (*Engine) Check(context.Context, string) (*query.Statement, error) {
	return nil, query.ErrUnavailable
}

// Run answers query.ErrUnavailable.
func (*Engine) Run(context.Context, *query.Statement, []query.Relation, query.Limits) (*query.Result, error) {
	return nil, query.ErrUnavailable
}
