package api

import (
	"encoding/base64"
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/baton-dev/baton/internal/blob"
	"github.com/baton-dev/baton/internal/bundle"
	"github.com/baton-dev/baton/internal/capability"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/request"
	"github.com/baton-dev/baton/internal/scope"
	"github.com/baton-dev/baton/internal/store"
	"github.com/baton-dev/baton/internal/udf"
)

// User code bundles: uploaded by producers (the zip as the body, or in two steps through a
// pre-signed URL), listed, disabled; downloaded by the attempt whose job runs one.

// bundleJSON is a bundle as the API shows it; the manifest only where one bundle is asked for.
func bundleJSON(b *store.Bundle, manifest bool) map[string]any {
	state := "ready"
	switch {
	case b.Disabled():
		state = "disabled"
	case b.Pending():
		state = "pending"
	}
	out := map[string]any{"bundle_id": b.ID, "state": state, "sha256": nullable(b.SHA256), "size": b.Size,
		"language": nullable(b.Language), "entrypoint": nullable(b.Entrypoint), "uploaded_by": b.UploadedBy,
		"created_at": snakeTime(b.CreatedAt), "finalized_at": snakeTime(b.FinalizedAt),
		"disabled_at": snakeTime(b.DisabledAt), "disabled_by": nullable(b.DisabledBy)}
	if manifest && len(b.Manifest) > 0 {
		out["manifest"] = b.Manifest
	}
	return out
}

// bundleErr answers the registry's refusals.
func bundleErr(err error) error {
	var (
		all   bundle.Errors
		bad   *bundle.Error
		state *udf.StateError
	)
	switch {
	case errors.As(err, &all):
		list := make([]string, len(all))
		for i, e := range all {
			list[i] = strings.TrimPrefix(e.Error(), "bundle: ")
		}
		return &request.Error{Status: http.StatusBadRequest, Body: map[string]any{"error": "invalid bundle: " + list[0], "errors": list}}
	case errors.Is(err, udf.ErrTooLarge):
		return request.Errorf(http.StatusRequestEntityTooLarge, "%s", err)
	case errors.As(err, &bad):
		body := map[string]any{"error": "invalid bundle: " + strings.TrimPrefix(bad.Error(), "bundle: ")}
		if bad.Path != "" {
			body["path"] = bad.Path
		}
		return &request.Error{Status: http.StatusBadRequest, Body: body}
	case errors.As(err, &state):
		return request.Errorf(http.StatusConflict, "%s", state.Message)
	case errors.Is(err, udf.ErrNotFound):
		return request.Errorf(http.StatusNotFound, "Bundle not found")
	case errors.Is(err, udf.ErrNoStorage):
		return request.Errorf(http.StatusNotImplemented, "%s", udf.ErrNoStorage)
	case errors.Is(err, blob.ErrNoSignedURLs):
		return request.Errorf(http.StatusNotImplemented,
			"a two-step upload needs S3 object storage, which can sign an upload URL; POST the zip as the body (Content-Type: application/zip)")
	}
	return err
}

