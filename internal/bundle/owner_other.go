//go:build !unix

package bundle

import (
	"fmt"
	"os"
)

// checkOwnDir refuses a cache folder that is a link; ownership is not checked here.
func checkOwnDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("bundle: cache: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("bundle: cache: %s is not a folder (a link?)", dir)
	}
	return nil
}
