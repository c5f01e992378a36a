package blob_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/blob"
	"github.com/baton-dev/baton/internal/blob/blobtest"
)

// backends lists every kind of store; each opens a fresh, empty one for a test.
var backends = []struct {
	name string
	open func(t testing.TB) (string, blob.Options)
}{
	{"file", func(t testing.TB) (string, blob.Options) { return blobtest.File(t), blob.Options{} }},
	{"s3", blobtest.S3},
}

// forEachBackend runs fn as a parallel subtest per back-end, on a fresh, empty store. The
// contract below holds for all of them alike.
func forEachBackend(t *testing.T, fn func(t *testing.T, s *blob.Store)) {
	t.Helper()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			url, opts := b.open(t)
			fn(t, open(t, url, opts))
		})
	}
}

func open(t testing.TB, url string, opts blob.Options) *blob.Store {
	t.Helper()
	s, err := blob.Open(context.Background(), url, opts)
	if err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close %s: %v", url, err)
		}
	})
	return s
}

func put(t testing.TB, s *blob.Store, key string, data []byte) {
	t.Helper()
	if err := s.Put(context.Background(), key, data, "application/x-ndjson"); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

func get(t testing.TB, s *blob.Store, key string) []byte {
	t.Helper()
	r, err := s.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer r.Close()
	data, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return data
}

func list(t testing.TB, s *blob.Store, prefix string) []string {
	t.Helper()
	keys, err := s.List(context.Background(), prefix)
	if err != nil {
		t.Fatalf("list %q: %v", prefix, err)
	}
	return keys
}

func TestGetReturnsWhatPutStored(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, s *blob.Store) {
		for key, data := range map[string][]byte{
			"jobs/42/batch-0001.jsonl": []byte(`{"n":1}` + "\n" + `{"n":2}` + "\n"),
			"top-level.jsonl":          []byte("{}\n"),
			"empty.jsonl":              {},
			"ünïcödé/批次 1.jsonl":       []byte("{\"ü\":true}\n"),
		} {
			put(t, s, key, data)
			if got := get(t, s, key); !bytes.Equal(got, data) {
				t.Errorf("get %s = %q, want %q", key, got, data)
			}
		}
	})
}

func TestPutReplacesTheObject(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, s *blob.Store) {
		put(t, s, "a/b.jsonl", []byte("a longer first version\n"))
		put(t, s, "a/b.jsonl", []byte("second\n"))
		if got := get(t, s, "a/b.jsonl"); string(got) != "second\n" {
			t.Errorf("get after overwrite = %q, want %q", got, "second\n")
		}
		if keys := list(t, s, ""); !slices.Equal(keys, []string{"a/b.jsonl"}) {
			t.Errorf("list after overwrite = %q, want one key", keys)
		}
	})
}

func TestGetOfAMissingKeyIsNotFound(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, s *blob.Store) {
		for _, key := range []string{"never-written", "dir/never-written"} {
			_, err := s.Get(t.Context(), key)
			if !errors.Is(err, blob.ErrNotFound) {
				t.Errorf("get %s = %v, want ErrNotFound", key, err)
			}
		}
		// A "directory" is not an object.
		put(t, s, "dir/x", []byte("x"))
		if _, err := s.Get(t.Context(), "dir"); !errors.Is(err, blob.ErrNotFound) {
			t.Errorf("get dir = %v, want ErrNotFound", err)
		}
	})
}

func TestDeleteRemovesTheObjectAndToleratesAMissingOne(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, s *blob.Store) {
		put(t, s, "a/1", []byte("1"))
		put(t, s, "a/2", []byte("2"))
		if err := s.Delete(t.Context(), "a/1"); err != nil {
			t.Fatalf("delete a/1: %v", err)
		}
		if _, err := s.Get(t.Context(), "a/1"); !errors.Is(err, blob.ErrNotFound) {
			t.Errorf("get after delete = %v, want ErrNotFound", err)
		}
		if keys := list(t, s, ""); !slices.Equal(keys, []string{"a/2"}) {
			t.Errorf("list after delete = %q, want [a/2]", keys)
		}
		for _, key := range []string{"a/1", "never-written", "no/such/dir"} {
			if err := s.Delete(t.Context(), key); err != nil {
				t.Errorf("delete of missing %s = %v, want nil", key, err)
			}
		}
	})
}

