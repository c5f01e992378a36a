package intake

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/baton-dev/baton/internal/blob"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/grant"
	"github.com/baton-dev/baton/internal/report"
	"github.com/baton-dev/baton/internal/scope"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/wire"
)

// Replace outputs (update_strategy: replace): a task rewrites whole partitions of its job's
// output datasets. It writes a partition's files under its attempt's staging folder of the
// partition, StagingDir, and last a marker object there (MarkerName); its partition event is the
// commit. Before the report's transaction, CheckEvents finds the marker and adds up the folder's
// bytes (object storage is never called inside a transaction); in the transaction, RecordEvents
// stores the commit, which points the partition of the dataset version at the folder, and then
// the event, queued for routing: the event exists exactly when the commit does. A staging folder
// no commit names is deleted once old (package staging).

// MarkerName is the object a task writes last in a partition's staging folder: the partition's
// files are complete. It is empty, or holds {"row_count": N}.
const MarkerName = "_SUCCESS"

// maxMarkerBytes bounds what a marker may hold: a row count needs a few bytes.
const maxMarkerBytes = 4096

// StagingDir is the key of the staging folder where attempt attempt of task taskID writes
// partition partitionKey of dataset datasetUUID: under the attempt's own prefix of the dataset,
// grant.DatasetsDir + "{dataset_uuid}/{task_id}/{attempt}/", which its capability token lets it
// write.
func StagingDir(datasetUUID, taskID string, attempt int, partitionKey string) string {
	return grant.DatasetsDir + datasetUUID + "/" + taskID + "/" + strconv.Itoa(attempt) + "/" + partitionKey + "/"
}

// outputName names an output in messages: its published name, else its uuid.
func outputName(o *wire.DatasetOutput) string {
	if o.DatasetName != "" {
		return strconv.Quote(o.DatasetName)
	}
	return o.DatasetUUID
}

// CheckEvents implements dispatch.EventChecker: for each event of the report that commits a
// partition of a replace output of the reporting task's job, it finds the partition's marker in
// the attempt's staging folder and adds up the folder's bytes, and returns the events with what
// it found (DatasetEvent.Staged). A partition without its marker, or with a marker that is not
// one, refuses the report with an *InvalidError that names the partition and the marker's key:
// nothing is stored, and the attempt can still report. Reports it cannot judge (an unknown task,
// a stale fence, an attempt that ended) are left to the report's transaction, and so are
// malformed events, which RecordEvents refuses with the same messages as ever.
func (in *Intake) CheckEvents(ctx context.Context, f dispatch.Fence, events []report.Event) ([]report.Event, error) {
	if !slices.ContainsFunc(events, func(e report.Event) bool { return e.PartitionKey != "" }) {
		return events, nil // only a partition is ever committed: cursor events need no look
	}
	t, err := in.st.TaskGet(ctx, f.TaskID)
	if errors.Is(err, store.ErrNotFound) {
		return events, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the task: %w", err)
	}
	if dispatch.CheckFence(t, f) != nil || t.Status.Terminal() {
		return events, nil
	}
	job, err := in.d.JobRef(ctx, t.JobID)
	if err != nil {
		return nil, fmt.Errorf("job %s: %w", t.JobID, err)
	}
	// The outputs whose partitions the attempt commits (scope.Scope.Commits): a route never
	// changes, so neither does the answer for a task.
	outputs := scope.Of(t, job.Tenant).Commits()
	if len(outputs) == 0 {
		return events, nil
	}
	checked := slices.Clone(events)
	for i := range checked {
		e := &checked[i]
		o := outputs[e.DatasetUUID]
		if o == nil || !partitionKey.MatchString(e.PartitionKey) {
			continue
		}
		if e.Staged, err = in.checkStaged(ctx, i, t, e, o); err != nil {
			return nil, err
		}
	}
	return checked, nil
}

