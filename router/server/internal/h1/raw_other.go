//go:build !linux

package h1

import "net"

// Raw returns c: raw system calls are used on Linux only (raw_linux.go).
func Raw(c net.Conn) net.Conn { return c }

// RawListener returns ln.
func RawListener(ln net.Listener) net.Listener { return ln }
