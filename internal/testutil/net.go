package testutil

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
)

// FreePort returns a TCP port free on host (an IP) a moment ago, for a server that must be
// told its port before it listens.
func FreePort(t testing.TB, host string) int {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatalf("free port on %s: %v", host, err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// ReadAll reads resp's body to its end and closes it, failing the test on an error.
func ReadAll(t testing.TB, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	if err := resp.Body.Close(); err != nil {
		t.Fatalf("close body: %v", err)
	}
	return string(b)
}

// RawServer is an HTTP/1.1 peer that misbehaves as a test asks: it accepts connections on
// loopback until the test ends and, for each request head it reads (http.ReadRequest), calls
// handle with the connection, its reader and the request (whose body handle may read); the
// connection serves its next request when handle returns true, and is closed otherwise. It
// returns the server's base URL.
func RawServer(t testing.TB, handle func(c net.Conn, br *bufio.Reader, req *http.Request) (next bool)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil || !handle(c, br, req) {
						return
					}
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}
