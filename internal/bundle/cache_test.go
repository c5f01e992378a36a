package bundle

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// sized is a valid bundle whose one file is n bytes of c, and its hash.
func sized(t *testing.T, c byte, n int) ([]byte, string) {
	t.Helper()
	data := bytes.Repeat([]byte{c}, n)
	zb := bundleOf(t, manifestOf(Binary, "bootstrap", fileOf("bootstrap", data)), entry{name: "bootstrap", data: data})
	return zb, sum(zb)
}

// cacheDir is a new folder for a cache, removed after the test although its trees are read-only.
func cacheDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	t.Cleanup(func() { Remove(dir) })
	return dir
}

func openCache(t *testing.T, dir string, max int64) *Cache {
	t.Helper()
	c, err := OpenCache(dir, max)
	if err != nil {
		t.Fatalf("OpenCache: %v", err)
	}
	return c
}

// add adds zb and releases it at once.
func add(t *testing.T, c *Cache, zb []byte) string {
	t.Helper()
	dir, _, release, err := c.Add(sum(zb), bytes.NewReader(zb), Limits{})
	if err != nil {
		t.Fatalf("Add: %v", err)
	}
	release()
	return dir
}

// names lists the cache's folder.
func names(t *testing.T, dir string) []string {
	t.Helper()
	list, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list {
		out = append(out, e.Name())
	}
	return out
}

func isCached(c *Cache, hash string) bool {
	_, _, release, ok := c.Get(hash)
	if ok {
		release()
	}
	return ok
}

func TestCacheAddThenGet(t *testing.T) {
	t.Parallel()
	root := cacheDir(t)
	c := openCache(t, root, 0)
	zb, hash := sized(t, 'a', 10)
	dir, m, release, err := c.Add(hash, bytes.NewReader(zb), Limits{})
	if err != nil {
		t.Fatalf("Add: %v", err)
	}
	defer release()
	if dir != filepath.Join(root, hash) || m.Entrypoint != "bootstrap" {
		t.Errorf("Add = %s, %+v", dir, m)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "bootstrap")); err != nil || string(b) != strings.Repeat("a", 10) {
		t.Errorf("bootstrap = %q, %v", b, err)
	}
	if got := modeOf(t, dir); got != fs.ModeDir|0o555 {
		t.Errorf("tree: mode %s; want read-only", got)
	}
	m.Files[0].Path = "changed by the caller"

	gdir, gm, grelease, ok := c.Get(hash)
	if !ok || gdir != dir || gm.Files[0].Path != "bootstrap" {
		t.Errorf("Get = %s, %+v, %t", gdir, gm, ok)
	}
	grelease()
	grelease() // a second release is harmless
	if want := []string{hash, hash + ".json"}; !slices.Equal(names(t, root), want) {
		t.Errorf("cache holds %q; want %q", names(t, root), want)
	}

	for _, h := range []string{strings.Repeat("b", 64), "../" + hash, strings.ToUpper(hash), ""} {
		if _, _, _, ok := c.Get(h); ok {
			t.Errorf("Get(%q) found something", h)
		}
	}
	if _, _, _, err := c.Add("../evil", bytes.NewReader(zb), Limits{}); err == nil {
		t.Error("Add under a name that is not a hash: no error")
	}
}

func TestCacheAddRefusesAMismatchAndLeavesNothing(t *testing.T) {
	t.Parallel()
	root := cacheDir(t)
	c := openCache(t, root, 0)
	zb, hash := sized(t, 'a', 10)
	want := strings.Repeat("0", 64)
	_, _, _, err := c.Add(want, bytes.NewReader(zb), Limits{})
	if !errors.Is(err, ErrHashMismatch) || !strings.Contains(err.Error(), hash) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Add: %v; want ErrHashMismatch naming both hashes", err)
	}
	if got := names(t, root); len(got) != 0 {
		t.Errorf("cache holds %q", got)
	}
	if isCached(c, want) || isCached(c, hash) {
		t.Error("something is cached")
	}
}

