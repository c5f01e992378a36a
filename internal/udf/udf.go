// Package udf keeps tenants' user code bundles: an upload is checked (internal/bundle) and stored
// immutably in object storage with its record, listed and disabled; a deploy pins the bundle a
// job runs (its id, hash, language and entrypoint); and the attempt of such a job downloads it
// with its capability token, unless it was disabled since.
package udf

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/baton-dev/baton/internal/blob"
	"github.com/baton-dev/baton/internal/bundle"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/wire"
)

var (
	// ErrNotFound: the tenant has no bundle by that id.
	ErrNotFound = errors.New("bundle not found")
	// ErrTooLarge: an upload's archive is over Limits.Archive.
	ErrTooLarge = errors.New("the bundle's archive is over the size limit")
	// ErrNoStorage: the server has no object storage to keep bundles in.
	ErrNoStorage = errors.New("user code bundles need object storage: start the server with --blob-url")
)

// StateError refuses what a bundle's state does not allow: finalizing one twice, downloading
// one that is pending or disabled, deploying a job onto one.
type StateError struct {
	ID      string
	Pending bool // the bundle awaits its archive
	// DisabledAt is when it was disabled; zero unless it was.
	DisabledAt time.Time
	Message    string
}

func (e *StateError) Error() string { return e.Message }

// Config configures a Registry.
type Config struct {
	Store store.Bundles
	// Blob is where archives are kept; nil refuses every upload (ErrNoStorage).
	Blob *blob.Store
	// Limits are the checks every archive passes (bundle.DefaultLimits where zero); Limits.Archive
	// caps an upload.
	Limits bundle.Limits
	// TempDir is where an upload is spooled while it is checked (os.TempDir() if "").
	TempDir string
	Now     func() time.Time // time.Now if nil
}

// Registry keeps the bundles of every tenant.
type Registry struct {
	st     store.Bundles
	blob   *blob.Store
	limits bundle.Limits
	tmp    string
	now    func() time.Time
}

// New returns the registry c configures.
func New(c Config) *Registry {
	r := &Registry{st: c.Store, blob: c.Blob, limits: c.Limits.OrDefaults(), tmp: c.TempDir, now: c.Now}
	if r.now == nil {
		r.now = time.Now
	}
	return r
}

// Limits are the checks every archive passes.
func (r *Registry) Limits() bundle.Limits { return r.limits }

// objectKey is where a bundle's archive is kept: tenants' bundles apart, by id.
func objectKey(tenant, id string) string {
	return "udf-bundles/" + hex.EncodeToString([]byte(tenant)) + "/" + id + ".zip"
}

// newID is a fresh bundle id.
func newID() string {
	b := make([]byte, 10)
	_, _ = rand.Read(b)
	return "bndl_" + hex.EncodeToString(b)
}

// Upload checks the archive body holds (at most Limits.Archive bytes; more is ErrTooLarge) and
// stores it, with its record, as a new bundle of tenant uploaded by the API
// key keyID. A refused archive is a *bundle.Error and stores nothing.
func (r *Registry) Upload(ctx context.Context, tenant, keyID string, body io.Reader) (*store.Bundle, error) {
	if r.blob == nil {
		return nil, ErrNoStorage
	}
	f, err := r.spool(body)
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	b := &store.Bundle{Tenant: tenant, ID: newID(), UploadedBy: keyID, CreatedAt: r.now().UTC().Truncate(time.Millisecond)}
	b.Object = objectKey(tenant, b.ID)
	if err := r.check(f, b); err != nil {
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("udf: %w", err)
	}
	if err := r.blob.PutFrom(ctx, b.Object, f, "application/zip"); err != nil {
		return nil, fmt.Errorf("udf: store bundle %s: %w", b.ID, err)
	}
	b.FinalizedAt = b.CreatedAt
	if err := r.st.BundleInsert(ctx, b); err != nil {
		_ = r.blob.Delete(context.WithoutCancel(ctx), b.Object)
		return nil, fmt.Errorf("udf: record bundle %s: %w", b.ID, err)
	}
	return b, nil
}

// spool copies body into a temporary file, refusing one over the archive limit.
func (r *Registry) spool(body io.Reader) (*os.File, error) {
	f, err := os.CreateTemp(r.tmp, "baton-bundle-*.zip")
	if err != nil {
		return nil, fmt.Errorf("udf: spool the upload: %w", err)
	}
	n, err := io.Copy(f, io.LimitReader(body, r.limits.Archive+1))
	if err == nil && n > r.limits.Archive {
		err = fmt.Errorf("%w: the limit is %d bytes", ErrTooLarge, r.limits.Archive)
	}
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return f, nil
}

// check verifies the archive in f (bundle.Check) and fills b with what it holds.
func (r *Registry) check(f *os.File, b *store.Bundle) error {
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("udf: %w", err)
	}
	m, sum, err := bundle.Check(f, fi.Size(), r.limits)
	if err != nil {
		return err
	}
	b.SHA256, b.Size, b.Language, b.Entrypoint = sum, fi.Size(), m.Runtime, m.Entrypoint
	b.Manifest, err = json.Marshal(m)
	return err
}

// Upload2 is the first step of a two-step upload: where to PUT the archive, until when.
type Upload2 struct {
	URL       string
	Method    string
	Headers   map[string]string
	ExpiresAt time.Time
}

// uploadExpiry is how long a pre-signed upload URL is good for.
const uploadExpiry = 15 * time.Minute

