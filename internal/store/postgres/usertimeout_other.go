//go:build !linux

package postgres

import "syscall"

// setUserTimeout does nothing where TCP_USER_TIMEOUT does not exist; keepalives still bound an
// idle connection.
func setUserTimeout(network, address string, c syscall.RawConn) error { return nil }
