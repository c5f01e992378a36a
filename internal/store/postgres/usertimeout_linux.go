package postgres

import (
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// setUserTimeout sets TCP_USER_TIMEOUT on a connection being dialled: the kernel closes it once
// data it sent has gone unacknowledged for userTimeout, instead of retransmitting for about 15
// minutes (net.ipv4.tcp_retries2).
func setUserTimeout(network, address string, c syscall.RawConn) error {
	if !strings.HasPrefix(network, "tcp") {
		return nil // a Unix socket
	}
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(userTimeout.Milliseconds()))
	})
	if err != nil {
		return err
	}
	return serr
}
