// Package blob stores objects (batch artifacts) in a directory or an S3-compatible bucket.
//
// A store is named by a URL: file://DIR or s3://bucket[/prefix]. Every object has a key, a
// relative slash-separated path that CheckKey accepts, and a URI, the store's root followed by
// the key; Key turns a URI back into a key, refusing any URI that does not name an object under
// the root. The key is the object's name on disk or in the bucket unchanged, so a URI names the
// same object for whoever writes it directly (a task holding bucket credentials) and for whoever
// reads it through a Store.
package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	cloudblob "gocloud.dev/blob"
	"gocloud.dev/gcerrors"
)

var (
	// ErrNotFound is wrapped by Get's error when no object has the key.
	ErrNotFound = errors.New("blob: not found")
	// ErrOutside is wrapped by every refusal of a key or URI that does not name an object under
	// the store's root: a malformed key, one that could escape the root, a foreign URI.
	ErrOutside = errors.New("blob: outside the store")
)

// Options say how to reach an S3-compatible server; a file:// store ignores them.
type Options struct {
	// Endpoint is the server's URL (http://127.0.0.1:9000). When empty, AWS_ENDPOINT_URL_S3,
	// then AWS_ENDPOINT_URL, else AWS's own endpoint for the region. Any endpoint other than
	// AWS's own is addressed path-style (http://host/bucket/key), which every S3-compatible
	// server understands.
	Endpoint string
	// Region is the bucket's region. When empty, AWS_REGION, then AWS_DEFAULT_REGION, else
	// us-east-1.
	Region string
	// AccessKey and SecretKey, with SessionToken for temporary credentials, sign the requests.
	// When all are empty, the usual AWS chain supplies them (environment, ~/.aws files,
	// instance role).
	AccessKey, SecretKey, SessionToken string
}

// Store reads and writes the objects under one root. It is safe for concurrent use.
type Store struct {
	bucket *cloudblob.Bucket
	scheme string // "file" or "s3"
	root   string // canonical, ending in "/"
	s3     *S3Config
}

// S3Config is how an s3:// store reaches its server.
type S3Config struct {
	Bucket string
	// Endpoint is the server's URL; "" for AWS's own.
	Endpoint string
	// AWS holds the region and the credentials the store signs with.
	AWS aws.Config
}

// S3 returns how an s3:// store reaches its server, or nil for a file:// store.
func (s *Store) S3() *S3Config { return s.s3 }

// Open opens the store at rawURL:
//
//   - file://DIR — a directory, absolute (file:///var/lib/baton/artifacts) or relative to the
//     working directory (file://.baton/artifacts), made absolute and created if missing.
//   - s3://bucket[/prefix] — the objects under prefix in an S3-compatible bucket. The query may
//     carry endpoint= and region=, which override opts. Credentials never go in the URL.
func Open(ctx context.Context, rawURL string, opts Options) (*Store, error) {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	switch {
	case ok && strings.EqualFold(scheme, "file"):
		return openFile(rest)
	case ok && strings.EqualFold(scheme, "s3"):
		return openS3(ctx, "s3://"+rest, opts)
	}
	return nil, fmt.Errorf("blob: open %s: want file://DIR or s3://BUCKET[/PREFIX]", redact(rawURL))
}

// Root returns the canonical root of the store, ending in "/": "file:///abs/dir/",
// "s3://bucket/prefix/" or "s3://bucket/".
func (s *Store) Root() string { return s.root }

// URI returns the URI of the object with the key.
func (s *Store) URI(key string) string { return s.root + key }

