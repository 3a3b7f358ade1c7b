//go:build !unix

package h1

import "net"

// alive cannot peek without blocking here: a closed idle connection shows up as a failed
// request on a reused connection, which the caller's retry loop retries once.
func alive(net.Conn) bool { return true }
