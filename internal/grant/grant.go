// Package grant decides which object storage an attempt may touch and enforces it: the canonical
// prefixes a capability token carries, the session policy they become, and the short-lived
// credentials minted for it through the S3-compatible server's STS AssumeRole.
//
// A grant is deny by default. Its prefixes are derived by the server (never taken from a
// request), canonicalized, and always strictly under the object storage root the server was
// started with; anything that does not canonicalize is left out, never widened.
package grant

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/baton-dev/baton/internal/blob"
)

// S3 is the storage part of a capability token: the prefixes its attempt may read and those it
// may write, each a canonical directory prefix ("s3://bucket/prefix/", or "file:///dir/prefix/"
// for a directory store).
type S3 struct {
	ReadPrefixes  []string `json:"read_prefixes"`
	WritePrefixes []string `json:"write_prefixes"`
}

// Empty reports whether the grant lets its holder touch nothing.
func (g *S3) Empty() bool { return g == nil || len(g.ReadPrefixes)+len(g.WritePrefixes) == 0 }

// ErrPrefix is wrapped by every refusal of a prefix.
var ErrPrefix = errors.New("grant: not an allowed storage prefix")

// Prefix returns the canonical form of the storage prefix raw, which must lie strictly under
// root (the object storage root, "s3://bucket/[prefix/]" or "file:///dir/"): the same scheme
// (compared without regard to case, written in lower case), the root's bucket, a non-empty
// prefix below the root with no "." or ".." segment, no empty segment, no wildcard or policy
// variable (* ? [ ] $), no query or fragment; a trailing "/" is added, so that the prefix names a
// directory and never the start of a sibling's name (".../7" must not grant ".../70/").
func Prefix(raw, root string) (string, error) {
	fail := func(format string, args ...any) (string, error) {
		return "", fmt.Errorf("%w: %q %s", ErrPrefix, raw, fmt.Sprintf(format, args...))
	}
	rootScheme, rootRest, ok := strings.Cut(root, "://")
	if !ok || !strings.HasSuffix(root, "/") {
		return "", fmt.Errorf("grant: root %q: want s3://bucket/[prefix/] or file:///dir/", root)
	}
	scheme, rest, ok := strings.Cut(raw, "://")
	switch {
	case !ok || scheme == "":
		return fail("is not a URI (want %s://...)", rootScheme)
	case !strings.EqualFold(scheme, rootScheme):
		return fail("has scheme %q; the object storage's is %q", scheme, rootScheme)
	case strings.ContainsAny(rest, "*?[]$"):
		return fail("contains a wildcard or policy variable (* ? [ ] $)")
	}
	canon := rootScheme + "://" + rest
	if !strings.HasSuffix(canon, "/") {
		canon += "/"
	}
	if rootScheme == "s3" {
		bucket, key, _ := strings.Cut(rest, "/")
		rootBucket, _, _ := strings.Cut(rootRest, "/")
		switch {
		case bucket == "":
			return fail("names no bucket")
		case bucket != rootBucket:
			return fail("is in bucket %q; the object storage's is %q", bucket, rootBucket)
		case strings.Trim(key, "/") == "":
			return fail("names the whole bucket, not a prefix")
		}
	}
	rel, ok := strings.CutPrefix(canon, root)
	switch {
	case !ok:
		return fail("is not under the object storage root %s", root)
	case rel == "":
		return fail("is the object storage root itself, not a prefix under it")
	}
	if err := blob.CheckPrefix(rel); err != nil {
		return fail("%v", strings.TrimPrefix(err.Error(), blob.ErrOutside.Error()+": "))
	}
	return canon, nil
}

// RefPrefix reads the storage prefix a dataset version's storage_ref names: either a URI string
// ("s3://bucket/prefix/") or an object {"scheme", "bucket", "prefix"} (a "glob" beside them
// narrows the files, not the prefix, and is ignored). It returns "" for anything else, such as a
// null reference or one naming a table.
func RefPrefix(ref json.RawMessage) string {
	var uri string
	if json.Unmarshal(ref, &uri) == nil {
		return uri
	}
	var obj struct {
		Scheme string `json:"scheme"`
		Bucket string `json:"bucket"`
		Prefix string `json:"prefix"`
	}
	if json.Unmarshal(ref, &obj) != nil || obj.Scheme == "" || obj.Prefix == "" {
		return ""
	}
	if obj.Bucket == "" {
		return obj.Scheme + "://" + obj.Prefix
	}
	return obj.Scheme + "://" + obj.Bucket + "/" + strings.TrimPrefix(obj.Prefix, "/")
}

