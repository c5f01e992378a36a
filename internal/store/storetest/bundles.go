// Bundles: records of user code bundles, pending until finalized, disabled for good; and what
// workers say of themselves (their isolation).

package storetest

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/store"
)

func newBundle(tenant, id string, created time.Time) *store.Bundle {
	return &store.Bundle{Tenant: tenant, ID: id, Object: "bundles/" + tenant + "/" + id + ".zip", SHA256: "ab12",
		Size: 42, Language: "python", Entrypoint: "main.py", Manifest: json.RawMessage(`{"schema_version":1}`),
		UploadedBy: "key-1", CreatedAt: created, FinalizedAt: created}
}

func testBundleRoundTripAndTenants(t *testing.T, st store.Store) {
	ctx := t.Context()
	b := newBundle("acme", "bndl_1", t0)
	if err := st.BundleInsert(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := st.BundleInsert(ctx, newBundle("acme", "bndl_1", t0)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("a second bundle with the id: %v, want ErrConflict", err)
	}
	if err := st.BundleInsert(ctx, newBundle("other", "bndl_1", t0)); err != nil {
		t.Errorf("another tenant's bundle with the same id: %v", err)
	}
	got, err := st.BundleGet(ctx, "acme", "bndl_1")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, b) {
		t.Errorf("BundleGet = %+v, want %+v", got, b)
	}
	if _, err := st.BundleGet(ctx, "nobody", "bndl_1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("another tenant's get: %v, want ErrNotFound", err)
	}
}

func testBundleListNewestFirstWithPaging(t *testing.T, st store.Store) {
	ctx := t.Context()
	for i, id := range []string{"bndl_a", "bndl_b", "bndl_c", "bndl_d"} {
		if err := st.BundleInsert(ctx, newBundle("acme", id, at(time.Duration(i/2)*time.Minute))); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.BundleInsert(ctx, newBundle("other", "bndl_z", at(time.Hour))); err != nil {
		t.Fatal(err)
	}
	var ids []string
	p := store.BundleListParams{Tenant: "acme", Limit: 3}
	for {
		page, err := st.BundleList(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range page {
			ids = append(ids, b.ID)
		}
		if len(page) < p.Limit {
			break
		}
		last := page[len(page)-1]
		p.BeforeCreated, p.BeforeID = last.CreatedAt, last.ID
	}
	checkIDs(t, "bundles newest first", ids, []string{"bndl_d", "bndl_c", "bndl_b", "bndl_a"})
}

func testBundleFinalizeOnce(t *testing.T, st store.Store) {
	ctx := t.Context()
	b := &store.Bundle{Tenant: "acme", ID: "bndl_p", Object: "bundles/acme/bndl_p.zip", UploadedBy: "key-1", CreatedAt: t0}
	if err := st.BundleInsert(ctx, b); err != nil {
		t.Fatal(err)
	}
	got, err := st.BundleGet(ctx, "acme", "bndl_p")
	if err != nil || !got.Pending() {
		t.Fatalf("a two-step bundle before finalize: %+v, %v; want pending", got, err)
	}
	f := newBundle("acme", "bndl_p", t0)
	f.FinalizedAt = at(time.Minute)
	if err := st.BundleFinalize(ctx, f); err != nil {
		t.Fatal(err)
	}
	got, _ = st.BundleGet(ctx, "acme", "bndl_p")
	if got.Pending() || got.SHA256 != "ab12" || got.Size != 42 || got.Language != "python" || !got.FinalizedAt.Equal(at(time.Minute)) {
		t.Errorf("finalized bundle = %+v", got)
	}
	if err := st.BundleFinalize(ctx, f); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("finalizing twice: %v, want ErrNotFound", err)
	}
	f.Tenant = "other"
	if err := st.BundleFinalize(ctx, f); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("another tenant's finalize: %v, want ErrNotFound", err)
	}
}

func testBundleDisableKeepsTheFirst(t *testing.T, st store.Store) {
	ctx := t.Context()
	if err := st.BundleInsert(ctx, newBundle("acme", "bndl_1", t0)); err != nil {
		t.Fatal(err)
	}
	b, err := st.BundleDisable(ctx, "acme", "bndl_1", "key-2", at(time.Minute))
	if err != nil || !b.Disabled() || b.DisabledBy != "key-2" || !b.DisabledAt.Equal(at(time.Minute)) {
		t.Fatalf("disable: %+v, %v", b, err)
	}
	b, err = st.BundleDisable(ctx, "acme", "bndl_1", "key-3", at(time.Hour))
	if err != nil || b.DisabledBy != "key-2" || !b.DisabledAt.Equal(at(time.Minute)) {
		t.Errorf("disabling again: %+v, %v; want the first disable kept", b, err)
	}
	if _, err := st.BundleDisable(ctx, "other", "bndl_1", "key-2", t0); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("another tenant's disable: %v, want ErrNotFound", err)
	}
}

func testWorkerInfoPutReplaces(t *testing.T, st store.Store) {
	ctx := t.Context()
	for _, w := range []*store.WorkerInfo{
		{WorkerID: "w-1", Isolation: "landlock", SeenAt: t0},
		{WorkerID: "w-2", Isolation: "none", SeenAt: t0},
		{WorkerID: "w-1", Isolation: "namespaces", SeenAt: at(time.Minute)},
	} {
		if err := st.WorkerInfoPut(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	got, err := st.WorkerInfoList(ctx, []string{"w-1", "w-2", "w-3"})
	if err != nil {
		t.Fatal(err)
	}
	want := []*store.WorkerInfo{{WorkerID: "w-1", Isolation: "namespaces", SeenAt: at(time.Minute)}, {WorkerID: "w-2", Isolation: "none", SeenAt: t0}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("WorkerInfoList = %+v, want %+v", got, want)
	}
	if got, err := st.WorkerInfoList(ctx, nil); err != nil || len(got) != 0 {
		t.Errorf("WorkerInfoList(nil) = %v, %v", got, err)
	}
}