// checkStaged looks at the staging folder of event i's partition, written by t's current attempt.
func (in *Intake) checkStaged(ctx context.Context, i int, t *store.Task, e *report.Event, o *wire.DatasetOutput) (*report.Staged, error) {
	bad := func(format string, args ...any) error {
		return &dispatch.InvalidError{Message: fmt.Sprintf("events[%d]: partition %q of dataset %s: ", i, e.PartitionKey, outputName(o)) +
			fmt.Sprintf(format, args...)}
	}
	if in.blob == nil {
		return nil, bad("its job writes with update_strategy replace, which commits a partition's files in object storage, and this server has none (--blob-url)")
	}
	folder := StagingDir(e.DatasetUUID, t.ID, t.Attempt, e.PartitionKey)
	marker := folder + MarkerName
	objs, err := in.blob.ListObjects(ctx, folder)
	if err != nil {
		return nil, fmt.Errorf("events[%d]: check the staging folder of partition %s: %w", i, e.PartitionKey, err)
	}
	staged := &report.Staged{Attempt: t.Attempt, Location: in.blob.URI(folder)}
	found := false
	for _, obj := range objs {
		if obj.Key == marker {
			found = true
			continue
		}
		staged.Bytes += obj.Size
	}
	if !found {
		return nil, bad("no %s marker at %s: a replace job commits a partition by writing its files under %s, then the marker, last, and then reporting the partition's event",
			MarkerName, in.blob.URI(marker), staged.Location)
	}
	data, err := readMarker(ctx, in.blob, marker)
	if errors.Is(err, blob.ErrNotFound) {
		return nil, bad("its %s marker at %s was deleted while it was being checked", MarkerName, in.blob.URI(marker))
	}
	if err != nil {
		return nil, fmt.Errorf("events[%d]: read the marker of partition %s: %w", i, e.PartitionKey, err)
	}
	if staged.RowCount, err = parseMarker(data); err != nil {
		return nil, bad("the marker %s must be empty or hold {\"row_count\": N}, N a whole number of at least 0: %v", in.blob.URI(marker), err)
	}
	return staged, nil
}

// readMarker reads the marker under key, at most one byte more than a marker may hold.
func readMarker(ctx context.Context, b *blob.Store, key string) ([]byte, error) {
	r, err := b.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(io.LimitReader(r, maxMarkerBytes+1))
}

// parseMarker reads a marker's row count: nil for an empty marker (white space only), else the
// row_count of the one JSON object it holds, which has no other member.
func parseMarker(data []byte) (*int64, error) {
	switch {
	case len(data) > maxMarkerBytes:
		return nil, fmt.Errorf("it holds more than %d bytes", maxMarkerBytes)
	case len(bytes.TrimSpace(data)) == 0:
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var m map[string]json.RawMessage
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("it is not a JSON object: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("it holds more than one JSON value")
	}
	if m == nil {
		return nil, errors.New("it holds null")
	}
	for k := range m {
		if k != "row_count" {
			return nil, fmt.Errorf("unknown member %q", k)
		}
	}
	raw, ok := m["row_count"]
	if !ok {
		return nil, errors.New("the object has no row_count")
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil || n < 0 {
		return nil, fmt.Errorf("row_count is %s", raw)
	}
	return &n, nil
}

// commitPartitions stores, in the report's transaction, a commit for each event that commits a
// partition of a replace output of t's job, pointing the partition of the event's dataset
// version at the staging folder CheckEvents found. It runs before the events are stored and queued, in the same
// transaction, so that a partition's event exists exactly when its commit does. The same
// attempt's partition again commits nothing new; the dataset version stays the same.
func (in *Intake) commitPartitions(ctx context.Context, tx store.Tx, c *dispatch.Work, t *store.Task, tenant string, events []report.Event) error {
	outputs := scope.Of(t, tenant).Commits()
	if len(outputs) == 0 {
		return nil
	}
	for i, e := range events {
		o := outputs[e.DatasetUUID]
		if o == nil || e.PartitionKey == "" {
			continue
		}
		s := e.Staged
		switch {
		case s == nil:
			return fmt.Errorf("events[%d]: partition %s of dataset %s: its staging folder was not checked before the report's transaction (dispatch.EventChecker)",
				i, e.PartitionKey, e.DatasetUUID)
		case s.Attempt != t.Attempt:
			return &dispatch.InvalidError{Message: fmt.Sprintf("events[%d]: partition %q of dataset %s: its staging folder was checked for attempt %d, and the task's current attempt is %d",
				i, e.PartitionKey, outputName(o), s.Attempt, t.Attempt)}
		}
		m := partitionKey.FindStringSubmatch(e.PartitionKey)
		start, _ := strconv.ParseInt(m[1], 10, 64)
		end, _ := strconv.ParseInt(m[2], 10, 64)
		_, err := tx.PartitionCommitInsert(ctx, &store.PartitionCommit{Tenant: tenant, DatasetUUID: e.DatasetUUID,
			DatasetVersion: e.DatasetVersion, PartitionKey: e.PartitionKey, Start: start, End: end, Location: s.Location,
			RowCount: s.RowCount, Bytes: s.Bytes, TaskID: t.ID, Attempt: t.Attempt, CommittedAt: c.Now()})
		if err != nil {
			return fmt.Errorf("events[%d]: %w", i, err)
		}
	}
	return nil
}
