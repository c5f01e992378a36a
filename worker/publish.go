package worker

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/baton-dev/baton/internal/blob"
)

// Buffered datasets: a task adds rows to a buffered dataset by writing them as a JSONL batch to
// the object storage under its attempt's own prefix and publishing the batch; a trusted sink
// loads it later, validating every row against the dataset's schema. PublishBatch does both.

// WithBlob sets the object storage the worker writes batches to, as the server's --blob-url:
// file://DIR or s3://BUCKET/PREFIX (S3 endpoint, region and credentials from the usual AWS_*
// variables). By default the environment variable BATON_BLOB_URL, if set. Without either,
// PublishBatch writes with the attempt's own minted credentials (Task.Credentials), which works
// when the server's object storage is S3 and needs no storage secret on the worker.
func WithBlob(url string) Option { return func(c *config) { c.blobURL = url } }

// PublishedBatch is a batch PublishBatch published.
type PublishedBatch struct {
	URI       string // where the batch artifact is
	Rows      int
	Duplicate bool // the same batch of this attempt was published before
}

// ErrNoBlob: PublishBatch needs the object storage (WithBlob or BATON_BLOB_URL).
var ErrNoBlob = errors.New("baton worker: no object storage for batches: use WithBlob or set BATON_BLOB_URL")

