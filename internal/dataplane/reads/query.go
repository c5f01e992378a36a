package reads

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/grant"
	"github.com/baton-dev/baton/internal/pipeline"
	"github.com/baton-dev/baton/internal/query"
	"github.com/baton-dev/baton/internal/scope"
	"github.com/baton-dev/baton/internal/store"
)

// QueryNotReadableError: a dataset the query names has nothing the Query Service can read (no
// current version with files, a location outside its own prefix).
type QueryNotReadableError struct{ Message string }

func (e *QueryNotReadableError) Error() string { return e.Message }

// QueryUnknownError: a query names a relation that is no dataset of the tenant.
type QueryUnknownError struct{ Name string }

func (e *QueryUnknownError) Error() string {
	return fmt.Sprintf("relation %q is not a published dataset of this tenant: a query reads datasets by their names", e.Name)
}

// QueryParams is a query: its SQL, the rows to answer (0: query.DefaultRows), and optionally
// DatasetID, a dataset the statement may also read under the relation name "dataset" (for
// clients of the single-relation contract, which name one dataset in the body).
type QueryParams struct {
	SQL       string
	Limit     int
	DatasetID string
}

// datasetAlias is the relation name a query's DatasetID is read under.
const datasetAlias = "dataset"

// Query runs a query for a holder of API key keyID of tenant: every published dataset of the
// tenant may be read under its name, each at its current version when the query starts (a
// buffered dataset: its rows, one snapshot).
func (rd *Reader) Query(ctx context.Context, tenant, keyID string, p QueryParams) (*query.Result, error) {
	rec := &store.QueryAudit{Tenant: tenant, Caller: "key:" + keyID}
	lim := query.Limits{Tenant: tenant, Caller: rec.Caller, Rows: p.Limit, Timeout: rd.QueryTimeout(false)}
	return rd.runQuery(ctx, rec, p.SQL, lim, func(ctx context.Context, name string) (query.Relation, error) {
		ref := name
		if name == datasetAlias && p.DatasetID != "" {
			ref = p.DatasetID
		}
		ds, err := Find(ctx, rd.st, tenant, ref)
		if errors.Is(err, ErrDatasetNotFound) || (err == nil && ds.Name == "") {
			return query.Relation{}, &QueryUnknownError{Name: ref}
		}
		if err != nil {
			return query.Relation{}, err
		}
		return rd.relation(ctx, tenant, name, ds, ds.CurrentVersion, nil, nil)
	})
}

// TaskQuery runs a query for the current attempt f names (fenced like every task-scoped call):
// it may read exactly the datasets its capability token lists, under their names (or uuids):
// its inputs at their pinned versions, a buffered input's rows as its input's where keeps them,
// and its job's outputs at their current versions.
func (rd *Reader) TaskQuery(ctx context.Context, f dispatch.Fence, p QueryParams) (*query.Result, error) {
	sc, err := scope.Running(ctx, rd.d, f)
	if err != nil {
		return nil, err
	}
	rec := &store.QueryAudit{Tenant: sc.Tenant, Caller: "task:" + sc.TaskID + "/" + strconv.Itoa(f.Attempt)}
	lim := query.Limits{Tenant: sc.Tenant, Caller: rec.Caller, Rows: p.Limit, Timeout: rd.QueryTimeout(true)}
	return rd.runQuery(ctx, rec, p.SQL, lim, func(ctx context.Context, name string) (query.Relation, error) {
		ref := name
		if name == datasetAlias && p.DatasetID != "" {
			ref = p.DatasetID
		}
		d, ok := sc.Readable(ref)
		if !ok {
			return query.Relation{}, &dispatch.ForbiddenError{Message: fmt.Sprintf(
				"dataset %q is not one this task reads or writes: a task queries only its job's inputs and outputs", ref)}
		}
		uuid, in := d.UUID, d.Input
		ds, err := rd.st.DatasetGetMany(ctx, []string{uuid})
		if err != nil {
			return query.Relation{}, fmt.Errorf("dataset %s: %w", uuid, err)
		}
		if len(ds) != 1 || ds[0].Tenant != sc.Tenant {
			return query.Relation{}, &QueryNotReadableError{Message: fmt.Sprintf("dataset %q no longer exists", ref)}
		}
		version, sref, where := ds[0].CurrentVersion, json.RawMessage(nil), json.RawMessage(nil)
		if in != nil {
			version, sref, where = in.DatasetVersion, in.StorageRef, in.Where
		}
		return rd.relation(ctx, sc.Tenant, name, ds[0], version, sref, where)
	})
}

