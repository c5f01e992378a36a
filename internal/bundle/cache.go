package bundle

import (
	"cmp"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// ErrHashMismatch is an archive given to Cache.Add whose bytes are not the ones pinned.
var ErrHashMismatch = errors.New("bundle: the archive's SHA-256 is not the one pinned")

// DefaultCacheMax is the unpacked bytes a Cache keeps when OpenCache is given 0.
const DefaultCacheMax = 1 << 30

// tmpPrefix starts every name in a cache's folder that is not a finished bundle: archives being
// downloaded, trees being extracted or removed, manifests being written. OpenCache removes them.
const tmpPrefix = "tmp-"

// Cache keeps verified, extracted bundles in a folder, each under its archive's SHA-256: the
// tree in HASH/ (read-only, as Extract writes it) and its manifest in HASH.json, written last so
// that a tree without one is a crash's leftover. Only one Cache may use a folder at a time.
type Cache struct {
	dir string
	max int64

	mu      sync.Mutex
	entries map[string]*cached
	adding  map[string]chan struct{} // closed once the Add of that hash under way ends
	size    int64                    // unpacked bytes of entries
	clock   uint64                   // counts uses, for least recently used
}

type cached struct {
	m    *Manifest
	size int64
	refs int    // Gets and Adds not yet released
	used uint64 // clock at the last use
}

// OpenCache keeps verified, extracted bundles in dir by SHA-256, at most max bytes of archives'
// unpacked sizes (0: 1 GiB); the least recently used bundle not in use is removed when an
// addition would exceed it. It finds the bundles already in dir (after a restart they count as
// used in the order they were added) and removes what a crash left half written.
func OpenCache(dir string, max int64) (*Cache, error) {
	if max < 0 {
		return nil, fmt.Errorf("bundle: cache: a maximum of %d bytes; it must be 0 (1 GiB) or more", max)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("bundle: cache: %w", err)
	}
	if err := checkOwnDir(dir); err != nil {
		return nil, err
	}
	c := &Cache{dir: dir, max: cmp.Or(max, DefaultCacheMax), entries: map[string]*cached{}, adding: map[string]chan struct{}{}}
	list, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("bundle: cache: %w", err)
	}
	type found struct {
		sum   string
		added int64
	}
	var order []found
	for _, de := range list {
		name := de.Name()
		switch {
		case strings.HasPrefix(name, tmpPrefix):
			if err := Remove(filepath.Join(dir, name)); err != nil {
				return nil, fmt.Errorf("bundle: cache: %w", err)
			}
		case isHash(name) && de.IsDir():
			m, added, err := c.load(name)
			if err != nil {
				return nil, err
			}
			if m != nil {
				c.entries[name] = &cached{m: m, size: m.Unpacked()}
				c.size += m.Unpacked()
				order = append(order, found{name, added})
			}
		case isHash(strings.TrimSuffix(name, ".json")) && strings.HasSuffix(name, ".json"):
			if fi, err := os.Stat(filepath.Join(dir, strings.TrimSuffix(name, ".json"))); err != nil || !fi.IsDir() {
				if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return nil, fmt.Errorf("bundle: cache: %w", err)
				}
			}
		}
	}
	slices.SortFunc(order, func(a, b found) int { return cmp.Compare(a.added, b.added) })
	for _, f := range order {
		c.clock++
		c.entries[f.sum].used = c.clock
	}
	c.mu.Lock()
	victims := c.evictLocked(0)
	c.mu.Unlock()
	if err := c.removeAll(victims); err != nil {
		return nil, err
	}
	return c, nil
}

// load reads the manifest of the tree sum found at open, with the time it was written. A tree
// without a readable manifest is removed, and load returns no manifest.
func (c *Cache) load(sum string) (*Manifest, int64, error) {
	side := filepath.Join(c.dir, sum+".json")
	b, err := os.ReadFile(side)
	var m *Manifest
	if err == nil {
		m, err = DecodeManifest(b)
	}
	if err != nil {
		if err := os.Remove(side); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, 0, fmt.Errorf("bundle: cache: remove the unfinished %s: %w", sum, err)
		}
		if err := Remove(filepath.Join(c.dir, sum)); err != nil {
			return nil, 0, fmt.Errorf("bundle: cache: remove the unfinished %s: %w", sum, err)
		}
		return nil, 0, nil
	}
	fi, err := os.Stat(side)
	if err != nil {
		return nil, 0, fmt.Errorf("bundle: cache: %w", err)
	}
	return m, fi.ModTime().UnixNano(), nil
}

