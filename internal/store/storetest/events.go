// Contract of audit events: bulk insertion and listing per job and per task.

package storetest

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/baton-dev/baton/internal/store"
)

func testEventsBulkInsertAndList(t *testing.T, st store.Store) {
	ctx := t.Context()
	jobA, jobB := newJob("tenant"), newJob("tenant")
	seed(t, st, jobA)
	seed(t, st, jobB)
	const n = 2500 // crosses the 1,000-row statement chunks
	var all, wantA, wantB []*store.Event
	for i := 0; i < n; i++ {
		e := &store.Event{JobID: jobA.ID, Type: fmt.Sprintf("Type %d", i), At: at(time.Duration(i) * time.Millisecond),
			Data: json.RawMessage(fmt.Sprintf(`{"i": %d,  "s":"x"}`, i))}
		if i%2 == 1 {
			e.TaskID, e.TaskKey = uuid.NewString(), fmt.Sprintf("task-%d", i)
		}
		if i%5 == 4 {
			e.JobID = jobB.ID
			wantB = append(wantB, e)
		} else {
			wantA = append(wantA, e)
		}
		all = append(all, e)
	}
	inTx(t, st, func(tx store.Tx) error { return tx.EventInsertMany(ctx, all) })

	gotA := listEvents(t, st, jobA.ID, 0, 10_000)
	if len(gotA) != len(wantA) {
		t.Fatalf("ListEvents(A) returned %d events, want %d", len(gotA), len(wantA))
	}
	for i, g := range gotA {
		if i > 0 && g.ID <= gotA[i-1].ID {
			t.Fatalf("event ids not increasing: %d then %d", gotA[i-1].ID, g.ID)
		}
		checkSame(t, fmt.Sprintf("event A[%d]", i), wantA[i], g, "ID")
		if t.Failed() {
			t.FailNow()
		}
	}
	gotB := listEvents(t, st, jobB.ID, 0, 10_000)
	if len(gotB) != len(wantB) {
		t.Fatalf("ListEvents(B) returned %d events, want %d", len(gotB), len(wantB))
	}
	for i, g := range gotB {
		checkSame(t, fmt.Sprintf("event B[%d]", i), wantB[i], g, "ID")
		if t.Failed() {
			t.FailNow()
		}
	}

	// After an id, with a limit.
	page := listEvents(t, st, jobA.ID, gotA[99].ID, 50)
	if len(page) != 50 || page[0].ID != gotA[100].ID || page[49].ID != gotA[149].ID {
		t.Errorf("ListEvents(after #99, 50): %d events starting at %v", len(page), idsOf(page))
	}
	// An id of the other job as the cursor works too: ids are global.
	page = listEvents(t, st, jobA.ID, gotB[0].ID, 2)
	var wantIDs []int64
	for _, e := range gotA {
		if e.ID > gotB[0].ID && len(wantIDs) < 2 {
			wantIDs = append(wantIDs, e.ID)
		}
	}
	if !slices.Equal(idsOf(page), wantIDs) {
		t.Errorf("ListEvents(A, after B's first): %v, want %v", idsOf(page), wantIDs)
	}
	// Paging through everything.
	var paged []*store.Event
	for after := int64(0); ; {
		p := listEvents(t, st, jobA.ID, after, 333)
		if len(p) > 333 {
			t.Fatalf("page of limit 333 has %d events", len(p))
		}
		if len(p) == 0 {
			break
		}
		paged = append(paged, p...)
		after = p[len(p)-1].ID
	}
	if !slices.Equal(idsOf(paged), idsOf(gotA)) {
		t.Errorf("paging by 333 gave %d events, want %d in order", len(paged), len(gotA))
	}
	if got := listEvents(t, st, jobA.ID, gotA[len(gotA)-1].ID, 10); len(got) != 0 {
		t.Errorf("ListEvents after the last: %d events", len(got))
	}
	if got := listEvents(t, st, "job-"+uuid.NewString(), 0, 10); len(got) != 0 {
		t.Errorf("ListEvents(unknown job): %d events", len(got))
	}

	// Appending later continues after the last id; readable inside the transaction.
	more := &store.Event{JobID: jobA.ID, Type: "Job Completed", At: at(time.Hour), Data: json.RawMessage(`{}`)}
	inTx(t, st, func(tx store.Tx) error {
		if err := tx.EventInsertMany(ctx, []*store.Event{more}); err != nil {
			return err
		}
		got := listEvents(t, tx, jobA.ID, gotA[len(gotA)-1].ID, 10)
		if len(got) != 1 || got[0].Type != "Job Completed" {
			t.Errorf("Tx.ListEvents after insert: %d events", len(got))
		}
		return nil
	})
	got := listEvents(t, st, jobA.ID, gotA[len(gotA)-1].ID, 10)
	if len(got) != 1 {
		t.Fatalf("ListEvents after a later insert: %d events, want 1", len(got))
	}
	checkSame(t, "later event", more, got[0], "ID")
}

