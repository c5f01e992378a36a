//go:build unix

package bundle

import (
	"fmt"
	"os"
	"syscall"
)

// checkOwnDir refuses a cache folder that another user could have planted or may change (in a
// shared temporary directory, say): a link, one this process's user does not own, or one others
// may write to.
func checkOwnDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("bundle: cache: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("bundle: cache: %s is not a folder (a link?)", dir)
	case ok && int(st.Uid) != os.Geteuid():
		return fmt.Errorf("bundle: cache: %s belongs to uid %d, not to this process's user (%d): choose another folder", dir, st.Uid, os.Geteuid())
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("bundle: cache: other users may write to %s (mode %s): chmod go-w it", dir, fi.Mode().Perm())
	}
	return nil
}
