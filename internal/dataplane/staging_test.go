package dataplane_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/dataplane/staging"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/report"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// setModTime sets when every object under prefix was last written.
func (e *replaceEnv) setModTime(prefix string, at time.Time) {
	e.T.Helper()
	keys, err := e.blob.List(e.Ctx, prefix)
	if err != nil || len(keys) == 0 {
		e.T.Fatalf("list %s: %v %v", prefix, keys, err)
	}
	for _, k := range keys {
		p, err := e.blob.Path(k)
		if err != nil {
			e.T.Fatal(err)
		}
		if err := os.Chtimes(p, at, at); err != nil {
			e.T.Fatal(err)
		}
	}
}

func (e *replaceEnv) exists(prefix string) bool {
	e.T.Helper()
	keys, err := e.blob.List(e.Ctx, prefix)
	if err != nil {
		e.T.Fatal(err)
	}
	return len(keys) > 0
}

// attemptDir is the attempt's prefix of c under days.
func (e *replaceEnv) attemptDir(c *dispatch.Claim) string {
	return strings.TrimSuffix(e.folder(c, "x"), "x/")
}

// Rule: the collector deletes a staging folder of a replace output that no commit names once all
// its objects are older than the retention, and the attempt can no longer commit; it never
// deletes a committed folder (current or superseded), a running attempt's, a young one, one
// registered as a dataset version, or what is not an attempt's folder.
func TestStagingCollectorDeletesOldUncommittedFoldersOnly(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newReplaceEnv(t, st)
		const retention = 7 * 24 * time.Hour
		collector := e.collector(staging.Config{Retention: retention})
		marker := str("")

		superseded := e.runBuild() // commits 0-9, later replaced
		e.stage(superseded, "0-9", map[string]string{"f": "a"}, marker)
		if _, err := e.record(superseded, e.day("0-9")); err != nil {
			t.Fatal(err)
		}
		e.Succeed(superseded)
		current := e.runBuild() // commits 0-9 again: the current commit
		e.stage(current, "0-9", map[string]string{"f": "b"}, marker)
		if _, err := e.record(current, e.day("0-9")); err != nil {
			t.Fatal(err)
		}
		e.Succeed(current)
		abandoned := e.runBuild() // stages 10-19 and 20-29, commits neither, and fails
		e.stage(abandoned, "10-19", map[string]string{"f": "cc"}, marker)
		e.stage(abandoned, "20-29", map[string]string{"g": "ddd"}, nil)
		e.Fail(abandoned, lifecycle.UserCode)
		young := e.runBuild() // stages, ends, but its files are recent
		e.stage(young, "30-39", map[string]string{"f": "e"}, marker)
		e.Succeed(young)
		published := e.runBuild() // registers its attempt's folder as a dataset version
		e.stage(published, "40-49", map[string]string{"f": "f"}, nil)
		if _, err := e.D.Complete(e.Ctx, dispatch.CompleteParams{TaskID: published.Task.ID, Attempt: 1, LeaseToken: published.Task.LeaseToken,
			Outcome: store.OutcomeSucceeded, Published: []report.Published{{DatasetUUID: e.days.UUID, DatasetVersion: "v-files",
				StorageRef: []byte(`"` + e.blob.URI(e.attemptDir(published)) + `"`)}}}); err != nil {
			t.Fatal(err)
		}
		running := e.runBuild() // still runs: it may yet commit
		e.stage(running, "50-59", map[string]string{"f": "g"}, marker)
		stray := "datasets/" + e.days.UUID + "/not-a-task/1/f"
		e.put(stray, "h")

		old, recent := e.Clock.Now().Add(-retention-time.Hour), e.Clock.Now().Add(-time.Hour)
		for _, c := range []*dispatch.Claim{superseded, current, abandoned, published, running} {
			e.setModTime(e.attemptDir(c), old)
		}
		e.setModTime(e.attemptDir(young), recent)
		e.setModTime(stray, old)

		n, err := collector.RunOnce(e.Ctx)
		if err != nil || n.Folders != 1 || n.Objects != 3 || n.Bytes != 5 {
			t.Fatalf("pass: %+v, %v; want abandoned's folder, 3 objects of 5 bytes", n, err)
		}
		if e.exists(e.attemptDir(abandoned)) {
			t.Errorf("the abandoned folder is still there")
		}
		for name, c := range map[string]*dispatch.Claim{"superseded": superseded, "current": current, "young": young,
			"published": published, "running": running} {
			if !e.exists(e.attemptDir(c)) {
				t.Errorf("the %s folder was deleted", name)
			}
		}
		if !e.exists(stray) {
			t.Error("an object outside any attempt's folder was deleted")
		}
		if n, err := collector.RunOnce(e.Ctx); err != nil || n.Folders != 0 {
			t.Errorf("a second pass: %+v, %v; want nothing deleted", n, err)
		}

		// A week later the young folder is old too; the running attempt's stays while it runs.
		e.Clock.Advance(retention)
		if n, err := collector.RunOnce(e.Ctx); err != nil || n.Folders != 1 || e.exists(e.attemptDir(young)) {
			t.Errorf("a week later: %+v, %v; want the young folder deleted", n, err)
		}
		if !e.exists(e.attemptDir(running)) || !e.exists(e.attemptDir(current)) || !e.exists(e.attemptDir(superseded)) {
			t.Error("a running or committed folder was deleted a week later")
		}

		// Retention 0 deletes nothing.
		off := e.collector(staging.Config{})
		if n, err := off.RunOnce(e.Ctx); err != nil || n.Folders != 0 {
			t.Errorf("retention 0: %+v, %v", n, err)
		}
	})
}

// Rule: an attempt that timed out may still report late until its task's next attempt is
// claimed, so its folder is kept until then, however old.
func TestStagingCollectorWaitsForATimedOutAttemptsNextClaim(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, st store.Store) {
		e := newReplaceEnv(t, st)
		const retention = 24 * time.Hour
		collector := e.collector(staging.Config{Retention: retention})
		first := e.runBuild()
		e.stage(first, "0-9", map[string]string{"f": "a"}, str(""))
		e.Expire()
		e.setModTime(e.attemptDir(first), e.Clock.Now().Add(-2*retention))
		if n, err := collector.RunOnce(e.Ctx); err != nil || n.Folders != 0 {
			t.Fatalf("while the timed-out attempt may report late: %+v, %v; want nothing deleted", n, err)
		}
		e.Clock.Advance(time.Minute)
		second, err := e.D.ClaimTask(e.Ctx, dispatch.ClaimTaskParams{TaskID: first.Task.ID, WorkerID: "w2"})
		if err != nil || second.Task.Attempt != 2 {
			t.Fatalf("claim attempt 2: %v", err)
		}
		if n, err := collector.RunOnce(e.Ctx); err != nil || n.Folders != 1 || e.exists(e.attemptDir(first)) {
			t.Errorf("after the next claim: %+v, %v; want attempt 1's folder deleted", n, err)
		}
	})
}