// testListTaskEvents: one task's events, oldest first, after an id and up to a limit; never
// another task's or another job's, nor the job's own.
func testListTaskEvents(t *testing.T, st store.Store) {
	ctx := t.Context()
	jobA, jobB := newJob("tenant"), newJob("tenant")
	seed(t, st, jobA)
	seed(t, st, jobB)
	taskX, taskY := uuid.NewString(), uuid.NewString()
	var all, wantX []*store.Event
	add := func(jobID, taskID, key, typ string) {
		e := &store.Event{JobID: jobID, TaskID: taskID, TaskKey: key, Type: typ, At: at(time.Duration(len(all)) * time.Millisecond),
			Data: json.RawMessage(fmt.Sprintf(`{"n": %d}`, len(all)))}
		all = append(all, e)
		if jobID == jobA.ID && taskID == taskX {
			wantX = append(wantX, e)
		}
	}
	add(jobA.ID, "", "", "Job Created")
	for i := 0; i < 5; i++ {
		add(jobA.ID, taskX, "x", fmt.Sprintf("X %d", i))
		add(jobA.ID, taskY, "y", fmt.Sprintf("Y %d", i))
		add(jobB.ID, taskX, "x", fmt.Sprintf("B %d", i)) // the same task id in another job: not listed
	}
	add(jobA.ID, "", "", "Job Completed")
	inTx(t, st, func(tx store.Tx) error { return tx.EventInsertMany(ctx, all) })

	list := func(jobID, taskID string, after int64, limit int) []*store.Event {
		t.Helper()
		evs, err := st.EventListByTask(ctx, store.EventListByTaskParams{JobID: jobID, TaskID: taskID, AfterID: after, Limit: limit})
		if err != nil {
			t.Fatalf("ListTaskEvents(%s, %s, %d, %d): %v", jobID, taskID, after, limit, err)
		}
		return evs
	}
	got := list(jobA.ID, taskX, 0, 100)
	if len(got) != len(wantX) {
		t.Fatalf("ListTaskEvents returned %d events, want %d", len(got), len(wantX))
	}
	for i, g := range got {
		checkSame(t, fmt.Sprintf("task event %d", i), wantX[i], g, "ID")
		if i > 0 && g.ID <= got[i-1].ID {
			t.Errorf("ids not increasing: %v", idsOf(got))
		}
	}
	if page := list(jobA.ID, taskX, got[1].ID, 2); !slices.Equal(idsOf(page), idsOf(got[2:4])) {
		t.Errorf("after the second, 2: %v, want %v", idsOf(page), idsOf(got[2:4]))
	}
	if page := list(jobA.ID, taskX, got[4].ID, 10); len(page) != 0 {
		t.Errorf("after the last: %d events", len(page))
	}
	if page := list(jobA.ID, uuid.NewString(), 0, 10); len(page) != 0 {
		t.Errorf("unknown task: %d events", len(page))
	}
	if page := list(jobA.ID, "", 0, 10); len(page) != 0 {
		t.Errorf("an empty task id lists the job's own events: %d", len(page))
	}
}

func idsOf(evs []*store.Event) []int64 {
	ids := make([]int64, len(evs))
	for i, e := range evs {
		ids[i] = e.ID
	}
	return ids
}