// QueryTimeout is how long a statement may run: a task's, or a user's.
func (rd *Reader) QueryTimeout(task bool) time.Duration {
	if task {
		return cmp.Or(rd.cfg.TaskQueryTimeout, query.TaskTimeout)
	}
	return cmp.Or(rd.cfg.QueryTimeout, query.UserTimeout)
}

// runQuery gates sql, resolves its relations (resolve answers the relation of one name the
// statement reads), runs it and writes its audit record, whatever the outcome. A query whose
// record cannot be written answers that error and no rows.
func (rd *Reader) runQuery(ctx context.Context, rec *store.QueryAudit, sql string, lim query.Limits,
	resolve func(ctx context.Context, name string) (query.Relation, error)) (*query.Result, error) {
	eng := rd.cfg.Query
	if eng == nil {
		return nil, query.ErrUnavailable
	}
	start := time.Now()
	rec.At, rec.SQLHash, rec.Datasets = rd.d.Now(), query.Hash(sql), json.RawMessage("[]")
	st, err := eng.Check(ctx, sql)
	var rels []query.Relation
	if err == nil {
		rels, err = resolveAll(ctx, st, resolve)
	}
	var res *query.Result
	if err == nil {
		type read struct {
			UUID    string `json:"uuid"`
			Name    string `json:"name"`
			Version string `json:"version,omitempty"`
		}
		touched := make([]read, len(rels))
		for i, r := range rels {
			touched[i] = read{UUID: r.Dataset, Name: r.Name, Version: r.Version}
		}
		rec.Datasets, _ = json.Marshal(touched)
		res, err = eng.Run(ctx, st, rels, lim)
	}
	rec.Status, rec.DurationMS = queryStatus(err), time.Since(start).Milliseconds()
	if res != nil {
		rec.RowCount = res.RowCount
	}
	// The record is written even when the caller has gone: it is the trail of what ran.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if aerr := rd.st.InTx(actx, func(tx store.Tx) error { return tx.QueryAuditInsert(actx, rec) }); aerr != nil {
		return nil, fmt.Errorf("query audit: %w", aerr)
	}
	rd.log.InfoContext(ctx, "query", "tenant", rec.Tenant, "caller", rec.Caller, "sql_sha256", rec.SQLHash,
		"status", rec.Status, "rows", rec.RowCount, "duration_ms", rec.DurationMS)
	return res, err
}

// resolveAll resolves the relations st reads, each of st.Relations, or answers the first refusal:
// a name the statement reads as a table outside its CTEs' scope must be a dataset the caller may
// read.
func resolveAll(ctx context.Context, st *query.Statement, resolve func(context.Context, string) (query.Relation, error)) ([]query.Relation, error) {
	rels := make([]query.Relation, 0, len(st.Relations))
	for _, name := range st.Relations {
		r, err := resolve(ctx, name)
		if err != nil {
			return nil, err
		}
		rels = append(rels, r)
	}
	return rels, nil
}

// queryStatus is an audit record's status for a query that ended with err.
func queryStatus(err error) string {
	var (
		rejected  *query.RejectedError
		failed    *query.FailedError
		tooLarge  *query.TooLargeError
		forbidden *dispatch.ForbiddenError
		unknown   *QueryUnknownError
		notRead   *QueryNotReadableError
		engRead   *query.NotReadableError
	)
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &rejected):
		return "rejected"
	case errors.As(err, &forbidden):
		return "forbidden"
	case errors.As(err, &unknown):
		return "not_found"
	case errors.As(err, &notRead), errors.As(err, &engRead):
		return "not_readable"
	case errors.As(err, &tooLarge):
		return "too_large"
	case errors.Is(err, query.ErrTimeout):
		return "timeout"
	case errors.Is(err, query.ErrBusy):
		return "busy"
	case errors.Is(err, query.ErrStopped):
		return "stopped"
	case errors.As(err, &failed):
		return "failed"
	}
	return "error"
}

