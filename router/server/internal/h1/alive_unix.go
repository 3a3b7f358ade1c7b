//go:build unix

package h1

import (
	"errors"
	"net"
	"syscall"
)

// alive reports whether an idle connection is still open: a non-blocking peek finds nothing to
// read (EAGAIN). End of file (the worker closed it) or stray bytes mean it cannot be reused.
func alive(conn net.Conn) bool {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	open := false
	var buf [1]byte
	// Control, not Read: a deadline the last exchange left on the connection (exchange sets or
	// clears it before the next) must not fail the check.
	err = rc.Control(func(fd uintptr) {
		_, _, rerr := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		open = errors.Is(rerr, syscall.EAGAIN)
	})
	return err == nil && open
}