// POST /v1/udf/bundles: the zip as the body (Content-Type application/zip), or, for a two-step
// upload, a JSON object (Content-Type application/json; {} or empty) that answers where to PUT it.
func (s *Server) uploadBundle(w http.ResponseWriter, r *http.Request) (any, error) {
	if s.bundles == nil {
		return nil, bundleErr(udf.ErrNoStorage)
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch ct {
	case "application/zip", "application/x-zip-compressed", "application/octet-stream":
		b, err := s.bundles.Upload(r.Context(), tenantOf(r), keyOf(r), r.Body)
		if err != nil {
			return nil, bundleErr(err)
		}
		return created{bundleJSON(b, false)}, nil
	case "application/json":
		raw, err := io.ReadAll(io.LimitReader(r.Body, 1<<10))
		if err != nil {
			return nil, err
		}
		if body := strings.TrimSpace(string(raw)); body != "" && body != "{}" {
			return nil, request.Errorf(http.StatusBadRequest, "a two-step upload takes an empty JSON object: the archive's language and entrypoint come from its manifest")
		}
		b, up, err := s.bundles.Create(r.Context(), tenantOf(r), keyOf(r))
		if err != nil {
			return nil, bundleErr(err)
		}
		out := bundleJSON(b, false)
		out["upload_url"], out["upload_method"], out["upload_headers"], out["upload_expires_at"] = up.URL, up.Method, up.Headers, snakeTime(up.ExpiresAt)
		out["finalize_url"] = "/v1/udf/bundles/" + b.ID + "/finalize"
		return created{out}, nil
	}
	return nil, request.Errorf(http.StatusUnsupportedMediaType,
		"send the bundle's zip as the body with Content-Type: application/zip, or {} with Content-Type: application/json for a two-step upload")
}

// POST /v1/udf/bundles/{bundle_id}/finalize
func (s *Server) finalizeBundle(w http.ResponseWriter, r *http.Request) (any, error) {
	if err := request.NoBody(r); err != nil {
		return nil, err
	}
	if s.bundles == nil {
		return nil, bundleErr(udf.ErrNoStorage)
	}
	b, err := s.bundles.Finalize(r.Context(), tenantOf(r), r.PathValue("bundle_id"))
	if err != nil {
		return nil, bundleErr(err)
	}
	return bundleJSON(b, true), nil
}

// GET /v1/udf/bundles/{bundle_id}
func (s *Server) getBundle(w http.ResponseWriter, r *http.Request) (any, error) {
	if s.bundles == nil {
		return nil, bundleErr(udf.ErrNotFound)
	}
	b, err := s.bundles.Get(r.Context(), tenantOf(r), r.PathValue("bundle_id"))
	if err != nil {
		return nil, bundleErr(err)
	}
	return bundleJSON(b, true), nil
}

// POST /v1/udf/bundles/{bundle_id}/disable
func (s *Server) disableBundle(w http.ResponseWriter, r *http.Request) (any, error) {
	if err := request.NoBody(r); err != nil {
		return nil, err
	}
	if s.bundles == nil {
		return nil, bundleErr(udf.ErrNotFound)
	}
	b, err := s.bundles.Disable(r.Context(), tenantOf(r), r.PathValue("bundle_id"), keyOf(r))
	if err != nil {
		return nil, bundleErr(err)
	}
	return bundleJSON(b, true), nil
}

// GET /v1/udf/bundles?limit=&cursor=: newest first.
func (s *Server) listBundles(w http.ResponseWriter, r *http.Request) (any, error) {
	q := r.URL.Query()
	p := store.BundleListParams{Tenant: tenantOf(r), Limit: 50}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 200 {
			return nil, request.Errorf(http.StatusBadRequest, "limit must be an integer from 1 to 200, got %q", v)
		}
		p.Limit = n
	}
	if v := q.Get("cursor"); v != "" {
		at, id, ok := decodeBundleCursor(v)
		if !ok {
			return nil, request.Errorf(http.StatusBadRequest, "invalid cursor: pass the next_cursor of a previous page")
		}
		p.BeforeCreated, p.BeforeID = at, id
	}
	out := []map[string]any{}
	var next any
	if s.bundles != nil {
		bs, err := s.bundles.List(r.Context(), p)
		if err != nil {
			return nil, err
		}
		for _, b := range bs {
			out = append(out, bundleJSON(b, false))
		}
		if len(bs) == p.Limit {
			last := bs[len(bs)-1]
			next = base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(last.CreatedAt.UnixMilli(), 10) + "." + last.ID))
		}
	}
	return map[string]any{"bundles": out, "next_cursor": next}, nil
}

func decodeBundleCursor(v string) (time.Time, string, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil {
		return time.Time{}, "", false
	}
	ms, id, ok := strings.Cut(string(raw), ".")
	n, err := strconv.ParseInt(ms, 10, 64)
	if !ok || err != nil || id == "" {
		return time.Time{}, "", false
	}
	return time.UnixMilli(n).UTC(), id, true
}

// GET /v1/task/bundle: the archive of the bundle the token's attempt runs, while its lease is
// live. An If-None-Match naming its SHA-256 answers 304 (a runner's cached copy is current and
// the bundle still enabled); a disabled bundle is refused (403), so the runner fails the task
// as a configuration error instead of running it.
func (s *Server) taskBundle(w http.ResponseWriter, r *http.Request) (any, error) {
	c := capability.Claims(r)
	ctx := r.Context()
	sc, err := scope.Running(ctx, s.d, dispatch.Fence{TaskID: c.TaskID, Attempt: c.Attempt, LeaseToken: c.LeaseToken})
	if err != nil {
		return nil, err
	}
	if sc.Bundle == "" || s.bundles == nil {
		return nil, &dispatch.ForbiddenError{Message: "this task's job runs no bundle"}
	}
	b, obj, err := s.bundles.Open(ctx, sc.Tenant, sc.Bundle)
	var state *udf.StateError
	if errors.As(err, &state) || errors.Is(err, udf.ErrNotFound) {
		return nil, &dispatch.ForbiddenError{Message: err.Error()}
	}
	if err != nil {
		return nil, err
	}
	defer obj.Close()
	etag := `"` + b.SHA256 + `"`
	w.Header().Set("ETag", etag)
	w.Header().Set("X-Bundle-SHA256", b.SHA256)
	if inm := r.Header.Get("If-None-Match"); inm != "" && (inm == etag || inm == b.SHA256) {
		w.WriteHeader(http.StatusNotModified)
		return nil, nil
	}
	// No Content-Length from the record: the object is sent as it is, and the runner's hash
	// check (not a short read) is what tells an object changed since its upload.
	w.Header().Set("Content-Type", "application/zip")
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, obj); err != nil {
		s.log.WarnContext(ctx, "send a bundle", "bundle_id", b.ID, "task_id", sc.TaskID, "err", err)
	}
	return nil, nil
}