func TestListReturnsTheKeysUnderAPrefixSorted(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, s *blob.Store) {
		if keys := list(t, s, ""); len(keys) != 0 {
			t.Errorf("list of a new store = %q, want none", keys)
		}
		for _, key := range []string{"b", "a/2", "a/10", "ab", "a/1", "c/d/e", "a/sub/x"} {
			put(t, s, key, []byte(key))
		}
		for prefix, want := range map[string][]string{
			"":      {"a/1", "a/10", "a/2", "a/sub/x", "ab", "b", "c/d/e"},
			"a/":    {"a/1", "a/10", "a/2", "a/sub/x"},
			"a":     {"a/1", "a/10", "a/2", "a/sub/x", "ab"},
			"a/1":   {"a/1", "a/10"},
			"c/d/":  {"c/d/e"},
			"c/d/e": {"c/d/e"},
			"zzz":   nil,
			"zzz/":  nil,
		} {
			if keys := list(t, s, prefix); !slices.Equal(keys, want) {
				t.Errorf("list %q = %q, want %q", prefix, keys, want)
			}
		}
	})
}

// ListObjects describes each object under a prefix: its key, its exact size and when it was last
// written, in key order, leaving out what List leaves out.
func TestListObjectsGivesSizesAndModificationTimes(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, s *blob.Store) {
		before := time.Now().Add(-time.Minute)
		objects := map[string][]byte{
			"ds/t/1/0-9/part-0.parquet": bytes.Repeat([]byte("x"), 1234),
			"ds/t/1/0-9/part-1.parquet": bytes.Repeat([]byte("y"), 5),
			"ds/t/1/0-9/_SUCCESS":       {},
			"ds/t/1/10-19/part-0":       []byte("other partition"),
			"ds/t/10/0-9/part-0":        []byte("a sibling attempt"),
		}
		for key, data := range objects {
			put(t, s, key, data)
		}
		after := time.Now().Add(time.Minute)
		objs, err := s.ListObjects(t.Context(), "ds/t/1/0-9/")
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, o := range objs {
			keys = append(keys, o.Key)
			if o.Size != int64(len(objects[o.Key])) {
				t.Errorf("%s: size %d, want %d", o.Key, o.Size, len(objects[o.Key]))
			}
			if o.ModTime.Before(before) || o.ModTime.After(after) || o.ModTime.Location() != time.UTC {
				t.Errorf("%s: modified at %v, want a UTC time within a minute of the write", o.Key, o.ModTime)
			}
		}
		if want := []string{"ds/t/1/0-9/_SUCCESS", "ds/t/1/0-9/part-0.parquet", "ds/t/1/0-9/part-1.parquet"}; !slices.Equal(keys, want) {
			t.Errorf("listed %q, want %q", keys, want)
		}
		if objs, err := s.ListObjects(t.Context(), "nothing/here/"); err != nil || len(objs) != 0 {
			t.Errorf("an empty prefix lists %v, %v; want nothing", objs, err)
		}
		if _, err := s.ListObjects(t.Context(), "../"); !errors.Is(err, blob.ErrOutside) {
			t.Errorf("list ../ = %v, want ErrOutside", err)
		}
	})
}

// A file store's modification time is the file's: what an operator, or a test, sets on it.
func TestFileStoreListObjectsReadsTheFilesTime(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := open(t, "file://"+dir, blob.Options{})
	put(t, s, "a/old", []byte("old"))
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := os.Chtimes(filepath.Join(dir, "a", "old"), old, old); err != nil {
		t.Fatal(err)
	}
	objs, err := s.ListObjects(t.Context(), "a/")
	if err != nil || len(objs) != 1 || !objs[0].ModTime.Equal(old) || objs[0].Size != 3 {
		t.Errorf("list = %+v, %v; want a/old of 3 bytes modified at %v", objs, err, old)
	}
}

