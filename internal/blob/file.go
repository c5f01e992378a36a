package blob

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode"

	"gocloud.dev/blob/fileblob"
)

// openFile opens the store in dir, creating it if missing.
func openFile(dir string) (*Store, error) {
	switch {
	case dir == "":
		return nil, fmt.Errorf("blob: open file://: name a directory (file:///abs/dir or file://rel/dir)")
	case strings.ContainsAny(dir, "?#%") || strings.IndexFunc(dir, unicode.IsControl) >= 0:
		// The root must read the same as a URI and as a path, so that Key can compare strings.
		return nil, fmt.Errorf("blob: open file://%s: the directory's name may not contain ?, #, %% or control characters", dir)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("blob: open file://%s: %w", dir, err)
	}
	// Without sidecar files a directory holds nothing but the objects. Temporary files are made
	// beside their object rather than in the system's temporary directory, so the rename that
	// publishes one never crosses file systems and stays atomic; List hides them (their names
	// end in .tmp, which CheckKey refuses), also when a crash leaves one behind.
	b, err := fileblob.OpenBucket(abs, &fileblob.Options{
		CreateDir: true,
		NoTempDir: true,
		Metadata:  fileblob.MetadataDontWrite,
	})
	if err != nil {
		return nil, fmt.Errorf("blob: open file://%s: %w", dir, err)
	}
	root := "file://" + filepath.ToSlash(abs)
	if !strings.HasSuffix(root, "/") {
		root += "/"
	}
	return &Store{bucket: b, scheme: "file", root: root}, nil
}

// LocalRoot is the directory that holds the objects of the store rawURL names, with every
// symbolic link resolved, when it is a file:// store (made if missing, as Open makes it); "" for
// any other store.
func LocalRoot(rawURL string) (string, error) {
	scheme, dir, ok := strings.Cut(rawURL, "://")
	if !ok || !strings.EqualFold(scheme, "file") || dir == "" {
		return "", nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("blob: %s: %w", rawURL, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return "", fmt.Errorf("blob: %s: %w", rawURL, err)
	}
	return filepath.EvalSymlinks(abs)
}
