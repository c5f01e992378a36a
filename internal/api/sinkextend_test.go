package api_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
)

// POST /internal/sink/extend keeps a claimed message the sink's for visibility_seconds from now,
// for the claim's latest receipt only: a stale receipt, a settled message, an unknown id and a bad
// body are each refused with their own answer, and change nothing.
func TestInternalSinkExtendIsFencedByTheReceipt(t *testing.T) {
	forEachClockedWorkerDriver(t, time.UnixMilli(1_700_000_000_000), func(t *testing.T, w *workerAPI, clock *clockwork.FakeClock) {
		ctx := context.Background()
		dsUUID := w.buffered()
		jobID, ids := w.submit(lifecycle.TaskSpec{Key: "scan", Name: "op"})
		taskID := ids["scan"]
		// A queued message, as a publish leaves it.
		rec := &store.BufferPublish{TaskID: taskID, Attempt: 1, BatchURI: "s3://trace-scratch/buffers/alert_events/" + taskID + "/1/b.jsonl",
			JobID: jobID, Tenant: "acme", DatasetUUID: dsUUID, DatasetVersion: w.bufferedVersion(), CreatedAt: clock.Now()}
		if err := w.st.InTx(ctx, func(tx store.Tx) error { _, err := tx.BufferPublishInsert(ctx, rec); return err }); err != nil {
			t.Fatal(err)
		}
		claim := func(want int) {
			t.Helper()
			msgs := wantOK(t, w.post(w.internal.URL, "/internal/sink/claim", fmt.Sprintf(`{"id":%d,"visibility_seconds":30}`, rec.ID)))["messages"].([]any)
			if len(msgs) != want || (want == 1 && msgs[0].(map[string]any)["id"] != float64(rec.ID)) {
				t.Fatalf("claim: %v, want %d message", msgs, want)
			}
		}
		extend := func(body string) response {
			t.Helper()
			return w.post(w.internal.URL, "/internal/sink/extend", body)
		}
		body := func(receipt, seconds int) string {
			return fmt.Sprintf(`{"id":%d,"receive_count":%d,"visibility_seconds":%d}`, rec.ID, receipt, seconds)
		}
		stored := func() *store.BufferPublish {
			t.Helper()
			p, err := w.st.BufferPublishGet(ctx, rec.ID)
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
		refused := func(what, body string, status int, text string) {
			t.Helper()
			before := fencedState(t, w, jobID, taskID)
			res := extend(body)
			msg, _ := res.Body["message"].(string)
			if status != http.StatusBadRequest {
				msg, _ = res.Body["error"].(string)
			}
			if res.Status != status || !strings.Contains(msg, text) {
				t.Errorf("%s: %d %s, want %d with %q", what, res.Status, res.Raw, status, text)
			}
			if fencedState(t, w, jobID, taskID) != before {
				t.Errorf("%s changed the message", what)
			}
		}

		// Claimed for 30 s, extended 20 s later for 30 s from then: 35 s after the claim it is
		// still the sink's.
		claim(1)
		clock.Advance(20 * time.Second)
		ok := wantOK(t, extend(body(1, 30)))
		wantKeys(t, "extend answer", ok, "ok", "visible_until")
		until, err := time.Parse(time.RFC3339Nano, fmt.Sprint(ok["visible_until"]))
		if want := clock.Now().Add(30 * time.Second); err != nil || ok["ok"] != true || !until.Equal(want) || !stored().VisibleAt.Equal(want) {
			t.Fatalf("extend: %v (%v); stored visible at %v, want %v", ok, err, stored().VisibleAt, want)
		}
		clock.Advance(15 * time.Second)
		claim(0)

		// Bad bodies.
		for _, c := range []struct{ body, text string }{
			{`{}`, "id and receive_count are required"},
			{fmt.Sprintf(`{"id":%d,"visibility_seconds":30}`, rec.ID), "id and receive_count are required"},
			{`{"receive_count":1,"visibility_seconds":30}`, "id and receive_count are required"},
			{fmt.Sprintf(`{"id":%d,"receive_count":1}`, rec.ID), "visibility_seconds must be an integer from 1 to 3600"},
			{body(1, 0), "visibility_seconds must be an integer from 1 to 3600"},
			{body(1, -5), "visibility_seconds must be an integer from 1 to 3600"},
			{body(1, 3601), "visibility_seconds must be an integer from 1 to 3600"},
			{fmt.Sprintf(`{"id":%d,"receive_count":1,"visibility_seconds":1.5}`, rec.ID),
				"json: cannot unmarshal number 1.5 into Go struct field SinkExtend.visibility_seconds of type int"},
			{fmt.Sprintf(`{"id":"%d","receive_count":1,"visibility_seconds":30}`, rec.ID),
				"json: cannot unmarshal string into Go struct field SinkExtend.id of type int64"},
			{`[1]`, "JSON object"},
			{``, "request body is empty"},
		} {
			refused("body "+c.body, c.body, http.StatusBadRequest, c.text)
		}
		refused("an unknown id", fmt.Sprintf(`{"id":%d,"receive_count":1,"visibility_seconds":30}`, rec.ID+1000),
			http.StatusNotFound, "Buffer batch not found")

		// Its visibility runs out and another claim takes it over: the first receipt, and one no
		// claim handed out, are stale.
		clock.Advance(time.Minute)
		claim(1)
		const notClaimed = "The buffer batch is not claimed by this receive (another receive took it over, or it is settled)"
		refused("a stale receipt", body(1, 30), http.StatusConflict, notClaimed)
		refused("a receipt from the future", body(3, 30), http.StatusConflict, notClaimed)
		if got := stored(); got.ReceiveCount != 2 || !got.VisibleAt.Equal(clock.Now().Add(30*time.Second)) {
			t.Fatalf("after the refusals: receive %d, visible at %v", got.ReceiveCount, got.VisibleAt)
		}
		wantOK(t, extend(body(2, 3600)))

		// Once committed it is no one's to extend.
		wantOK(t, w.post(w.internal.URL, "/internal/sink/commit", fmt.Sprintf(`{"id":%d}`, rec.ID)))
		refused("a committed message", body(2, 30), http.StatusConflict, notClaimed)
	})
}
