// Contract of the outbox: insertion, listing, the relay's queries, unsent messages by key and the
// backlog.

package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/baton-dev/baton/internal/store"
)

func testOutbox(t *testing.T, st store.Store) {
	ctx := t.Context()
	if got := outboxAfter(t, st, 0, 10); len(got) != 0 {
		t.Fatalf("OutboxAfter on an empty store: %d messages", len(got))
	}
	first := []*store.OutboxMessage{
		{Topic: "task.ready", Key: "q1", Payload: json.RawMessage(`{"taskId": "t1"}`), AvailableAt: t0, CreatedAt: t0},
		{Topic: "task.ready", Key: "", Payload: json.RawMessage("[1,  2]"), AvailableAt: at(time.Minute), CreatedAt: at(time.Second)},
		{Topic: "job.done", Key: "tenant", Payload: json.RawMessage(`"x"`), AvailableAt: at(-time.Second), CreatedAt: at(2 * time.Second)},
	}
	inTx(t, st, func(tx store.Tx) error { return tx.OutboxInsertMany(ctx, first) })
	got := outboxAfter(t, st, 0, 10)
	if len(got) != len(first) {
		t.Fatalf("OutboxAfter(0) = %d messages, want %d", len(got), len(first))
	}
	for i, m := range got {
		if m.ID <= 0 || (i > 0 && m.ID <= got[i-1].ID) {
			t.Errorf("message %d: id %d not positive and increasing", i, m.ID)
		}
		checkSame(t, fmt.Sprintf("message %d", i), first[i], m, "ID")
	}
	page := outboxAfter(t, st, got[0].ID, 1)
	if len(page) != 1 || page[0].ID != got[1].ID {
		t.Errorf("OutboxAfter(first, 1) = %v", page)
	}
	if page := outboxAfter(t, st, got[2].ID, 10); len(page) != 0 {
		t.Errorf("OutboxAfter(last) = %d messages", len(page))
	}

	second := []*store.OutboxMessage{{Topic: "task.ready", Key: "q2", Payload: json.RawMessage(`{}`), AvailableAt: t0, CreatedAt: t0}}
	inTx(t, st, func(tx store.Tx) error {
		if err := tx.OutboxInsertMany(ctx, second); err != nil {
			return err
		}
		if got := outboxAfter(t, tx, got[2].ID, 10); len(got) != 1 {
			t.Errorf("Tx.OutboxAfter after insert: %d messages", len(got))
		}
		return nil
	})
	page = outboxAfter(t, st, got[2].ID, 10)
	if len(page) != 1 {
		t.Fatalf("OutboxAfter(last of the first batch) = %d messages, want 1", len(page))
	}
	checkSame(t, "second batch", second[0], page[0], "ID")
}

// ---------------------------------------------------------------------------------------------
// Outbox relay queries

// claimOutbox runs OutboxClaim in a transaction it rolls back.
func claimOutbox(t *testing.T, st store.Store, now time.Time, limit int) []*store.OutboxMessage {
	t.Helper()
	rollback := errors.New("rollback")
	var out []*store.OutboxMessage
	err := st.InTx(t.Context(), func(tx store.Tx) error {
		var err error
		if out, err = tx.OutboxClaim(t.Context(), store.OutboxClaimParams{Now: now, Limit: limit}); err != nil {
			return err
		}
		return rollback
	})
	if !errors.Is(err, rollback) {
		t.Fatalf("ClaimOutbox: %v", err)
	}
	return out
}