// Create opens a two-step upload: a pending bundle of tenant, and a pre-signed URL its archive
// is PUT to, straight into object storage; Finalize then checks and records it. Object storage
// that cannot sign URLs (a directory) answers an error wrapping blob.ErrNoSignedURLs.
func (r *Registry) Create(ctx context.Context, tenant, keyID string) (*store.Bundle, *Upload2, error) {
	if r.blob == nil {
		return nil, nil, ErrNoStorage
	}
	b := &store.Bundle{Tenant: tenant, ID: newID(), UploadedBy: keyID, CreatedAt: r.now().UTC().Truncate(time.Millisecond)}
	b.Object = objectKey(tenant, b.ID)
	u, err := r.blob.SignedURL(ctx, b.Object, "PUT", uploadExpiry)
	if err != nil {
		return nil, nil, err
	}
	if err := r.st.BundleInsert(ctx, b); err != nil {
		return nil, nil, fmt.Errorf("udf: record bundle %s: %w", b.ID, err)
	}
	return b, &Upload2{URL: u, Method: "PUT", Headers: map[string]string{"Content-Type": "application/zip"},
		ExpiresAt: b.CreatedAt.Add(uploadExpiry)}, nil
}

// Finalize checks the archive a two-step upload PUT and records what it holds. A bundle that is
// not pending is a *StateError; a missing or refused archive is a *bundle.Error, and the bundle
// stays pending (the archive can be PUT again while the URL holds).
func (r *Registry) Finalize(ctx context.Context, tenant, id string) (*store.Bundle, error) {
	b, err := r.Get(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	if !b.Pending() {
		return nil, &StateError{ID: id, Message: fmt.Sprintf("bundle %s is finalized already", id)}
	}
	obj, err := r.blob.Get(ctx, b.Object)
	if errors.Is(err, blob.ErrNotFound) {
		return nil, &bundle.Error{Reason: fmt.Sprintf("no archive was uploaded for bundle %s: PUT it to the upload_url first", id)}
	}
	if err != nil {
		return nil, fmt.Errorf("udf: read bundle %s: %w", id, err)
	}
	f, err := r.spool(obj)
	obj.Close()
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if err := r.check(f, b); err != nil {
		return nil, err
	}
	b.FinalizedAt = r.now().UTC().Truncate(time.Millisecond)
	if err := r.st.BundleFinalize(ctx, b); err != nil {
		return nil, fmt.Errorf("udf: finalize bundle %s: %w", id, err)
	}
	return b, nil
}

// Get returns the tenant's bundle id.
func (r *Registry) Get(ctx context.Context, tenant, id string) (*store.Bundle, error) {
	b, err := r.st.BundleGet(ctx, tenant, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return b, err
}

// List returns a page of the tenant's bundles, newest first.
func (r *Registry) List(ctx context.Context, p store.BundleListParams) ([]*store.Bundle, error) {
	return r.st.BundleList(ctx, p)
}

// Disable disables the tenant's bundle id for good, by the API key keyID: the tasks of jobs that
// run it fail from now on instead of running it, and no deploy may name it.
func (r *Registry) Disable(ctx context.Context, tenant, id, keyID string) (*store.Bundle, error) {
	b, err := r.st.BundleDisable(ctx, tenant, id, keyID, r.now().UTC().Truncate(time.Millisecond))
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return b, err
}

// usable refuses a bundle that is pending or disabled; what says what was asked of it.
func usable(b *store.Bundle, what string) error {
	switch {
	case b.Disabled():
		return &StateError{ID: b.ID, DisabledAt: b.DisabledAt, Message: fmt.Sprintf(
			"bundle %s was disabled at %s: %s", b.ID, b.DisabledAt.Format(time.RFC3339), what)}
	case b.Pending():
		return &StateError{ID: b.ID, Pending: true, Message: fmt.Sprintf(
			"bundle %s is not finalized: POST /v1/udf/bundles/%s/finalize once its archive is uploaded", b.ID, b.ID)}
	}
	return nil
}

// Pin resolves a job's udf for a deploy: the tenant's bundle id, which must be finalized and not
// disabled, started at entrypoint ("" the manifest's), which must name a file of it. A refusal
// is a *StateError, ErrNotFound or a *bundle.Error, each with a message for the job's udf block.
func (r *Registry) Pin(ctx context.Context, tenant, id, entrypoint string) (*wire.Bundle, error) {
	b, err := r.Get(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	if err := usable(b, "a job may not run it"); err != nil {
		return nil, err
	}
	m, err := bundle.DecodeManifest(b.Manifest)
	if err != nil {
		return nil, fmt.Errorf("udf: bundle %s: its recorded manifest: %w", id, err)
	}
	if entrypoint == "" {
		entrypoint = m.Entrypoint
	}
	if _, _, err := m.EntryFile(entrypoint); err != nil {
		return nil, err
	}
	return &wire.Bundle{ID: b.ID, SHA256: b.SHA256, Size: b.Size, Language: b.Language, Entrypoint: entrypoint,
		Download: wire.BundleDownload}, nil
}

// Open opens the archive of the tenant's bundle id for an attempt to download: a disabled or
// pending bundle is a *StateError.
func (r *Registry) Open(ctx context.Context, tenant, id string) (*store.Bundle, io.ReadCloser, error) {
	b, err := r.Get(ctx, tenant, id)
	if err != nil {
		return nil, nil, err
	}
	if err := usable(b, "its tasks fail instead of running it"); err != nil {
		return nil, nil, err
	}
	if r.blob == nil {
		return nil, nil, ErrNoStorage
	}
	obj, err := r.blob.Get(ctx, b.Object)
	if err != nil {
		return nil, nil, fmt.Errorf("udf: read bundle %s: %w", id, err)
	}
	return b, obj, nil
}
