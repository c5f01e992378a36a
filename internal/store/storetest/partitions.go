// Contract of the partition commits of replace outputs: their history, each partition's current
// commit, and the attempts a staging collector must keep.

package storetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/store"
)

// commit is a partition commit of dataset ds, version v, of tenant acme by attempt 1 of task,
// made after d.
func commit(ds, v, key string, start, end int64, task string, d time.Duration) *store.PartitionCommit {
	return &store.PartitionCommit{Tenant: "acme", DatasetUUID: ds, DatasetVersion: v, PartitionKey: key, Start: start, End: end,
		Location: fmt.Sprintf("s3://data/baton/datasets/%s/%s/1/%s/", ds, task, key), Bytes: 1 << 40, TaskID: task, Attempt: 1,
		CommittedAt: at(d)}
}

func insertCommit(t *testing.T, st store.Store, c *store.PartitionCommit) bool {
	t.Helper()
	var ok bool
	inTx(t, st, func(tx store.Tx) error {
		var err error
		ok, err = tx.PartitionCommitInsert(t.Context(), c)
		return err
	})
	return ok
}

// testPartitionCommitsKeepHistoryAndListTheCurrentOnes: every commit is kept; a partition's
// current commit is the one stored last; the current ones of a version list once per key, in
// the numeric order of their starts, limited; other versions, datasets and tenants are apart; a
// repeat of a commit's location stores nothing.
func testPartitionCommitsKeepHistoryAndListTheCurrentOnes(t *testing.T, st store.Store) {
	ctx := t.Context()
	first := commit("ds", "v1", "10-19", 10, 19, "task-a", time.Second)
	first.RowCount = new(int64)
	*first.RowCount = 1 << 33
	low := commit("ds", "v1", "9-9", 9, 9, "task-a", 2*time.Second)
	replaced := commit("ds", "v1", "10-19", 10, 19, "task-b", 3*time.Second)
	later := commit("ds", "v1", "20-29", 20, 29, "task-b", 4*time.Second)
	again := commit("ds", "v1", "10-19", 10, 19, "task-c", 5*time.Second)
	otherVersion := commit("ds", "v2", "10-19", 10, 19, "task-d", 6*time.Second)
	otherDataset := commit("ds2", "v1", "0-1", 0, 1, "task-d", 7*time.Second)
	otherTenant := commit("ds", "v1", "0-1", 0, 1, "task-z", 8*time.Second)
	otherTenant.Tenant = "zeta"
	all := []*store.PartitionCommit{first, low, replaced, later, again, otherVersion, otherDataset, otherTenant}
	for _, c := range all {
		if !insertCommit(t, st, c) || c.ID == 0 {
			t.Fatalf("commit of %s by %s: not stored (id %d)", c.PartitionKey, c.TaskID, c.ID)
		}
	}
	for i := 1; i < len(all); i++ {
		if all[i].ID <= all[i-1].ID {
			t.Fatalf("ids %d then %d: want increasing in the order stored", all[i-1].ID, all[i].ID)
		}
	}

	// The same attempt's partition again (same location) stores nothing, and the partition's
	// current commit stays the newest.
	repeat := *replaced
	repeat.ID, repeat.CommittedAt, repeat.Bytes = 0, at(time.Hour), 1
	if insertCommit(t, st, &repeat) {
		t.Errorf("a repeat of a committed location was stored (id %d)", repeat.ID)
	}

	list := func(p store.PartitionCommitListParams) []*store.PartitionCommit {
		t.Helper()
		if p.Limit == 0 {
			p.Limit = 100
		}
		cs, err := st.PartitionCommitListCurrent(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	ids := func(cs []*store.PartitionCommit) []int64 {
		var out []int64
		for _, c := range cs {
			out = append(out, c.ID)
		}
		return out
	}
	v1 := store.PartitionCommitListParams{Tenant: "acme", DatasetUUID: "ds", DatasetVersion: "v1"}
	got := list(v1)
	if want := []int64{low.ID, again.ID, later.ID}; !slices.Equal(ids(got), want) {
		t.Fatalf("current partitions of ds v1: %v, want %v (9-9, 10-19 by task-c, 20-29)", ids(got), want)
	}
	checkSame(t, "a current commit", again, got[1])
	limited := v1
	limited.Limit = 2
	if g := ids(list(limited)); !slices.Equal(g, []int64{low.ID, again.ID}) {
		t.Errorf("limit 2: %v, want the first two by start", g)
	}
	if g := ids(list(store.PartitionCommitListParams{Tenant: "acme", DatasetUUID: "ds", DatasetVersion: "v2"})); !slices.Equal(g, []int64{otherVersion.ID}) {
		t.Errorf("ds v2: %v, want only its own commit", g)
	}
	if g := ids(list(store.PartitionCommitListParams{Tenant: "nobody", DatasetUUID: "ds", DatasetVersion: "v1"})); len(g) != 0 {
		t.Errorf("another tenant sees %v", g)
	}

	history, err := st.PartitionCommitHistory(ctx, store.PartitionRef{Tenant: "acme", DatasetUUID: "ds", DatasetVersion: "v1", PartitionKey: "10-19"}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{again.ID, replaced.ID, first.ID}; !slices.Equal(ids(history), want) {
		t.Fatalf("history of 10-19: %v, want %v, newest first", ids(history), want)
	}
	checkSame(t, "the first commit, with its row count", first, history[2])
	if h, err := st.PartitionCommitHistory(ctx, store.PartitionRef{Tenant: "acme", DatasetUUID: "ds", DatasetVersion: "v1", PartitionKey: "10-19"}, 1); err != nil ||
		!slices.Equal(ids(h), []int64{again.ID}) {
		t.Errorf("history, limit 1: %v %v", ids(h), err)
	}
}

// testPartitionCommitAttemptsNameEveryCommittingAttempt: the attempts that committed any
// partition of a dataset, superseded commits included, each once; another dataset's are not.
func testPartitionCommitAttemptsNameEveryCommittingAttempt(t *testing.T, st store.Store) {
	a1 := commit("ds", "v1", "0-9", 0, 9, "task-a", time.Second)
	a1b := commit("ds", "v1", "10-19", 10, 19, "task-a", 2*time.Second)
	a2 := commit("ds", "v1", "0-9", 0, 9, "task-a", 3*time.Second)
	a2.Attempt, a2.Location = 2, "s3://data/baton/datasets/ds/task-a/2/0-9/"
	b := commit("ds", "v2", "0-9", 0, 9, "task-b", 4*time.Second) // supersedes nothing, another version
	other := commit("ds2", "v1", "0-9", 0, 9, "task-c", 5*time.Second)
	for _, c := range []*store.PartitionCommit{a1, a1b, a2, b, other} {
		insertCommit(t, st, c)
	}
	got, err := st.PartitionCommitAttempts(t.Context(), "ds")
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(got, func(x, y store.PartitionAttempt) int {
		if x.TaskID != y.TaskID {
			if x.TaskID < y.TaskID {
				return -1
			}
			return 1
		}
		return x.Attempt - y.Attempt
	})
	want := []store.PartitionAttempt{{TaskID: "task-a", Attempt: 1}, {TaskID: "task-a", Attempt: 2}, {TaskID: "task-b", Attempt: 1}}
	if !slices.Equal(got, want) {
		t.Errorf("attempts of ds: %v, want %v", got, want)
	}
	if got, err := st.PartitionCommitAttempts(t.Context(), "none"); err != nil || len(got) != 0 {
		t.Errorf("a dataset without commits: %v %v", got, err)
	}
}
