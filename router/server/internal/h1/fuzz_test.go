package h1

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// referenceHead is what net/http's Transport makes of a response: http.ReadResponse, with
// informational heads (1xx but 101) skipped and 101 refused.
func referenceHead(in, method string) (*http.Response, error) {
	br := bufio.NewReader(strings.NewReader(in))
	for {
		resp, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			return nil, err
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			return nil, errors.New("101")
		}
		if resp.StatusCode >= 100 && resp.StatusCode < 200 {
			continue
		}
		return resp, nil
	}
}

// FuzzReadHead checks the transport's response parsing (readHead through its head cap and
// read buffer, then the body's framing) against http.ReadResponse: for every input both parse
// or both reject, and when both parse they agree on the status, the headers, Content-Length,
// Transfer-Encoding, Connection: close, and the body's bytes and whether it ended cleanly. The
// seed corpus runs in plain go test; go test -fuzz=FuzzReadHead explores further.
func FuzzReadHead(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 9\r\n\r\n2\r\nok\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\n\r\nx",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n",
		"HTTP/1.1 204 No Content\r\nContent-Length: 3\r\n\r\nabc",
		"HTTP/1.1 304 Not Modified\r\n\r\n",
		"HTTP/1.1 413 Request Entity Too Large\r\nConnection: close\r\nContent-Length: 17\r\n\r\n{\"error\":\"large\"}",
		"HTTP/1.0 200 OK\r\n\r\nuntil close",
		"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil close",
		"HTTP/1.1 200 OK\r\nX-Folded: a\r\n b\r\n\r\n",
		"HTTP/1.1 200 OK\r\nBad Name: v\r\n\r\n",
		"HTTP/1.1 200 OK\nContent-Length: 1\n\nx",
		"HTTP/1.1 2000 OK\r\n\r\n",
		"HTTP/1.1 abc OK\r\n\r\n",
		"HTTP/2.0 200 OK\r\n\r\n",
		"ICY 200 OK\r\n\r\n",
		"HTTP/1.1 200\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n e\r\ndata: {\"a\":1}\n\n\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n",
		"",
		// The fast path's heads (head.go): uvicorn's lowercase names, repeats, white space.
		"HTTP/1.1 200 OK\r\ndate: Fri, 27 Nov 2026 01:00:00 GMT\r\nserver: uvicorn\r\ncontent-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n5\r\ndata:\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX-A: 1\r\nx-a: 2 \r\nX-Long-Custom_Name: \t v \t\r\ncontent-length: 2\r\n\r\nok",
		"HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 503 Service Unavailable\r\nContent-Length:  3 \r\nRetry-After: 1\r\n\r\nbusy",
		"HTTP/1.1 200 OK\r\nTRANSFER-ENCODING: Chunked\r\n\r\n2\r\nok\r\n0\r\nX-T: 1\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n",
		"HTTP/1.1 200 OK\r\nPragma: no-cache\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nV: a\x01b\r\n\r\nok",
		"HTTP/1.1 200 OK\r\n: empty\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
		"HTTP/1.1 299 Custom\r\nContent-Length: 1\r\n\r\n",
	} {
		f.Add(s, false, true)
		f.Add(s, true, true)
		f.Add(s, false, false)
	}
	f.Fuzz(func(t *testing.T, in string, head, header bool) {
		method := http.MethodPost
		if head {
			method = http.MethodHead
		}
		hc := &headCap{r: strings.NewReader(in)}
		c := &conn{head: hc, br: bufio.NewReaderSize(hc, 4<<10)}
		x, gerr := c.readHead(method, header)
		want, werr := referenceHead(in, method)
		if (gerr == nil) != (werr == nil) {
			t.Fatalf("h1: %v, net/http: %v", gerr, werr)
		}
		if gerr != nil {
			return
		}
		got := &x.resp
		if got.StatusCode != want.StatusCode || got.Status != want.Status || got.Proto != want.Proto {
			t.Errorf("status %d %q %s, net/http %d %q %s", got.StatusCode, got.Status, got.Proto, want.StatusCode, want.Status, want.Proto)
		}
		// Without header, a head the fast path took has no Header (Request.NoHeader).
		if (header || got.Header != nil) && !reflect.DeepEqual(got.Header, want.Header) {
			t.Errorf("headers %q, net/http %q", got.Header, want.Header)
		}
		if got.ContentLength != want.ContentLength || !reflect.DeepEqual(got.TransferEncoding, want.TransferEncoding) || got.Close != want.Close {
			t.Errorf("framing (%d, %q, close %v), net/http (%d, %q, close %v)",
				got.ContentLength, got.TransferEncoding, got.Close, want.ContentLength, want.TransferEncoding, want.Close)
		}
		gb, gberr := io.ReadAll(got.Body)
		wb, wberr := io.ReadAll(want.Body)
		if string(gb) != string(wb) || (gberr == nil) != (wberr == nil) {
			t.Errorf("body %q (%v), net/http %q (%v)", gb, gberr, wb, wberr)
		}

	})
}
