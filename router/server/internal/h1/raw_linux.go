//go:build linux

package h1

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"
)

// Raw returns c with its reads and writes done as raw system calls on its non-blocking socket:
// through syscall.RawConn, so the runtime's poller still does the waiting and deadlines and
// Close still unblock them, but without the runtime's entersyscall/exitsyscall around each
// call. Those matter at low load (issue 29): entering a system call wakes the runtime's sysmon
// thread whenever it went to sleep because every P was idle, which a proxy between requests
// always is; at closed loop 1 that was one futex wake-up and ~1.5 sysmon nanosleeps, and their
// context switches, per request. A read or write on a non-blocking socket never blocks, so
// nothing is lost by not telling the scheduler. c is returned as is unless it is a
// *net.TCPConn.
func Raw(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	r := &rawConn{TCPConn: tc, rc: rc}
	r.readFn, r.writeFn = r.doRead, r.doWrite
	return r
}

// rawConn is Raw's connection. The fields of each direction belong to the caller holding
// that direction's mutex (net.Conn allows concurrent callers).
type rawConn struct {
	*net.TCPConn
	rc syscall.RawConn

	rmu    sync.Mutex
	rp     []byte
	rn     int
	rerr   error
	readFn func(fd uintptr) bool

	wmu     sync.Mutex
	wp      []byte
	wn      int
	werr    error
	writeFn func(fd uintptr) bool
}

// maxRW bounds one system call's bytes, as the runtime's poller does.
const maxRW = 1 << 30

func (c *rawConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return c.TCPConn.Read(p)
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.rp, c.rn, c.rerr = p[:min(len(p), maxRW)], 0, nil
	err := c.rc.Read(c.readFn)
	n, rerr := c.rn, c.rerr
	c.rp, c.rerr = nil, nil
	if err == nil {
		err = rerr
	}
	if err != nil {
		return 0, c.opError("read", err)
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

func (c *rawConn) doRead(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&c.rp[0])), uintptr(len(c.rp)))
		switch e {
		case 0:
			c.rn = int(n)
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false // wait for readiness
		}
		c.rerr = os.NewSyscallError("read", e)
		return true
	}
}

func (c *rawConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wp, c.wn, c.werr = p, 0, nil
	err := c.rc.Write(c.writeFn)
	n, werr := c.wn, c.werr
	c.wp, c.werr = nil, nil
	if err == nil {
		err = werr
	}
	if err != nil {
		return n, c.opError("write", err)
	}
	return n, nil
}

func (c *rawConn) doWrite(fd uintptr) bool {
	for c.wn < len(c.wp) {
		chunk := c.wp[c.wn:]
		chunk = chunk[:min(len(chunk), maxRW)]
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&chunk[0])), uintptr(len(chunk)))
		switch e {
		case 0:
			c.wn += int(n)
			continue
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false // wait until writable
		}
		c.werr = os.NewSyscallError("write", e)
		return true
	}
	return true
}

// opError wraps err as net.TCPConn's Read and Write wrap theirs (a *net.OpError naming the
// operation and addresses; the poller's errors are net.ErrClosed and os.ErrDeadlineExceeded).
func (c *rawConn) opError(op string, err error) error {
	if oe, ok := err.(*net.OpError); ok { // SyscallConn's own, made for this call ("raw-read")
		oe.Op, oe.Source, oe.Addr = op, c.LocalAddr(), c.RemoteAddr()
		return oe
	}
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// RawListener returns ln with every accepted connection made Raw.
func RawListener(ln net.Listener) net.Listener { return rawListener{ln} }

type rawListener struct{ net.Listener }

func (l rawListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return Raw(c), nil
}