func TestCacheAddOfARefusedBundleLeavesNothing(t *testing.T) {
	t.Parallel()
	root := cacheDir(t)
	c := openCache(t, root, 0)
	main := []byte("x")
	hostile := bundleOf(t, manifestOf(Python, "main.py", fileOf("main.py", main)), entry{name: "main.py", data: main}, entry{name: "../evil", data: main})
	_, _, _, err := c.Add(sum(hostile), bytes.NewReader(hostile), Limits{})
	wantRefusal(t, err, "../evil", "zip-slip")

	big, hash := sized(t, 'a', 1000)
	_, _, _, err = c.Add(hash, bytes.NewReader(big), Limits{Archive: 100})
	wantRefusal(t, err, "", "larger than 100 bytes")
	if got := names(t, root); len(got) != 0 {
		t.Errorf("cache holds %q", got)
	}
}

func TestCacheEvictsTheLeastRecentlyUsed(t *testing.T) {
	t.Parallel()
	root := cacheDir(t)
	c := openCache(t, root, 250)
	a, ha := sized(t, 'a', 100)
	b, hb := sized(t, 'b', 100)
	d, hd := sized(t, 'd', 100)
	add(t, c, a)
	add(t, c, b)
	if !isCached(c, ha) { // a is now used more recently than b
		t.Fatal("a is not cached")
	}
	add(t, c, d)
	if !isCached(c, ha) || isCached(c, hb) || !isCached(c, hd) {
		t.Errorf("a %t, b %t, d %t; want b alone evicted", isCached(c, ha), isCached(c, hb), isCached(c, hd))
	}
	if got := names(t, root); slices.Contains(got, hb) || slices.Contains(got, hb+".json") || len(got) != 4 {
		t.Errorf("cache holds %q; want a and d alone", got)
	}
}