// Key returns the key of the object that uri names. The scheme is compared without regard to
// case, and file:/DIR/KEY is read as file:///DIR/KEY; beyond that, uri must start with Root()
// and the rest must be a key CheckKey accepts, with no query or fragment. Anything else is
// refused with an error that wraps ErrOutside and says what is wrong.
func (s *Store) Key(uri string) (string, error) {
	scheme, rest, ok := strings.Cut(uri, ":")
	if !ok || scheme == "" {
		return "", fmt.Errorf("%w: %q is not a URI", ErrOutside, uri)
	}
	if !strings.EqualFold(scheme, s.scheme) {
		return "", fmt.Errorf("%w: %q has scheme %q, the store's is %q", ErrOutside, uri, scheme, s.scheme)
	}
	if s.scheme == "file" && strings.HasPrefix(rest, "/") && !strings.HasPrefix(rest, "//") {
		rest = "//" + rest
	}
	canonical := s.scheme + ":" + rest
	switch {
	case strings.Contains(canonical, "?"):
		return "", fmt.Errorf("%w: %q has a query", ErrOutside, uri)
	case strings.Contains(canonical, "#"):
		return "", fmt.Errorf("%w: %q has a fragment", ErrOutside, uri)
	case !strings.HasPrefix(canonical, s.root):
		return "", fmt.Errorf("%w: %q is not under %s", ErrOutside, uri, s.root)
	}
	key := canonical[len(s.root):]
	if err := CheckKey(key); err != nil {
		return "", fmt.Errorf("%q: %w", uri, err)
	}
	return key, nil
}

// Put stores data under key, replacing any object there. Readers see the old object or the new
// one, never a part of either.
func (s *Store) Put(ctx context.Context, key string, data []byte, contentType string) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	err := s.bucket.WriteAll(ctx, key, data, &cloudblob.WriterOptions{ContentType: contentType})
	if err != nil {
		return fmt.Errorf("put %s: %w", s.URI(key), err)
	}
	return nil
}

// PutFrom stores what r holds under key, as Put does, streaming it rather than holding it in
// memory. An error reading r leaves no object behind (nor changes one that was there).
func (s *Store) PutFrom(ctx context.Context, key string, r io.Reader, contentType string) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx) // canceling a writer's context discards what it wrote
	defer cancel()
	w, err := s.bucket.NewWriter(ctx, key, &cloudblob.WriterOptions{ContentType: contentType})
	if err != nil {
		return fmt.Errorf("put %s: %w", s.URI(key), err)
	}
	if _, err := io.Copy(w, r); err != nil {
		cancel()
		_ = w.Close()
		return fmt.Errorf("put %s: %w", s.URI(key), err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("put %s: %w", s.URI(key), err)
	}
	return nil
}

// ErrNoSignedURLs is wrapped by SignedURL's error on a store that cannot sign URLs: a file://
// store, which nothing outside this process can reach.
var ErrNoSignedURLs = errors.New("blob: this object storage cannot sign URLs (it is not S3)")

// SignedURL returns a URL that lets its holder, until expiry, GET the object under key, or PUT
// one there (method "PUT"): an S3 pre-signed URL. The upload's Content-Type is not part of the
// signature (the AWS SDK cannot sign one), so any is accepted.
func (s *Store) SignedURL(ctx context.Context, key, method string, expiry time.Duration) (string, error) {
	if err := CheckKey(key); err != nil {
		return "", err
	}
	if s.scheme != "s3" {
		return "", ErrNoSignedURLs
	}
	u, err := s.bucket.SignedURL(ctx, key, &cloudblob.SignedURLOptions{Method: method, Expiry: expiry})
	if err != nil {
		return "", fmt.Errorf("sign a URL for %s: %w", s.URI(key), err)
	}
	return u, nil
}

// Get opens the object under key for reading; the caller closes it. A missing object is an
// error that wraps ErrNotFound.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	r, err := s.bucket.NewReader(ctx, key, nil)
	if err != nil {
		if isNotFound(err) {
			return nil, fmt.Errorf("get %s: %w", s.URI(key), ErrNotFound)
		}
		return nil, fmt.Errorf("get %s: %w", s.URI(key), err)
	}
	return r, nil
}