func outboxIDs(msgs []*store.OutboxMessage) []int64 {
	ids := make([]int64, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	return ids
}

func testOutboxRelayQueries(t *testing.T, st store.Store) {
	ctx := t.Context()
	in := []*store.OutboxMessage{
		{Topic: "task.ready", Key: "q1", Payload: json.RawMessage(`{"task_id":"a"}`), AvailableAt: t0, CreatedAt: t0},
		{Topic: "task.ready", Key: "q2", Payload: json.RawMessage(`{"task_id":"b"}`), AvailableAt: at(-time.Minute), CreatedAt: t0},
		{Topic: "task.ready", Key: "q3", Payload: json.RawMessage(`{"task_id":"c"}`), AvailableAt: at(time.Minute), CreatedAt: t0},
		{Topic: "buffer.batch", Key: "ds", Payload: json.RawMessage(`{}`), AvailableAt: t0, CreatedAt: t0},
	}
	inTx(t, st, func(tx store.Tx) error { return tx.OutboxInsertMany(ctx, in) })
	all := outboxAfter(t, st, 0, 10)
	if len(all) != 4 {
		t.Fatalf("OutboxAfter = %d messages, want 4", len(all))
	}
	a, b, c, d := all[0].ID, all[1].ID, all[2].ID, all[3].ID

	// Due and unsent only, oldest first, at most limit, every field read back.
	got := claimOutbox(t, st, t0, 10)
	if want := []int64{a, b, d}; !slices.Equal(outboxIDs(got), want) {
		t.Fatalf("ClaimOutbox(t0) = %v, want %v", outboxIDs(got), want)
	}
	checkSame(t, "claimed message", in[0], got[0], "ID")
	if got := claimOutbox(t, st, t0, 2); !slices.Equal(outboxIDs(got), []int64{a, b}) {
		t.Errorf("ClaimOutbox(t0, 2) = %v, want [%d %d]", outboxIDs(got), a, b)
	}

	// Sent messages are no longer claimable; unknown ids are ignored.
	inTx(t, st, func(tx store.Tx) error { return tx.OutboxMarkSent(ctx, []int64{a, d, 1 << 40}, t0) })
	inTx(t, st, func(tx store.Tx) error { return tx.OutboxMarkSent(ctx, nil, t0) })
	if got := claimOutbox(t, st, at(time.Hour), 10); !slices.Equal(outboxIDs(got), []int64{b, c}) {
		t.Errorf("ClaimOutbox after MarkOutboxSent = %v, want [%d %d]", outboxIDs(got), b, c)
	}

	// A retry sets the attempts and postpones the message.
	inTx(t, st, func(tx store.Tx) error {
		return tx.OutboxRetry(ctx, store.OutboxRetryParams{ID: b, Attempts: 3, NextAt: at(2 * time.Minute)})
	})
	if got := claimOutbox(t, st, at(time.Minute), 10); !slices.Equal(outboxIDs(got), []int64{c}) {
		t.Errorf("ClaimOutbox before the retry time = %v, want [%d]", outboxIDs(got), c)
	}
	got = claimOutbox(t, st, at(2*time.Minute), 10)
	if !slices.Equal(outboxIDs(got), []int64{b, c}) {
		t.Fatalf("ClaimOutbox at the retry time = %v, want [%d %d]", outboxIDs(got), b, c)
	}
	if got[0].Attempts != 3 || !got[0].AvailableAt.Equal(at(2*time.Minute)) {
		t.Errorf("retried message: attempts %d, available at %v; want 3, %v", got[0].Attempts, got[0].AvailableAt, at(2*time.Minute))
	}
	err := st.InTx(ctx, func(tx store.Tx) error {
		return tx.OutboxRetry(ctx, store.OutboxRetryParams{ID: 1 << 40, Attempts: 1, NextAt: t0})
	})
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RetryOutbox(unknown) = %v, want ErrNotFound", err)
	}

	// Pruning deletes sent messages older than the cutoff, never unsent ones, at most limit.
	inTx(t, st, func(tx store.Tx) error { return tx.OutboxMarkSent(ctx, []int64{c}, at(time.Hour)) })
	var n int
	inTx(t, st, func(tx store.Tx) error {
		var err error
		n, err = tx.OutboxDeleteSent(ctx, at(time.Minute), 1)
		return err
	})
	if n != 1 {
		t.Errorf("DeleteSentOutbox(limit 1) = %d, want 1", n)
	}
	inTx(t, st, func(tx store.Tx) error {
		var err error
		n, err = tx.OutboxDeleteSent(ctx, at(time.Minute), 10)
		return err
	})
	if n != 1 {
		t.Errorf("second DeleteSentOutbox = %d, want 1", n)
	}
	if left := outboxIDs(outboxAfter(t, st, 0, 10)); !slices.Equal(left, []int64{b, c}) {
		t.Errorf("after pruning: %v, want [%d %d] (unsent b, recently sent c)", left, b, c)
	}
}

// testOutboxDelete: OutboxDelete deletes the messages named, sent or not, and no other; an id
// without a message is ignored.
func testOutboxDelete(t *testing.T, st store.Store) {
	ctx := t.Context()
	inTx(t, st, func(tx store.Tx) error {
		return tx.OutboxInsertMany(ctx, []*store.OutboxMessage{
			{Topic: store.TopicDatasetEvent, Key: "a", Payload: json.RawMessage(`{}`), AvailableAt: t0, CreatedAt: t0},
			{Topic: store.TopicDatasetEvent, Key: "b", Payload: json.RawMessage(`{}`), AvailableAt: t0, CreatedAt: t0},
			{Topic: store.TopicDatasetEvent, Key: "c", Payload: json.RawMessage(`{}`), AvailableAt: t0, CreatedAt: t0},
		})
	})
	all := outboxIDs(outboxAfter(t, st, 0, 10))
	if len(all) != 3 {
		t.Fatalf("inserted %v, want 3 messages", all)
	}
	inTx(t, st, func(tx store.Tx) error { return tx.OutboxMarkSent(ctx, all[:1], at(time.Second)) })
	inTx(t, st, func(tx store.Tx) error { return tx.OutboxDelete(ctx, []int64{all[0], all[2], 1 << 40}) })
	if left := outboxIDs(outboxAfter(t, st, 0, 10)); !slices.Equal(left, all[1:2]) {
		t.Errorf("after OutboxDelete: %v, want %v", left, all[1:2])
	}
	inTx(t, st, func(tx store.Tx) error { return tx.OutboxDelete(ctx, nil) })
}

