//go:build cgo

package engine

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/baton-dev/baton/internal/query"
)

// fetch returns, per relation, the local paths of its files: each file's Path when it has one,
// else a copy in dir fetched through Open. The copies together may hold at most maxBytes.
func fetch(ctx context.Context, dir string, rels []query.Relation, maxBytes int64) ([][]string, error) {
	out := make([][]string, len(rels))
	var total int64
	for i, r := range rels {
		for j, f := range r.Files {
			if f.Path != "" {
				out[i] = append(out[i], f.Path)
				continue
			}
			if f.Open == nil {
				return nil, fmt.Errorf("query: relation %s: file %s can be neither read in place nor opened", r.Name, f.Key)
			}
			p := filepath.Join(dir, fmt.Sprintf("r%d-f%d.parquet", i, j))
			n, err := copyFile(ctx, p, f, maxBytes-total)
			if err != nil {
				return nil, err
			}
			total += n
			out[i] = append(out[i], p)
		}
	}
	return out, nil
}

func copyFile(ctx context.Context, path string, f query.File, room int64) (int64, error) {
	tooLarge := &query.TooLargeError{Message: fmt.Sprintf(
		"the Parquet files this query reads exceed the query service's limit of fetched bytes (at %s)", f.Key)}
	if f.Size > room {
		return 0, tooLarge
	}
	rc, err := f.Open(ctx)
	if err != nil {
		return 0, fmt.Errorf("query: fetch %s: %w", f.Key, err)
	}
	defer rc.Close()
	w, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, fmt.Errorf("query: fetch %s: %w", f.Key, err)
	}
	n, err := io.Copy(w, io.LimitReader(rc, room+1))
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return n, fmt.Errorf("query: fetch %s: %w", f.Key, err)
	case n > room:
		return n, tooLarge
	}
	return n, nil
}