func TestCacheKeepsBundlesInUse(t *testing.T) {
	t.Parallel()
	root := cacheDir(t)
	c := openCache(t, root, 150)
	a, ha := sized(t, 'a', 100)
	b, hb := sized(t, 'b', 100)
	adir, _, releaseA, err := c.Add(ha, bytes.NewReader(a), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	_, _, releaseB, err := c.Add(hb, bytes.NewReader(b), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(adir, "bootstrap")); err != nil {
		t.Fatalf("a, in use, was removed: %v", err)
	}
	if !isCached(c, ha) || !isCached(c, hb) {
		t.Fatal("a bundle in use is not cached")
	}
	releaseA() // the cache is over its maximum: a, no longer in use and the least recently used, goes
	if isCached(c, ha) || !isCached(c, hb) {
		t.Errorf("after a's release: a %t, b %t; want b alone", isCached(c, ha), isCached(c, hb))
	}
	releaseB()
	if !isCached(c, hb) {
		t.Error("b, within the maximum, was evicted")
	}
}

func TestCacheSurvivesARestart(t *testing.T) {
	t.Parallel()
	root := cacheDir(t)
	c := openCache(t, root, 0)
	a, ha := sized(t, 'a', 100)
	b, hb := sized(t, 'b', 100)
	add(t, c, a)
	add(t, c, b)
	// a was added before b, as the next open reads it.
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(filepath.Join(root, ha+".json"), old, old); err != nil {
		t.Fatal(err)
	}

	// What a crash leaves behind: a tree being extracted, a download, a tree whose manifest was
	// not written yet, a manifest whose tree was removed, a manifest cut short; and a file the
	// cache does not own.
	half := filepath.Join(root, tmpPrefix+"XYZ")
	if err := os.MkdirAll(filepath.Join(half, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(half, "sub"), 0o555)
	os.Chmod(half, 0o555)
	orphanTree := strings.Repeat("c", 64)
	orphanManifest := strings.Repeat("d", 64) + ".json"
	cutShort := strings.Repeat("e", 64)
	for _, p := range []string{tmpPrefix + "1.zip", orphanManifest, cutShort + ".json", "README"} {
		if err := os.WriteFile(filepath.Join(root, p), []byte("{"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{orphanTree, cutShort} {
		if err := os.Mkdir(filepath.Join(root, p), 0o555); err != nil {
			t.Fatal(err)
		}
	}

	c = openCache(t, root, 0)
	if !isCached(c, ha) || !isCached(c, hb) {
		t.Error("a bundle was lost")
	}
	want := []string{"README", ha, ha + ".json", hb, hb + ".json"}
	slices.Sort(want)
	if got := names(t, root); !slices.Equal(got, want) {
		t.Errorf("cache holds %q; want %q", got, want)
	}

	// Reopened smaller, it keeps the most recently added.
	c = openCache(t, root, 150)
	if isCached(c, ha) || !isCached(c, hb) {
		t.Errorf("a %t, b %t; want b alone", isCached(c, ha), isCached(c, hb))
	}
}

// counting counts the readers of an archive that were read at all.
type counting struct {
	r    io.Reader
	read *atomic.Int32
	once sync.Once
}

func (c *counting) Read(p []byte) (int, error) {
	c.once.Do(func() { c.read.Add(1) })
	return c.r.Read(p)
}

func TestCacheConcurrentAddsOfOneHashExtractOnce(t *testing.T) {
	t.Parallel()
	root := cacheDir(t)
	c := openCache(t, root, 0)
	zb, hash := sized(t, 'a', 100_000)
	var read atomic.Int32
	var wg sync.WaitGroup
	dirs := make([]string, 8)
	errs := make([]error, 8)
	for i := range dirs {
		wg.Go(func() {
			dir, _, release, err := c.Add(hash, &counting{r: bytes.NewReader(zb), read: &read}, Limits{})
			dirs[i], errs[i] = dir, err
			if err == nil {
				release()
			}
		})
	}
	wg.Wait()
	for i := range dirs {
		if errs[i] != nil || dirs[i] != filepath.Join(root, hash) {
			t.Errorf("Add %d = %s, %v", i, dirs[i], errs[i])
		}
	}
	if n := read.Load(); n != 1 {
		t.Errorf("%d archives read; want 1", n)
	}
	if want := []string{hash, hash + ".json"}; !slices.Equal(names(t, root), want) {
		t.Errorf("cache holds %q; want %q", names(t, root), want)
	}
}

// TestCacheConcurrentAddsAndGets: bundles added, used and evicted at once stay consistent (run
// it with -race).
func TestCacheConcurrentAddsAndGets(t *testing.T) {
	t.Parallel()
	root := cacheDir(t)
	c := openCache(t, root, 300)
	var zips [][]byte
	for i := range 6 {
		zb, _ := sized(t, byte('a'+i), 100)
		zips = append(zips, zb)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 20 {
				zb := zips[(g+i)%len(zips)]
				dir, _, release, err := c.Add(sum(zb), bytes.NewReader(zb), Limits{})
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := os.Stat(filepath.Join(dir, "bootstrap")); err != nil {
					t.Errorf("a bundle in use is gone: %v", err)
				}
				if _, _, r, ok := c.Get(sum(zips[i%len(zips)])); ok {
					r()
				}
				release()
			}
		})
	}
	wg.Wait()
	c.mu.Lock()
	size, n := c.size, len(c.entries)
	c.mu.Unlock()
	if size > 300 || int64(n)*100 != size {
		t.Errorf("%d bundles of %d bytes in all; want at most 300", n, size)
	}
	if got := len(names(t, root)); got != 2*n {
		t.Errorf("%d names in the cache's folder for %d bundles", got, n)
	}
}

func TestOpenCacheRefusesANegativeMaximum(t *testing.T) {
	t.Parallel()
	if _, err := OpenCache(cacheDir(t), -1); err == nil {
		t.Error("no error")
	}
}