// relation is dataset ds of tenant as the relation name: a buffered dataset's rows (as where,
// a JSON object or nil, keeps them), else the Parquet files of its version: under ref when
// given (a task's pinned input), else under that version's registered location.
func (rd *Reader) relation(ctx context.Context, tenant, name string, ds *store.Dataset, version string, ref, where json.RawMessage) (query.Relation, error) {
	r := query.Relation{Name: strings.ToLower(name), Dataset: ds.UUID, Version: version}
	if ds.WriteMode == pipeline.WriteBuffered {
		return rd.bufferedRelation(r, tenant, ds, where)
	}
	if rd.cfg.Blob == nil {
		return r, &QueryNotReadableError{Message: fmt.Sprintf("dataset %q: this server has no object storage to read its files from", name)}
	}
	if len(ref) == 0 && version != "" {
		vs, err := rd.st.DatasetVersionList(ctx, ds.UUID)
		if err != nil {
			return r, fmt.Errorf("dataset %s: %w", ds.UUID, err)
		}
		for _, v := range vs {
			if v.Version == version {
				ref = v.StorageRef
			}
		}
	}
	raw := grant.RefPrefix(ref)
	if raw == "" {
		return r, &QueryNotReadableError{Message: fmt.Sprintf(
			"dataset %q has no version with files to read: its version %q registered no storage_ref", name, version)}
	}
	// The same rule as a grant's: a location outside the dataset's own prefix is never read.
	prefix, err := grant.DatasetLocation(raw, rd.cfg.Blob.Root(), ds.UUID)
	if err != nil {
		return r, &QueryNotReadableError{Message: fmt.Sprintf("dataset %q: %s", name,
			strings.TrimPrefix(err.Error(), grant.ErrPrefix.Error()+": "))}
	}
	keyPrefix := strings.TrimPrefix(prefix, rd.cfg.Blob.Root())
	keys, err := rd.cfg.Blob.List(ctx, keyPrefix)
	if err != nil {
		return r, fmt.Errorf("dataset %s version %s: list its files: %w", ds.UUID, version, err)
	}
	glob := refGlob(ref)
	for _, k := range keys {
		if ok, _ := path.Match(glob, path.Base(k)); !ok || !strings.HasSuffix(k, ".parquet") {
			continue
		}
		f := query.File{Key: k}
		if f.Path, err = rd.cfg.Blob.Path(k); err != nil {
			return r, &QueryNotReadableError{Message: fmt.Sprintf("dataset %q: %v", name, err)}
		}
		if f.Path == "" {
			key := k
			f.Open = func(ctx context.Context) (io.ReadCloser, error) { return rd.cfg.Blob.Get(ctx, key) }
		}
		r.Files = append(r.Files, f)
	}
	if len(r.Files) == 0 {
		return r, &QueryNotReadableError{Message: fmt.Sprintf("dataset %q: its version %q has no Parquet files (%s under %s)", name, version, glob, prefix)}
	}
	return r, nil
}

// refGlob is the glob a storage_ref object names its files with ("*.parquet" when none).
func refGlob(ref json.RawMessage) string {
	var obj struct {
		Glob string `json:"glob"`
	}
	if json.Unmarshal(ref, &obj) == nil && obj.Glob != "" && !strings.Contains(obj.Glob, "/") {
		if _, err := path.Match(obj.Glob, ""); err == nil {
			return obj.Glob
		}
	}
	return "*.parquet"
}

// bufferedRelation is buffered dataset ds's rows of tenant, as where keeps them, with each
// row's load cursor as the column _cursor.
func (rd *Reader) bufferedRelation(r query.Relation, tenant string, ds *store.Dataset, where json.RawMessage) (query.Relation, error) {
	if rd.cfg.Tables == nil || len(ds.Schema) == 0 {
		return r, &QueryNotReadableError{Message: fmt.Sprintf("dataset %q: this server keeps no rows of buffered datasets", r.Name)}
	}
	var s pipeline.Schema
	if err := json.Unmarshal(ds.Schema, &s); err != nil {
		return r, fmt.Errorf("dataset %s: decode schema: %w", ds.UUID, err)
	}
	var filter map[string]any
	if len(where) > 0 {
		if err := decodeWhere(where, &filter); err != nil {
			return r, fmt.Errorf("dataset %s: decode where: %w", ds.UUID, err)
		}
	}
	for _, c := range s.Columns {
		r.Columns = append(r.Columns, query.Column{Name: c.Name, Type: c.Type})
	}
	r.Columns = append(r.Columns, query.Column{Name: "_cursor", Type: pipeline.TypeInteger})
	r.Rows = func(ctx context.Context, columns []string, yield func([]any) error) error {
		return rd.cfg.Tables.Scan(ctx, ds.UUID, &s, tenant, filter, columns, yield)
	}
	return r, nil
}

// QueryAudit lists a tenant's query audit records, newest first.
func (rd *Reader) QueryAudit(ctx context.Context, p store.QueryAuditListParams) ([]*store.QueryAudit, error) {
	return rd.st.QueryAuditList(ctx, p)
}