func TestKeyInvertsURI(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, s *blob.Store) {
		if !strings.HasSuffix(s.Root(), "/") {
			t.Errorf("Root() = %q, want it to end in /", s.Root())
		}
		for _, key := range []string{"x", "jobs/42/batch-0001.jsonl", "ünï/批次 1.jsonl", "a:b@c"} {
			uri := s.URI(key)
			if uri != s.Root()+key {
				t.Errorf("URI(%q) = %q, want Root()+key", key, uri)
			}
			got, err := s.Key(uri)
			if err != nil || got != key {
				t.Errorf("Key(URI(%q)) = %q, %v; want the key back", key, got, err)
			}
		}
		// A URI handed on (to a sink, say) reads the object back.
		put(t, s, "handed/on.jsonl", []byte("payload"))
		key, err := s.Key(s.URI("handed/on.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		if got := get(t, s, key); string(got) != "payload" {
			t.Errorf("get via URI = %q, want payload", got)
		}
	})
}

func TestOperationsRefuseKeysThatCouldEscapeTheRoot(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, s *blob.Store) {
		ctx := t.Context()
		for _, key := range []string{"", "../escaped", "a/../../escaped", "/etc/passwd", "a//b", `..\escaped`, "a/*", "%2e%2e/escaped", "x.tmp"} {
			if err := s.Put(ctx, key, []byte("x"), ""); !errors.Is(err, blob.ErrOutside) {
				t.Errorf("put %q = %v, want ErrOutside", key, err)
			}
			if _, err := s.Get(ctx, key); !errors.Is(err, blob.ErrOutside) {
				t.Errorf("get %q = %v, want ErrOutside", key, err)
			}
			if err := s.Delete(ctx, key); !errors.Is(err, blob.ErrOutside) {
				t.Errorf("delete %q = %v, want ErrOutside", key, err)
			}
		}
		for _, prefix := range []string{"../", "..", "a/../", "/", "//", "a//", "a/*"} {
			if _, err := s.List(ctx, prefix); !errors.Is(err, blob.ErrOutside) {
				t.Errorf("list %q = %v, want ErrOutside", prefix, err)
			}
		}
		if keys := list(t, s, ""); len(keys) != 0 {
			t.Errorf("the store holds %q after refusals, want nothing", keys)
		}
	})
}

func TestReadersNeverSeePartOfAnObject(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, s *blob.Store) {
		ctx := t.Context()
		const size = 256 << 10
		versions := [][]byte{bytes.Repeat([]byte("a"), size), bytes.Repeat([]byte("b"), size/2)}
		put(t, s, "obj", versions[0])

		done := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			defer close(done)
			for i := range 20 {
				if err := s.Put(ctx, "obj", versions[(i+1)%2], ""); err != nil {
					t.Errorf("put: %v", err)
					return
				}
			}
		})
		for range 4 {
			wg.Go(func() {
				for {
					select {
					case <-done:
						return
					default:
					}
					r, err := s.Get(ctx, "obj")
					if err != nil {
						t.Errorf("get: %v", err)
						return
					}
					data, err := io.ReadAll(r)
					r.Close()
					if err != nil {
						t.Errorf("read: %v", err)
						return
					}
					if !bytes.Equal(data, versions[0]) && !bytes.Equal(data, versions[1]) {
						t.Errorf("read %d bytes that are neither version whole", len(data))
						return
					}
				}
			})
		}
		wg.Wait()
		if keys := list(t, s, ""); !slices.Equal(keys, []string{"obj"}) {
			t.Errorf("list after concurrent writes = %q, want [obj]", keys)
		}
	})
}

