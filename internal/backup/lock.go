package backup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// LockFile is the file in a data directory that `baton dev` holds a shared lock on while it runs
// and `baton restore` an exclusive one while it replaces the database: a restore never swaps the
// files under a running server, and a server never starts on a half-restored directory. Several
// `baton dev` on one directory still run side by side (SQLite serialises their writes).
const LockFile = "baton.lock"

// ErrLocked says that the other kind of lock is held on the data directory.
var ErrLocked = errors.New("data directory is locked")

// DirLock is a held lock on a data directory; Release lets it go.
type DirLock struct{ f *os.File }

// LockDir takes the lock of dir, exclusive or shared, creating dir and the lock file if needed,
// without waiting: ErrLocked when it is held the other way.
func LockDir(dir string, exclusive bool) (*DirLock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, LockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := lockNoWait(f, exclusive); err != nil {
		f.Close()
		return nil, err
	}
	return &DirLock{f: f}, nil
}

// Release unlocks, then closes the lock file.
func (l *DirLock) Release() {
	_ = unlock(l.f) // closing drops it anyway, but only once no child holds a copy of the descriptor
	l.f.Close()
}
