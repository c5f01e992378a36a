package store

import (
	"context"
	"encoding/json"
	"time"
)

// Bundles stores the user code bundles tenants upload: immutable archives in object storage,
// recorded with who uploaded them and when.
type Bundles interface {
	// BundleInsert stores a new bundle's record; ErrConflict if the tenant has one with its id.
	BundleInsert(ctx context.Context, b *Bundle) error
	// BundleGet returns the tenant's bundle id; ErrNotFound if the tenant has none by that id.
	BundleGet(ctx context.Context, tenant, id string) (*Bundle, error)
	// BundleList returns a page of the tenant's bundles, newest first.
	BundleList(ctx context.Context, p BundleListParams) ([]*Bundle, error)
	// BundleFinalize records what a pending bundle's archive holds (SHA256, Size, Language,
	// Entrypoint, Manifest) and when it was finalized (FinalizedAt); ErrNotFound if the tenant
	// has no pending bundle by b's id.
	BundleFinalize(ctx context.Context, b *Bundle) error
	// BundleDisable disables the tenant's bundle id and returns it; a bundle disabled already
	// keeps when and by whom it first was. ErrNotFound if the tenant has none by that id.
	BundleDisable(ctx context.Context, tenant, id, by string, at time.Time) (*Bundle, error)
}

// Bundle is a user code bundle: a zip archive whose manifest says its language and entrypoint.
type Bundle struct {
	Tenant string
	ID     string
	// Object is the archive's key in object storage.
	Object     string
	SHA256     string // hex; "" while pending
	Size       int64  // the archive's bytes
	Language   string // python, node or binary
	Entrypoint string // the manifest's
	Manifest   json.RawMessage
	UploadedBy string // the id of the API key that uploaded it
	CreatedAt  time.Time
	// FinalizedAt is when its archive was checked and recorded; zero while a two-step upload is
	// pending.
	FinalizedAt time.Time
	DisabledAt  time.Time // zero unless disabled
	DisabledBy  string    // the id of the API key that disabled it
}

// Pending reports whether the bundle awaits its archive (a two-step upload not finalized).
func (b *Bundle) Pending() bool { return b.FinalizedAt.IsZero() }

// Disabled reports whether the bundle was disabled.
func (b *Bundle) Disabled() bool { return !b.DisabledAt.IsZero() }

// BundleListParams selects a page of a tenant's bundles, newest first.
type BundleListParams struct {
	Tenant string
	// Before continues a listing: only bundles older than this one (by CreatedAt, then ID).
	BeforeCreated time.Time
	BeforeID      string
	Limit         int
}