// Get returns the extracted bundle with that SHA-256, if cached, and marks it in use until
// release is called. The manifest is the caller's own copy.
func (c *Cache) Get(sha256 string) (dir string, m *Manifest, release func(), ok bool) {
	if !isHash(sha256) {
		return "", nil, nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[sha256]
	if !ok {
		return "", nil, nil, false
	}
	dir, m, release = c.acquireLocked(sha256, e)
	return dir, m, release, true
}

// Add reads an archive from r (at most l's limit of archive bytes) into a temporary file in the
// cache's folder while hashing it; a hash other than want is ErrHashMismatch (wrapped, with both
// hashes in the message) and nothing is extracted; else it is extracted (Extract) and renamed
// into place atomically, and returned in use as Get returns it. A bundle already cached is
// returned without reading r. While one Add of a hash is under way, another of the same hash
// waits for it, then returns what it added or, if it failed, tries its own reader.
func (c *Cache) Add(want string, r io.Reader, l Limits) (dir string, m *Manifest, release func(), err error) {
	if !isHash(want) {
		return "", nil, nil, fmt.Errorf("bundle: cache: %q is not a SHA-256 in 64 lowercase hex digits", want)
	}
	for {
		c.mu.Lock()
		if e, ok := c.entries[want]; ok {
			dir, m, release = c.acquireLocked(want, e)
			c.mu.Unlock()
			return dir, m, release, nil
		}
		if wait, ok := c.adding[want]; ok {
			c.mu.Unlock()
			<-wait
			continue
		}
		done := make(chan struct{})
		c.adding[want] = done
		c.mu.Unlock()

		dir, m, release, err = c.add(want, r, l)
		c.mu.Lock()
		delete(c.adding, want)
		close(done)
		c.mu.Unlock()
		return dir, m, release, err
	}
}

// add is Add once no other Add of want is under way.
func (c *Cache) add(want string, r io.Reader, l Limits) (string, *Manifest, func(), error) {
	l = l.OrDefaults()
	f, err := os.CreateTemp(c.dir, tmpPrefix+"*.zip")
	if err != nil {
		return "", nil, nil, fmt.Errorf("bundle: cache: %w", err)
	}
	defer func() {
		f.Close()
		os.Remove(f.Name())
	}()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(r, l.Archive+1))
	if err != nil {
		return "", nil, nil, fmt.Errorf("bundle: cache: read the archive of %s: %w", want, err)
	}
	if n > l.Archive {
		return "", nil, nil, &Error{Reason: fmt.Sprintf("the archive is larger than %d bytes, the most allowed", l.Archive)}
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return "", nil, nil, fmt.Errorf("%w: it is %s, not %s", ErrHashMismatch, got, want)
	}

	tree := filepath.Join(c.dir, tmpPrefix+rand.Text())
	m, err := Extract(f, n, tree, l)
	if err != nil {
		return "", nil, nil, err
	}
	side, err := c.writeManifest(m)
	if err != nil {
		return "", nil, nil, errors.Join(err, Remove(tree))
	}

	c.mu.Lock()
	victims := c.evictLocked(m.Unpacked())
	err = os.Rename(tree, filepath.Join(c.dir, want))
	if err == nil {
		err = os.Rename(side, filepath.Join(c.dir, want+".json"))
		if err != nil {
			err = errors.Join(err, Remove(filepath.Join(c.dir, want)))
		}
	}
	if err != nil {
		c.mu.Unlock()
		return "", nil, nil, errors.Join(fmt.Errorf("bundle: cache: %w", err), Remove(tree), os.Remove(side), c.removeAll(victims))
	}
	e := &cached{m: m, size: m.Unpacked()}
	c.entries[want] = e
	c.size += e.size
	dir, mc, release := c.acquireLocked(want, e)
	c.mu.Unlock()
	if err := c.removeAll(victims); err != nil {
		release()
		return "", nil, nil, err
	}
	return dir, mc, release, nil
}

// writeManifest writes m to a temporary file of the cache's folder and returns its path.
func (c *Cache) writeManifest(m *Manifest) (string, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("bundle: cache: %w", err)
	}
	f, err := os.CreateTemp(c.dir, tmpPrefix+"*.json")
	if err != nil {
		return "", fmt.Errorf("bundle: cache: %w", err)
	}
	_, err = f.Write(b)
	if err = errors.Join(err, f.Close()); err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("bundle: cache: %w", err)
	}
	return f.Name(), nil
}

// acquireLocked marks e in use; the release it returns may be called more than once.
func (c *Cache) acquireLocked(sum string, e *cached) (string, *Manifest, func()) {
	e.refs++
	c.clock++
	e.used = c.clock
	var once sync.Once
	release := func() {
		once.Do(func() {
			c.mu.Lock()
			e.refs--
			victims := c.evictLocked(0)
			c.mu.Unlock()
			c.removeAll(victims) // what stays behind is removed by the next OpenCache
		})
	}
	return filepath.Join(c.dir, sum), e.m.clone(), release
}

// evictLocked forgets the least recently used bundles not in use until need more bytes fit,
// and returns the temporary names their trees were moved to, for removeAll to remove outside
// the lock. When every bundle left is in use, the cache stays over its maximum until one is
// released.
func (c *Cache) evictLocked(need int64) []string {
	var victims []string
	for c.size+need > c.max {
		var sum string
		var lru *cached
		for s, e := range c.entries {
			if e.refs == 0 && (lru == nil || e.used < lru.used) {
				sum, lru = s, e
			}
		}
		if lru == nil {
			break
		}
		delete(c.entries, sum)
		c.size -= lru.size
		// The manifest goes first: a tree without one is removed by the next OpenCache.
		os.Remove(filepath.Join(c.dir, sum+".json"))
		moved := filepath.Join(c.dir, tmpPrefix+rand.Text())
		if err := os.Rename(filepath.Join(c.dir, sum), moved); err != nil {
			Remove(filepath.Join(c.dir, sum)) // in place, before a new Add of sum can land there
			continue
		}
		victims = append(victims, moved)
	}
	return victims
}

// removeAll removes the trees evictLocked moved aside.
func (c *Cache) removeAll(victims []string) error {
	var errs []error
	for _, v := range victims {
		errs = append(errs, Remove(v))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("bundle: cache: %w", err)
	}
	return nil
}