// PublishBatch adds rows to the buffered dataset named dataset (its name, or its dataset_uuid):
// it writes them as one JSONL batch under the attempt's own prefix in the object storage and
// publishes the batch, fenced by the attempt's lease. rows is a slice of values that encode as
// JSON objects (maps or structs); a row's org_id, if any, is ignored: the rows belong to the
// task's tenant. The sink loads the batch later and idempotently, so a retried attempt may
// publish the same rows again: the dataset's unique key keeps each row once.
//
// The batch is of the dataset version the task was created for. Once that version is no longer
// the dataset's current one (a bootstrap.reset_outputs deploy, or a cutover, since), the server
// refuses the batch and records nothing, and PublishBatch returns a permanent error (409
// dataset_version_not_current): no attempt of the task can publish any more.
func (t *Task) PublishBatch(ctx context.Context, dataset string, rows any) (*PublishedBatch, error) {
	v := reflect.ValueOf(rows)
	if v.Kind() != reflect.Slice && v.Kind() != reflect.Array {
		return nil, fmt.Errorf("baton worker: PublishBatch: rows must be a slice, not %T", rows)
	}
	var buf bytes.Buffer
	for i := range v.Len() {
		b, err := json.Marshal(v.Index(i).Interface())
		if err != nil {
			return nil, fmt.Errorf("baton worker: PublishBatch: row %d: %w", i+1, err)
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	return t.PublishJSONL(ctx, dataset, buf.Bytes())
}

// PublishJSONL is PublishBatch for rows already encoded as JSONL: one JSON object per line.
func (t *Task) PublishJSONL(ctx context.Context, dataset string, jsonl []byte) (*PublishedBatch, error) {
	if t.publish == nil {
		return nil, errors.New("baton worker: PublishJSONL: the task was not claimed by a Worker")
	}
	return t.publish(ctx, dataset, jsonl)
}

// bufferedOutputs lists the buffered outputs of t's job, by name, for a message.
func bufferedOutputs(t *Task) string {
	var names []string
	if pt := t.Pipeline; pt != nil {
		for _, o := range pt.Outputs {
			if o.WriteMode == "buffered" {
				names = append(names, strconv.Quote(cmp.Or(o.DatasetName, o.DatasetUUID)))
			}
		}
	}
	if len(names) == 0 {
		return "no buffered dataset"
	}
	return strings.Join(names, ", ")
}

// bufferPrefix is the object storage prefix of an attempt's batches for a dataset; the server
// refuses a batch anywhere else.
func bufferPrefix(dataset, taskID string, attempt int) string {
	return "buffers/" + dataset + "/" + taskID + "/" + strconv.Itoa(attempt) + "/"
}

// publisher publishes an attempt's batches.
type publisher struct {
	a  *attempt
	mu sync.Mutex
	n  int // batches so far, for their names
}

func (p *publisher) publish(ctx context.Context, dataset string, jsonl []byte) (*PublishedBatch, error) {
	if dataset == "" {
		return nil, errors.New("baton worker: PublishBatch: the dataset name is required")
	}
	// Only a buffered output of the task's job may be published into (the server refuses anything
	// else): refuse before writing a batch that could never be published. Its uuid names the
	// prefix, as in the attempt's storage grant.
	body := map[string]any{"task_id": p.a.taskID, "attempt": p.a.task.Attempt, "lease_token": p.a.lease,
		"record_count": bytes.Count(jsonl, []byte("\n")), "content_type": "application/jsonl", "batch_size_bytes": len(jsonl)}
	segment := ""
	if pt := p.a.task.Pipeline; pt != nil {
		for _, o := range pt.Outputs {
			if o.WriteMode == "buffered" && (o.DatasetName == dataset || o.DatasetUUID == dataset) {
				segment, body["dataset_uuid"] = o.DatasetUUID, o.DatasetUUID
			}
		}
	}
	if segment == "" {
		return nil, Permanent(fmt.Errorf("baton worker: PublishBatch: dataset %q is not a buffered output of this task's job "+
			"(its claim's outputs: %s): only tasks of the pipeline job that publishes a buffered dataset may publish batches into it",
			dataset, bufferedOutputs(p.a.task)))
	}
	p.mu.Lock()
	p.n++
	name := fmt.Sprintf("batch-%04d.jsonl", p.n)
	p.mu.Unlock()
	uri, err := p.write(ctx, dataset, segment, name, jsonl)
	if err != nil {
		return nil, err
	}
	body["batch_uri"] = uri
	var ans struct {
		Duplicate bool `json:"duplicate"`
	}
	if err := p.a.api.postWith(ctx, 30*time.Second, p.a.routes.publish, p.a.tokenHeader(), body, &ans); err != nil {
		var e *apiError
		if errors.As(err, &e) && e.Code == "dataset_version_not_current" {
			// The task's version of the dataset is over: no attempt of it can publish.
			return nil, Permanent(err)
		}
		return nil, err
	}
	return &PublishedBatch{URI: uri, Rows: int(body["record_count"].(int)), Duplicate: ans.Duplicate}, nil
}

// write stores a batch named name under the attempt's own prefix for the dataset segment names
// (its uuid or name), and returns its URI: with the worker's own object storage when it has one
// (WithBlob), else with the attempt's minted credentials, which can write only there.
func (p *publisher) write(ctx context.Context, dataset, segment, name string, data []byte) (string, error) {
	st, err := p.a.h.blobStore(ctx)
	if err == nil {
		key := bufferPrefix(segment, p.a.task.ID, p.a.task.Attempt) + name
		if err := st.Put(ctx, key, data, "application/jsonl"); err != nil {
			return "", fmt.Errorf("baton worker: PublishBatch: write the batch: %w", err)
		}
		return st.URI(key), nil
	}
	if !errors.Is(err, ErrNoBlob) {
		return "", err
	}
	creds, err := p.a.task.Credentials(ctx)
	switch {
	case errors.Is(err, ErrNoCredentials):
		return "", ErrNoBlob
	case err != nil:
		return "", fmt.Errorf("baton worker: PublishBatch: the attempt's object storage credentials: %w", err)
	}
	prefix := creds.OutputPrefix(segment)
	bucket, keyPrefix, _ := strings.Cut(strings.TrimPrefix(prefix, "s3://"), "/")
	if !strings.HasPrefix(prefix, "s3://") || !strings.Contains(prefix, "/"+bufferPrefix(segment, p.a.task.ID, p.a.task.Attempt)) {
		return "", fmt.Errorf("baton worker: PublishBatch: %q is not a buffered dataset this task writes, so its credentials cannot write its batches (WithBlob writes with the worker's own)", dataset)
	}
	st, err = blob.Open(ctx, "s3://"+bucket, blob.Options{Endpoint: creds.EndpointURL, Region: creds.Region,
		AccessKey: creds.AccessKeyID, SecretKey: creds.SecretAccessKey, SessionToken: creds.SessionToken})
	if err != nil {
		return "", fmt.Errorf("baton worker: PublishBatch: %w", err)
	}
	defer st.Close()
	key := keyPrefix + name
	if err := st.Put(ctx, key, data, "application/jsonl"); err != nil {
		return "", fmt.Errorf("baton worker: PublishBatch: write the batch: %w", err)
	}
	return st.URI(key), nil
}

// blobStore opens the object storage on first use.
func (h *host) blobStore(ctx context.Context) (*blob.Store, error) {
	h.blobMu.Lock()
	defer h.blobMu.Unlock()
	if h.blob != nil {
		return h.blob, nil
	}
	if h.blobURL == "" {
		return nil, ErrNoBlob
	}
	st, err := blob.Open(ctx, h.blobURL, blob.Options{})
	if err != nil {
		return nil, fmt.Errorf("baton worker: object storage: %w", err)
	}
	h.blob = st
	return st, nil
}
