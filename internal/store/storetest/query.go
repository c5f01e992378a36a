package storetest

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/store"
)

// testQueryAuditRoundTripNewestFirstPerTenant: a query audit record reads back as written, a
// tenant lists only its own records, newest first, a page at a time.
func testQueryAuditRoundTripNewestFirstPerTenant(t *testing.T, st store.Store) {
	ctx := t.Context()
	write := func(a *store.QueryAudit) {
		t.Helper()
		if err := st.InTx(ctx, func(tx store.Tx) error { return tx.QueryAuditInsert(ctx, a) }); err != nil {
			t.Fatal(err)
		}
		if a.ID <= 0 {
			t.Fatalf("QueryAuditInsert left ID %d", a.ID)
		}
	}
	first := &store.QueryAudit{Tenant: "acme", At: t0, Caller: "key:k1", SQLHash: "ab12",
		Datasets: json.RawMessage(`[{"uuid":"u1","name":"alerts","version":"v1"}]`), Status: "ok", RowCount: 7, DurationMS: 12}
	write(first)
	write(&store.QueryAudit{Tenant: "globex", At: at(time.Second), Caller: "key:k9", SQLHash: "ff", Status: "rejected"})
	second := &store.QueryAudit{Tenant: "acme", At: at(2 * time.Second), Caller: "task:t1/2", SQLHash: "cd34", Status: "timeout", DurationMS: 300000}
	write(second)

	got, err := st.QueryAuditList(ctx, store.QueryAuditListParams{Tenant: "acme", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != second.ID || got[1].ID != first.ID {
		t.Fatalf("acme's audit = %+v, want its two records newest first", got)
	}
	g := got[1]
	if g.Tenant != "acme" || !g.At.Equal(t0) || g.Caller != "key:k1" || g.SQLHash != "ab12" || g.Status != "ok" ||
		g.RowCount != 7 || g.DurationMS != 12 || string(g.Datasets) != string(first.Datasets) {
		t.Errorf("record read back as %+v, want %+v", g, first)
	}
	if string(got[0].Datasets) != "[]" {
		t.Errorf("a record written without datasets reads back with %s, want []", got[0].Datasets)
	}
	page, err := st.QueryAuditList(ctx, store.QueryAuditListParams{Tenant: "acme", BeforeID: second.ID, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(page) != 1 || page[0].ID != first.ID {
		t.Errorf("the page before %d = %+v, want the first record alone", second.ID, page)
	}
	one, err := st.QueryAuditList(ctx, store.QueryAuditListParams{Tenant: "acme", Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(one) != 1 || one[0].ID != second.ID {
		t.Errorf("a page of 1 = %+v, want the newest record", one)
	}
}

// testRetentionDeletesExpiredQueryAudit: retention deletes query audit records older than their
// tenant's retention, a batch at a time, oldest first, and keeps a tenant's kept forever.
func testRetentionDeletesExpiredQueryAudit(t *testing.T, st store.Store) {
	ctx := t.Context()
	var ids []int64
	for i, rec := range []struct {
		tenant string
		age    time.Duration
	}{
		{"acme", 72 * time.Hour}, {"acme", 48 * time.Hour}, {"acme", time.Hour},
		{"globex", 72 * time.Hour}, {"keep", 1000 * time.Hour},
	} {
		a := &store.QueryAudit{Tenant: rec.tenant, At: at(100*time.Hour - rec.age), Caller: "key:k", SQLHash: fmt.Sprint(i), Status: "ok"}
		if err := st.InTx(ctx, func(tx store.Tx) error { return tx.QueryAuditInsert(ctx, a) }); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, a.ID)
	}
	p := store.RetentionPolicy{Now: at(100 * time.Hour), Retention: 24 * time.Hour,
		Tenants: map[string]time.Duration{"globex": 100 * time.Hour, "keep": 0}, Limit: 1}
	deleteExpired := func() int {
		t.Helper()
		var n store.RetentionCounts
		if err := st.InTx(ctx, func(tx store.Tx) (err error) { n, err = tx.JobDeleteExpired(ctx, p); return err }); err != nil {
			t.Fatal(err)
		}
		return n.QueryAudit
	}
	if n := deleteExpired(); n != 1 {
		t.Errorf("a batch of 1 deleted %d records", n)
	}
	if n := deleteExpired(); n != 1 {
		t.Errorf("the second batch deleted %d records", n)
	}
	if n := deleteExpired(); n != 0 {
		t.Errorf("nothing more has expired, yet %d records were deleted", n)
	}
	left := map[string]int{}
	for _, tenant := range []string{"acme", "globex", "keep"} {
		recs, err := st.QueryAuditList(ctx, store.QueryAuditListParams{Tenant: tenant, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		left[tenant] = len(recs)
		if tenant == "acme" && (len(recs) != 1 || recs[0].ID != ids[2]) {
			t.Errorf("acme keeps %+v, want its record of an hour ago", recs)
		}
	}
	if left["globex"] != 1 || left["keep"] != 1 {
		t.Errorf("records left %v: globex's retention is 100h and keep's forever", left)
	}
}