// Delete removes the object under key; deleting a missing object is not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	err := s.bucket.Delete(ctx, key)
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("delete %s: %w", s.URI(key), err)
	}
	if err != nil && s.scheme == "s3" {
		// The library asks S3 whether the object exists with a HEAD request, whose answer
		// cannot tell a missing object from a missing bucket; a listing can.
		_, _, err := s.bucket.ListPage(ctx, cloudblob.FirstPageToken, 1, nil)
		if isNoSuchBucket(err) {
			return fmt.Errorf("delete %s: %w", s.URI(key), err)
		}
	}
	return nil
}

// List returns the keys that start with prefix ("" for all), sorted. It lists only keys that
// CheckKey accepts: whatever else lies under the root (the directory store's temporary files,
// objects other tools named) could not be read through the store anyway.
func (s *Store) List(ctx context.Context, prefix string) ([]string, error) {
	objs, err := s.ListObjects(ctx, prefix)
	if err != nil {
		return nil, err
	}
	keys := make([]string, len(objs))
	for i, o := range objs {
		keys[i] = o.Key
	}
	return keys, nil
}

// Object is an object as a listing describes it.
type Object struct {
	Key string
	// Size is the object's length in bytes.
	Size int64
	// ModTime is when the object was last written: the file's modification time in a file://
	// store, the object's Last-Modified in an s3:// one (whole seconds).
	ModTime time.Time
}

// ListObjects is List with each object's size and last modification time, sorted by key: what
// a reader needs to add up the bytes under a prefix, or to judge how old its objects are.
func (s *Store) ListObjects(ctx context.Context, prefix string) ([]Object, error) {
	if prefix != "" {
		if err := CheckPrefix(prefix); err != nil {
			return nil, fmt.Errorf("list: prefix: %w", err)
		}
	}
	var objs []Object
	it := s.bucket.List(&cloudblob.ListOptions{Prefix: prefix})
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", s.URI(prefix), err)
		}
		if !obj.IsDir && CheckKey(obj.Key) == nil {
			objs = append(objs, Object{Key: obj.Key, Size: obj.Size, ModTime: obj.ModTime.UTC()})
		}
	}
	slices.SortFunc(objs, func(a, b Object) int { return strings.Compare(a.Key, b.Key) })
	return objs, nil
}

// Path returns the file that holds the object under key in a file:// store, for a reader that
// opens files itself: "" for an s3:// store. The file must be a regular file whose real path,
// every symbolic link resolved, is the key's place under the root; anything else (a link to
// elsewhere, a directory, a missing object) is an error, so that the path never reaches beyond
// the object.
func (s *Store) Path(key string) (string, error) {
	if s.scheme != "file" {
		return "", nil
	}
	if err := CheckKey(key); err != nil {
		return "", err
	}
	root := filepath.FromSlash(strings.TrimPrefix(s.root, "file://"))
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", fmt.Errorf("path %s: %w", s.URI(key), err)
	}
	p := filepath.Join(root, filepath.FromSlash(key))
	real, err := filepath.EvalSymlinks(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("path %s: %w", s.URI(key), ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("path %s: %w", s.URI(key), err)
	}
	if real != filepath.Join(realRoot, filepath.FromSlash(key)) {
		return "", fmt.Errorf("%w: %s is a link to a file elsewhere", ErrOutside, s.URI(key))
	}
	info, err := os.Lstat(real)
	if err != nil {
		return "", fmt.Errorf("path %s: %w", s.URI(key), err)
	}
	if !info.Mode().IsRegular() {
		return "", fmt.Errorf("%w: %s is not a regular file", ErrOutside, s.URI(key))
	}
	return real, nil
}

// Close releases the store's resources.
func (s *Store) Close() error {
	return s.bucket.Close()
}

// isNotFound reports whether err says the object is missing. A missing bucket is a
// misconfiguration, not a missing object, though the library reports both alike.
func isNotFound(err error) bool {
	return gcerrors.Code(err) == gcerrors.NotFound && !isNoSuchBucket(err)
}

// redact hides the password of a URL that carries one, for error messages.
func redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	switch {
	case err == nil:
		return u.Redacted()
	case strings.Contains(rawURL, "@"):
		return "(a malformed URL)"
	}
	return rawURL
}
