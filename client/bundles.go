package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Bundle is a user code bundle: a zip whose manifest says its language and entrypoint, stored
// immutably. State is "ready", "pending" (a two-step upload not finalized) or "disabled".
type Bundle struct {
	BundleID    string          `json:"bundle_id"`
	State       string          `json:"state"`
	SHA256      string          `json:"sha256"`
	Size        int64           `json:"size"`
	Language    string          `json:"language"`
	Entrypoint  string          `json:"entrypoint"`
	UploadedBy  string          `json:"uploaded_by"`
	CreatedAt   time.Time       `json:"created_at"`
	FinalizedAt *time.Time      `json:"finalized_at"`
	DisabledAt  *time.Time      `json:"disabled_at"`
	DisabledBy  string          `json:"disabled_by"`
	Manifest    json.RawMessage `json:"manifest,omitempty"`
}

// BundlePage is a page of a tenant's bundles, newest first; NextCursor continues it ("" at the
// end).
type BundlePage struct {
	Bundles    []Bundle `json:"bundles"`
	NextCursor string   `json:"next_cursor"`
}

// UploadBundle uploads a bundle's zip (POST /v1/udf/bundles, Content-Type application/zip).
func (c *Client) UploadBundle(ctx context.Context, zip []byte) (*Bundle, error) {
	var out Bundle
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/udf/bundles", body: zip,
		header: http.Header{"Content-Type": {"application/zip"}}}, &out)
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// GetBundle returns one of the tenant's bundles, with its manifest.
func (c *Client) GetBundle(ctx context.Context, id string) (*Bundle, error) {
	var out Bundle
	if _, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/udf/bundles/" + url.PathEscape(id), retry: true}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListBundles returns a page of the tenant's bundles, newest first: limit 0 is the server's
// default, cursor "" the first page.
func (c *Client) ListBundles(ctx context.Context, limit int, cursor string) (*BundlePage, error) {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	path := "/v1/udf/bundles"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out BundlePage
	if _, err := c.do(ctx, request{method: http.MethodGet, path: path, retry: true}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DisableBundle disables a bundle for good: its tasks fail instead of running it.
func (c *Client) DisableBundle(ctx context.Context, id string) (*Bundle, error) {
	var out Bundle
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/udf/bundles/" + url.PathEscape(id) + "/disable", retry: true}, &out)
	if err != nil {
		return nil, err
	}
	return &out, nil
}