// The file store's directory holds the objects under their keys and nothing else: no attribute
// sidecars, no temporary files.
func TestFileStoreDirectoryHoldsOnlyTheObjects(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := open(t, "file://"+dir, blob.Options{})
	keys := []string{"jobs/1/batch-0001.jsonl", "jobs/1/batch-0002.jsonl", "top.jsonl"}
	for _, key := range keys {
		put(t, s, key, []byte(key))
		put(t, s, key, []byte(key)) // an overwrite leaves nothing behind either
	}
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		files = append(files, filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(files, keys) {
		t.Errorf("files in the directory = %q, want exactly %q", files, keys)
	}
	for _, key := range keys {
		data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(key)))
		if err != nil || string(data) != key {
			t.Errorf("file %s = %q, %v; want the object", key, data, err)
		}
	}
}

func TestFileStoreListHidesLeftoverFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := open(t, "file://"+dir, blob.Options{})
	put(t, s, "a/real.jsonl", []byte("x"))
	for _, name := range []string{"a/real.jsonl.18f3a2b4c5d6e7f8.tmp", "a/real.jsonl.attrs", "stray%name"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("junk"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if keys := list(t, s, ""); !slices.Equal(keys, []string{"a/real.jsonl"}) {
		t.Errorf("list = %q, want only the object", keys)
	}
}

func TestFileStoreRefusesURIsOutsideItsDirectory(t *testing.T) {
	t.Parallel()
	parent := t.TempDir()
	s := open(t, "file://"+filepath.Join(parent, "store"), blob.Options{})
	for _, uri := range []string{"file:///etc/passwd", "file://" + parent + "/secret", "file://" + parent + "/store/../secret"} {
		if _, err := s.Key(uri); !errors.Is(err, blob.ErrOutside) {
			t.Errorf("Key(%q) = %v, want ErrOutside", uri, err)
		}
	}
	if err := s.Put(t.Context(), "../secret", []byte("x"), ""); !errors.Is(err, blob.ErrOutside) {
		t.Errorf("put ../secret = %v, want ErrOutside", err)
	}
	if _, err := os.Stat(filepath.Join(parent, "secret")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a file was written outside the store: %v", err)
	}
}

// A store under a prefix sees only its own objects, and names each one in the bucket by the
// prefix and its key, unchanged.
func TestS3StoreIsConfinedToItsPrefix(t *testing.T) {
	t.Parallel()
	rawURL, opts := blobtest.S3(t)
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	prefixed := open(t, rawURL, opts)
	whole := open(t, "s3://"+u.Host, opts)
	prefix := strings.TrimPrefix(u.Path, "/") + "/"

	put(t, whole, "elsewhere/x", []byte("not ours"))
	put(t, whole, strings.TrimSuffix(prefix, "/")+"-sibling/x", []byte("not ours either"))
	put(t, prefixed, "jobs/1/batch.jsonl", []byte("ours"))

	if keys := list(t, prefixed, ""); !slices.Equal(keys, []string{"jobs/1/batch.jsonl"}) {
		t.Errorf("prefixed list = %q, want only its own object", keys)
	}
	if got := get(t, whole, prefix+"jobs/1/batch.jsonl"); string(got) != "ours" {
		t.Errorf("the object under its full name = %q, want ours", got)
	}
	key, err := whole.Key(prefixed.URI("jobs/1/batch.jsonl"))
	if err != nil || key != prefix+"jobs/1/batch.jsonl" {
		t.Errorf("the bucket's store reads the URI as %q, %v; want %q", key, err, prefix+"jobs/1/batch.jsonl")
	}
	if _, err := prefixed.Key(whole.URI("elsewhere/x")); !errors.Is(err, blob.ErrOutside) {
		t.Errorf("Key of an object outside the prefix = %v, want ErrOutside", err)
	}
}

// A missing bucket is a misconfiguration, not a missing object.
func TestS3MissingBucketIsNotNotFound(t *testing.T) {
	t.Parallel()
	_, opts := blobtest.S3(t)
	s := open(t, "s3://baton-test-no-such-bucket", opts)
	if _, err := s.Get(t.Context(), "x"); err == nil || errors.Is(err, blob.ErrNotFound) {
		t.Errorf("get from a missing bucket = %v, want an error other than ErrNotFound", err)
	}
	if err := s.Delete(t.Context(), "x"); err == nil {
		t.Errorf("delete from a missing bucket = nil, want an error")
	}
}
