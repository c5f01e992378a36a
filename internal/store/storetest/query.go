package storetest

import (
	"encoding/json"
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