// ---------------------------------------------------------------------------------------------
// Unsent messages by key

// testOutboxUnsentByKey: OutboxUnsentByKey counts the unsent messages of a topic by key.
func testOutboxUnsentByKey(t *testing.T, st store.Store) {
	ctx := t.Context()
	key, otherKey := uuid.NewString(), uuid.NewString()
	inTx(t, st, func(tx store.Tx) error {
		return tx.OutboxInsertMany(ctx, []*store.OutboxMessage{
			{Topic: store.TopicDatasetEvent, Key: key, Payload: json.RawMessage(`{}`), AvailableAt: t0, CreatedAt: t0},
			{Topic: store.TopicDatasetEvent, Key: key, Payload: json.RawMessage(`{}`), AvailableAt: t0, CreatedAt: t0},
			{Topic: store.TopicDatasetEvent, Key: otherKey, Payload: json.RawMessage(`{}`), AvailableAt: t0, CreatedAt: t0},
			{Topic: "x", Key: key, Payload: json.RawMessage(`{}`), AvailableAt: t0, CreatedAt: t0},
		})
	})
	for _, c := range []struct {
		keys []string
		want int
	}{{[]string{key}, 2}, {[]string{key, otherKey}, 3}, {[]string{uuid.NewString()}, 0}, {nil, 0}} {
		if n, err := st.OutboxUnsentByKey(ctx, store.TopicDatasetEvent, c.keys); err != nil || n != c.want {
			t.Errorf("OutboxUnsentByKey(%v) = %d, %v; want %d", c.keys, n, err, c.want)
		}
	}
}

// ---------------------------------------------------------------------------------------------
// Backlog

func testOutboxBacklog(t *testing.T, st store.Store) {
	ctx := t.Context()
	backlog := func() store.OutboxBacklog {
		t.Helper()
		b, err := st.OutboxBacklog(ctx)
		if err != nil {
			t.Fatalf("OutboxBacklog: %v", err)
		}
		return b
	}
	if b := backlog(); b != (store.OutboxBacklog{}) {
		t.Fatalf("OutboxBacklog of an empty outbox = %+v, want zero", b)
	}
	msgs := []*store.OutboxMessage{
		{Topic: "task.ready", Payload: json.RawMessage(`{}`), AvailableAt: at(time.Minute), CreatedAt: t0},
		{Topic: "task.ready", Payload: json.RawMessage(`{}`), AvailableAt: at(-time.Minute), CreatedAt: t0},
		{Topic: "task.ready", Payload: json.RawMessage(`{}`), AvailableAt: at(time.Hour), CreatedAt: t0},
	}
	inTx(t, st, func(tx store.Tx) error { return tx.OutboxInsertMany(ctx, msgs) })
	if b, want := backlog(), (store.OutboxBacklog{Unsent: 3, OldestAvailableAt: at(-time.Minute)}); !b.OldestAvailableAt.Equal(want.OldestAvailableAt) || b.Unsent != want.Unsent {
		t.Errorf("OutboxBacklog = %+v, want %+v", b, want)
	}
	// Sent messages leave the backlog, the oldest first here.
	sent := outboxAfter(t, st, 0, 10)
	inTx(t, st, func(tx store.Tx) error { return tx.OutboxMarkSent(ctx, []int64{sent[1].ID}, at(time.Second)) })
	if b := backlog(); b.Unsent != 2 || !b.OldestAvailableAt.Equal(at(time.Minute)) {
		t.Errorf("OutboxBacklog after one sent = %+v, want 2 unsent, the oldest available at %v", b, at(time.Minute))
	}
	inTx(t, st, func(tx store.Tx) error {
		return tx.OutboxMarkSent(ctx, []int64{sent[0].ID, sent[2].ID}, at(time.Second))
	})
	if b := backlog(); b != (store.OutboxBacklog{}) {
		t.Errorf("OutboxBacklog with everything sent = %+v, want zero", b)
	}
}
