package secrets

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// MaxFileSize is the largest secret file Dir reads.
const MaxFileSize = 64 << 10

// Dir reads each secret from the file of its name in dir (monad_rpc_key from dir/monad_rpc_key),
// as Kubernetes secret volumes, Vault Agent and Docker's /run/secrets lay them out. The file is
// read again at every Lookup, so that a rotation is seen at once. One trailing newline (\n or
// \r\n) is trimmed, and an empty value counts as missing.
//
// The file must be a regular file of at most MaxFileSize bytes. It may be reached through
// relative symbolic links that stay inside dir, as Kubernetes's are (dir/monad_rpc_key →
// ..data/monad_rpc_key, dir/..data → ..2026_11_29, the latter swapped atomically at each
// rotation); a link that leads out of dir, or an absolute one, is refused. Names are checked with
// CheckName before any file is touched.
//
// Dir fails if dir is not a directory. A Lookup after dir has gone (an unmounted volume) fails
// with an error that is not ErrNotFound, so that a Chain reports it instead of reading on.
func Dir(dir string) (Provider, error) {
	dir = filepath.Clean(dir)
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("secrets directory: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("secrets directory %s: not a directory", dir)
	}
	return dirProvider{dir: dir}, nil
}

type dirProvider struct {
	dir string
}

func (d dirProvider) Name() string { return "dir:" + d.dir }

func (d dirProvider) Lookup(ctx context.Context, name string) (string, error) {
	if err := CheckName(name); err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("secret %s: %w", name, err)
	}
	root, err := os.OpenRoot(d.dir)
	if err != nil { // the directory itself is gone or unreadable: not a missing secret
		return "", fmt.Errorf("secret %s in %s: %w", name, d.Name(), err)
	}
	defer root.Close()
	v, err := read(root, name)
	if errors.Is(err, fs.ErrNotExist) {
		// A Kubernetes rotation removes the old version's directory right after it swaps ..data:
		// a read that resolved the old link may find its file gone. The second read sees the new.
		v, err = read(root, name)
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", notFound(name, d)
	case err != nil:
		return "", fmt.Errorf("secret %s in %s: %w", name, d.Name(), err)
	case v == "":
		return "", notFound(name, d)
	}
	return v, nil
}

// read reads a secret's file through root, which follows symbolic links only while they stay
// inside its directory, at every step of the walk: no link swapped in between a check and the
// open can lead out of it. The errors it returns carry the file's name, never its content.
func read(root *os.Root, name string) (string, error) {
	// Stat before Open so that a FIFO or a device is never opened (opening a FIFO blocks).
	fi, err := root.Stat(name)
	if err != nil {
		return "", err
	}
	if err := checkFile(fi); err != nil {
		return "", err
	}
	f, err := root.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return "", err
	}
	if err := checkFile(fi); err != nil {
		return "", err
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return "", err
	}
	if len(b) > MaxFileSize {
		return "", errTooLarge
	}
	v := string(b)
	if s, ok := strings.CutSuffix(v, "\n"); ok {
		v = strings.TrimSuffix(s, "\r")
	}
	return v, nil
}

var errTooLarge = fmt.Errorf("file larger than %d bytes", MaxFileSize)

// checkFile accepts a regular file no larger than MaxFileSize.
func checkFile(fi fs.FileInfo) error {
	switch {
	case fi.IsDir():
		return errors.New("a directory, not a file")
	case !fi.Mode().IsRegular():
		return fmt.Errorf("not a regular file (mode %s)", fi.Mode().Type())
	case fi.Size() > MaxFileSize:
		return errTooLarge
	}
	return nil
}
