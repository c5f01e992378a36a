//go:build unix

package backup

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// lockNoWait flocks f: the lock belongs to this open file, so two opens in one process exclude
// each other as two processes do, and the kernel drops it when the process dies.
func lockNoWait(f *os.File, exclusive bool) error {
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	for {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EWOULDBLOCK):
			return ErrLocked
		}
		return err
	}
}

// unlock drops f's lock now. Closing f alone is not enough while a process this one is starting
// holds a copy of the descriptor (between its fork and its exec, until close-on-exec closes it):
// the lock belongs to the open file, which that copy keeps open.
func unlock(f *os.File) error {
	return unix.Flock(int(f.Fd()), unix.LOCK_UN)
}
