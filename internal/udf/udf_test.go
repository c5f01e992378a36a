package udf_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/blob"
	"github.com/baton-dev/baton/internal/blob/blobtest"
	"github.com/baton-dev/baton/internal/bundle"
	"github.com/baton-dev/baton/internal/bundle/bundletest"
	"github.com/baton-dev/baton/internal/store/storetest"
	"github.com/baton-dev/baton/internal/udf"
)

func registry(t *testing.T, url string, opts blob.Options) (*udf.Registry, *blob.Store) {
	t.Helper()
	bs, err := blob.Open(context.Background(), url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bs.Close() })
	return udf.New(udf.Config{Store: storetest.OpenSQLite(t), Blob: bs, TempDir: t.TempDir()}), bs
}

var hello = map[string]string{"main.py": "print('{}')\n", "trace.py": "def handler(e, c):\n    return 1\n"}

// An upload is stored immutably and pinned as it is; a disabled bundle is neither pinned nor
// opened.
func TestUploadPinDisable(t *testing.T) {
	r, bs := registry(t, blobtest.File(t), blob.Options{})
	ctx := context.Background()
	b, err := r.Upload(ctx, "acme", "key-1", bytes.NewReader(bundletest.Zip(t, hello, bundle.Python, "main.py")))
	if err != nil {
		t.Fatal(err)
	}
	obj, err := bs.Get(ctx, b.Object)
	if err != nil {
		t.Fatalf("the archive is not in the store: %v", err)
	}
	obj.Close()
	pin, err := r.Pin(ctx, "acme", b.ID, "trace.handler")
	if err != nil || pin.SHA256 != b.SHA256 || pin.Entrypoint != "trace.handler" || pin.Language != "python" {
		t.Fatalf("Pin = %+v, %v", pin, err)
	}
	if pin, err := r.Pin(ctx, "acme", b.ID, ""); err != nil || pin.Entrypoint != "main.py" {
		t.Errorf("Pin with the bundle's own entrypoint = %+v, %v", pin, err)
	}
	var bad *bundle.Error
	if _, err := r.Pin(ctx, "acme", b.ID, "nope.handler"); !errors.As(err, &bad) {
		t.Errorf("an entrypoint of no file: %v, want a *bundle.Error", err)
	}
	if _, err := r.Pin(ctx, "globex", b.ID, ""); !errors.Is(err, udf.ErrNotFound) {
		t.Errorf("another tenant's pin: %v, want ErrNotFound", err)
	}
	if _, err := r.Disable(ctx, "acme", b.ID, "key-2"); err != nil {
		t.Fatal(err)
	}
	var state *udf.StateError
	if _, err := r.Pin(ctx, "acme", b.ID, ""); !errors.As(err, &state) || state.DisabledAt.IsZero() {
		t.Errorf("pinning a disabled bundle: %v", err)
	}
	if _, _, err := r.Open(ctx, "acme", b.ID); !errors.As(err, &state) {
		t.Errorf("opening a disabled bundle: %v", err)
	}
}

// A refused archive stores nothing; one over the limit is ErrTooLarge.
func TestUploadRefusals(t *testing.T) {
	r, bs := registry(t, blobtest.File(t), blob.Options{})
	ctx := context.Background()
	var bad *bundle.Error
	if _, err := r.Upload(ctx, "acme", "k", bytes.NewReader([]byte("not a zip"))); !errors.As(err, &bad) {
		t.Errorf("not a zip: %v", err)
	}
	big := udf.New(udf.Config{Store: storetest.OpenSQLite(t), Blob: bs, Limits: bundle.Limits{Archive: 100}, TempDir: t.TempDir()})
	if _, err := big.Upload(ctx, "acme", "k", bytes.NewReader(bundletest.Zip(t, hello, bundle.Python, "main.py"))); !errors.Is(err, udf.ErrTooLarge) {
		t.Errorf("over the limit: %v", err)
	}
	if keys, err := bs.List(ctx, "udf-bundles/"); err != nil || len(keys) != 0 {
		t.Errorf("refused uploads left %v (%v)", keys, err)
	}
	if _, _, err := r.Create(ctx, "acme", "k"); !errors.Is(err, blob.ErrNoSignedURLs) {
		t.Errorf("a two-step upload on a directory: %v, want ErrNoSignedURLs", err)
	}
}

// On S3 a bundle is uploaded in two steps: a pre-signed PUT straight to the bucket, then
// finalize, which checks what was PUT.
func TestTwoStepUploadOnS3(t *testing.T) {
	url, opts := blobtest.S3(t)
	r, _ := registry(t, url, opts)
	ctx := context.Background()
	b, up, err := r.Create(ctx, "acme", "key-1")
	if err != nil {
		t.Fatal(err)
	}
	if !b.Pending() || up.Method != "PUT" || up.ExpiresAt.Before(time.Now()) {
		t.Fatalf("Create = %+v, %+v", b, up)
	}
	if _, err := r.Finalize(ctx, "acme", b.ID); err == nil {
		t.Fatal("finalize before anything was PUT succeeded")
	}
	if _, err := r.Pin(ctx, "acme", b.ID, ""); err == nil {
		t.Fatal("a pending bundle was pinned")
	}
	zip := bundletest.Zip(t, hello, bundle.Python, "main.py")
	req, _ := http.NewRequest(http.MethodPut, up.URL, bytes.NewReader(zip))
	for k, v := range up.Headers {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode/100 != 2 {
		t.Fatalf("PUT to the upload URL: %v %v", res, err)
	}
	res.Body.Close()
	done, err := r.Finalize(ctx, "acme", b.ID)
	if err != nil || done.Pending() || done.Size != int64(len(zip)) || done.Language != "python" {
		t.Fatalf("Finalize = %+v, %v", done, err)
	}
	var state *udf.StateError
	if _, err := r.Finalize(ctx, "acme", b.ID); !errors.As(err, &state) {
		t.Errorf("finalizing twice: %v", err)
	}
	if _, obj, err := r.Open(ctx, "acme", b.ID); err != nil {
		t.Errorf("Open: %v", err)
	} else {
		obj.Close()
	}
}