// Layout of an attempt's own prefixes under the object storage root.
const (
	// ScratchDir + "{task_id}/{attempt}/": every task's scratch space.
	ScratchDir = "scratch/"
	// DatasetsDir + "{dataset_uuid}/{task_id}/{attempt}/": where a task writes the files of a
	// version of one of its output datasets.
	DatasetsDir = "datasets/"
	// BuffersDir + "{dataset_uuid}/{task_id}/{attempt}/": where a task writes the batches it
	// publishes to one of its buffered output datasets.
	BuffersDir = "buffers/"
)

// DatasetLocation returns the canonical form of the storage prefix raw of a version of the
// dataset datasetUUID: it must be a prefix under root (Prefix) that lies strictly under the
// dataset's own prefix, root + DatasetsDir + datasetUUID + "/". Anything else is refused: the root's
// other folders (buffers/, scratch/), another dataset's prefix, or the dataset's whole prefix.
// Where a version may live is the same rule when a completion registers it and when a grant is
// derived from it, so that a location registered before the rule held never widens a grant.
func DatasetLocation(raw, root, datasetUUID string) (string, error) {
	own := root + DatasetsDir + datasetUUID + "/"
	if c, err := Prefix(own, root); err != nil || c != own || strings.Contains(datasetUUID, "/") {
		return "", fmt.Errorf("%w: %q: dataset uuid %q cannot name a prefix", ErrPrefix, raw, datasetUUID)
	}
	p, err := Prefix(raw, root)
	switch {
	case err != nil:
		return "", err
	case p == own:
		return "", fmt.Errorf("%w: %q is the dataset's own prefix itself, not a location under it", ErrPrefix, raw)
	case !strings.HasPrefix(p, own):
		return "", fmt.Errorf("%w: %q is not under the dataset's own prefix %s", ErrPrefix, raw, own)
	}
	return p, nil
}

// Attempt is what an attempt's grant is derived from.
type Attempt struct {
	TaskID  string
	Attempt int
	// Inputs are the pinned input dataset versions.
	Inputs []Input
	// Outputs are the task's output datasets.
	Outputs []Output
}

// Input is one pinned input dataset version of a task.
type Input struct {
	DatasetUUID string
	// StorageRef is the version's storage_ref (null when unregistered).
	StorageRef json.RawMessage
}

// Output is one output dataset of a task.
type Output struct {
	DatasetUUID string
	Buffered    bool
}

// Derive returns the grant of an attempt under root: read = the canonical storage prefixes of
// its pinned inputs, each only where it lies under its own dataset's prefix (DatasetLocation:
// references anywhere else are left out, whenever they were registered); write = its scratch
// prefix and, per output dataset, the prefix it writes that dataset's files or batches to. The
// second result lists the input references left out, for the log.
func Derive(root string, a Attempt) (*S3, []string) {
	g := &S3{ReadPrefixes: []string{}, WritePrefixes: []string{}}
	var skipped []string
	for _, in := range a.Inputs {
		raw := RefPrefix(in.StorageRef)
		if raw == "" {
			continue
		}
		p, err := DatasetLocation(raw, root, in.DatasetUUID)
		if err != nil {
			skipped = append(skipped, err.Error())
			continue
		}
		g.ReadPrefixes = append(g.ReadPrefixes, p)
	}
	own := "/" + a.TaskID + "/" + strconv.Itoa(a.Attempt) + "/"
	g.WritePrefixes = append(g.WritePrefixes, root+ScratchDir+strings.TrimPrefix(own, "/"))
	for _, o := range a.Outputs {
		dir := DatasetsDir
		if o.Buffered {
			dir = BuffersDir
		}
		g.WritePrefixes = append(g.WritePrefixes, root+dir+o.DatasetUUID+own)
	}
	// Every derived write prefix must canonicalize like any other: a malformed id never widens.
	g.WritePrefixes = slices.DeleteFunc(g.WritePrefixes, func(p string) bool {
		c, err := Prefix(p, root)
		return err != nil || c != p
	})
	slices.Sort(g.ReadPrefixes)
	g.ReadPrefixes = slices.Compact(g.ReadPrefixes)
	slices.Sort(g.WritePrefixes)
	g.WritePrefixes = slices.Compact(g.WritePrefixes)
	return g, skipped
}
