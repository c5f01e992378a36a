package postgres

import (
	"net"
	"testing"

	"golang.org/x/sys/unix"
)

// TestDialerUserTimeout: connections to the database give up on unacknowledged data after
// userTimeout, and keep alive as configured.
func TestDialerUserTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := dialer().Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var ut, idle, intvl, cnt int
	var gerr error
	raw.Control(func(fd uintptr) {
		get := func(opt int) int {
			v, err := unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, opt)
			if err != nil {
				gerr = err
			}
			return v
		}
		ut, idle, intvl, cnt = get(unix.TCP_USER_TIMEOUT), get(unix.TCP_KEEPIDLE), get(unix.TCP_KEEPINTVL), get(unix.TCP_KEEPCNT)
	})
	if gerr != nil {
		t.Fatal(gerr)
	}
	if ut != int(userTimeout.Milliseconds()) {
		t.Errorf("TCP_USER_TIMEOUT %d ms, want %d", ut, userTimeout.Milliseconds())
	}
	if idle != int(keepAliveIdle.Seconds()) || intvl != int(keepAliveInterval.Seconds()) || cnt != keepAliveCount {
		t.Errorf("keepalive idle %d s, interval %d s, count %d; want %v, %v, %d", idle, intvl, cnt, keepAliveIdle, keepAliveInterval, keepAliveCount)
	}
}
