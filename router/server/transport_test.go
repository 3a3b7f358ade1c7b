package server

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/internal/testutil"
	"github.com/pdrouter/pdrouter/router/server/internal/h1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// What the inference legs rely on from their upstream clients, each test run against both:
// legClient as New builds it (the h1 transport, for http:// workers) and its net/http client
// (for https:// workers; reached over http:// here).

// legDoer is a client of the inference legs.
type legDoer interface {
	doer
	CloseIdleConnections()
}

// eachLegClient runs test once per client of the inference legs, as parallel subtests.
func eachLegClient(t *testing.T, test func(t *testing.T, c legDoer)) {
	t.Helper()
	for name, c := range map[string]legDoer{"h1": newLegClient(3*time.Second, nil), "net_http": newUpstreamClient(3*time.Second, nil)} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			t.Cleanup(c.CloseIdleConnections)
			test(t, c)
		})
	}
}

// rawWorker accepts connections and hands each to serve after reading a request's head; it
// reads the body after serve when drain is set (to take the next request on the connection),
// else it leaves the body unread.
func rawWorker(t *testing.T, drain bool, serve func(c net.Conn)) string {
	return testutil.RawServer(t, func(c net.Conn, _ *bufio.Reader, req *http.Request) bool {
		serve(c)
		if drain {
			_, _ = io.Copy(io.Discard, req.Body)
		}
		return drain
	})
}

// A POST goes out as JSON with its own Content-Length and the caller's headers; the next
// request reuses the connection and says so.
func TestUpstreamSendsJSONAndReportsReuse(t *testing.T) {
	t.Parallel()
	eachLegClient(t, func(t *testing.T, c legDoer) {
		type seen struct{ method, uri, ctype, auth, body, length string }
		got := make(chan seen, 2)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			got <- seen{r.Method, r.RequestURI, r.Header.Get("Content-Type"), r.Header.Get("Authorization"), string(b), r.Header.Get("Content-Length")}
			_, _ = io.WriteString(w, "ok")
		}))
		t.Cleanup(srv.Close)
		hdr := http.Header{"Authorization": {"Bearer k"}}
		resp, reused, err := c.roundTrip(context.Background(), upstreamRequest{method: http.MethodPost, worker: srv.URL + "/generate?x=1", body: []byte(`{"a":1}`), hdr: hdr})
		require.NoError(t, err)
		assert.False(t, reused)
		assert.Equal(t, "ok", testutil.ReadAll(t, resp))
		assert.Equal(t, seen{"POST", "/generate?x=1", "application/json", "Bearer k", `{"a":1}`, "7"}, <-got)

		resp, reused, err = c.roundTrip(context.Background(), upstreamRequest{method: http.MethodGet, worker: srv.URL})
		require.NoError(t, err)
		assert.True(t, reused)
		assert.Equal(t, "ok", testutil.ReadAll(t, resp))
		assert.Equal(t, seen{"GET", "/", "", "", "", ""}, <-got)
	})
}

// A worker that answers 413 before reading an 8 MiB body and closes: the router gets the 413,
// not the write's broken pipe (which it would turn into a 502 and retry).
func TestUpstreamEarlyResponseWhileTheBodyIsWritten(t *testing.T) {
	t.Parallel()
	eachLegClient(t, func(t *testing.T, c legDoer) {
		url := rawWorker(t, false, func(c net.Conn) {
			_, _ = io.WriteString(c, "HTTP/1.1 413 Request Entity Too Large\r\nContent-Type: application/json\r\nContent-Length: 17\r\nConnection: close\r\n\r\n{\"error\":\"large\"}")
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
				_ = tc.SetLinger(0) // reset: the unread body must not keep the socket alive
			}
		})
		resp, ue := send(context.Background(), c, &upstreamRequest{method: http.MethodPost, worker: url, path: "/generate", body: []byte(strings.Repeat("x", 8<<20)), role: "regular"}, nil)
		if resp != nil {
			resp.Body.Close()
		}
		require.NotNil(t, ue)
		assert.Equal(t, http.StatusRequestEntityTooLarge, ue.Status, ue.Error())
		assert.Equal(t, `{"error":"large"}`, string(ue.Body))
	})
}

// 100 Continue and 103 Early Hints before the final response are skipped, and the connection
// stays in step.
func TestUpstreamSkipsInformationalResponses(t *testing.T) {
	t.Parallel()
	eachLegClient(t, func(t *testing.T, c legDoer) {
		url := rawWorker(t, true, func(c net.Conn) {
			_, _ = io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n"+
				"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		})
		for i := range 2 {
			resp, reused, err := c.roundTrip(context.Background(), upstreamRequest{method: http.MethodPost, worker: url, body: []byte("{}")})
			require.NoError(t, err)
			assert.Equal(t, http.StatusOK, resp.StatusCode)
			assert.Equal(t, "ok", testutil.ReadAll(t, resp))
			assert.Equal(t, i == 1, reused)
		}
	})
}

// Response headers without end are cut at h1.MaxResponseHead, not buffered.
func TestUpstreamResponseHeadIsBounded(t *testing.T) {
	t.Parallel()
	eachLegClient(t, func(t *testing.T, c legDoer) {
		url := rawWorker(t, false, func(c net.Conn) {
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\n")
			line := "X-Filler: " + strings.Repeat("a", 1000) + "\r\n"
			for range 2 * h1.MaxResponseHead / len(line) {
				if _, err := io.WriteString(c, line); err != nil {
					return
				}
			}
		})
		_, _, err := c.roundTrip(context.Background(), upstreamRequest{method: http.MethodPost, worker: url, body: []byte("{}")})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "header")
	})
}

// A worker's redirect is its answer (a non-2xx the router reports), not a place to resend the
// prompt to.
func TestUpstreamDoesNotFollowRedirects(t *testing.T) {
	t.Parallel()
	eachLegClient(t, func(t *testing.T, c legDoer) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/elsewhere" {
				t.Error("the redirect was followed")
			}
			http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
		}))
		t.Cleanup(srv.Close)
		resp, ue := send(context.Background(), c, &upstreamRequest{method: http.MethodPost, worker: srv.URL, path: "/generate", body: []byte("{}"), role: "regular"}, nil)
		if resp != nil {
			resp.Body.Close()
		}
		require.NotNil(t, ue)
		assert.Equal(t, http.StatusTemporaryRedirect, ue.Status)
	})
}

// A worker URL with user:pass@ sends the credentials as Authorization: Basic and dials the
// host alone; a request's own Authorization wins.
func TestUpstreamUserinfoBecomesBasicAuth(t *testing.T) {
	t.Parallel()
	eachLegClient(t, func(t *testing.T, c legDoer) {
		got := make(chan [2]string, 2)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			user, pass, _ := r.BasicAuth()
			got <- [2]string{user + ":" + pass, r.Host}
			_, _ = io.WriteString(w, "ok")
		}))
		t.Cleanup(srv.Close)
		u := strings.Replace(srv.URL, "http://", "http://us%3Aer:p%40ss@", 1)
		resp, _, err := c.roundTrip(context.Background(), upstreamRequest{method: http.MethodPost, worker: u, body: []byte("{}")})
		require.NoError(t, err)
		testutil.ReadAll(t, resp)
		g := <-got
		assert.Equal(t, "us:er:p@ss", g[0])
		assert.Equal(t, strings.TrimPrefix(srv.URL, "http://"), g[1], "no credentials in Host")

		resp, _, err = c.roundTrip(context.Background(), upstreamRequest{method: http.MethodPost, worker: u, body: []byte("{}"), hdr: http.Header{"Authorization": {"Bearer client"}}})
		require.NoError(t, err)
		testutil.ReadAll(t, resp)
		assert.Equal(t, ":", (<-got)[0], "the request's own Authorization is kept")
	})
}

// A worker that closes without answering while the body is written fails the request with a
// transport error (the dropped writes do not hide it).
func TestUpstreamCloseWithoutAnswerIsATransportError(t *testing.T) {
	t.Parallel()
	eachLegClient(t, func(t *testing.T, c legDoer) {
		url := rawWorker(t, false, func(c net.Conn) {
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
		})
		resp, ue := send(context.Background(), c, &upstreamRequest{method: http.MethodPost, worker: url, path: "/generate", body: []byte(strings.Repeat("x", 8<<20)), role: "regular"}, nil)
		if resp != nil {
			resp.Body.Close()
		}
		require.NotNil(t, ue)
		assert.Zero(t, ue.Status)
		assert.Equal(t, http.StatusBadGateway, ue.clientStatus(), ue.Error())
	})
}

// The legs' client sends http:// workers through the h1 transport, whose bodies say when the
// upstream has run dry (pendingBody), and https:// workers through net/http with the TLS
// settings it was given, redirects still returned as answers.
func TestLegClientH1ForHTTPNetHTTPForHTTPS(t *testing.T) {
	t.Parallel()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
			return
		}
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b)
	})
	plain, tlsSrv, c := plainAndTLSLegs(t, h)
	resp, _, err := c.roundTrip(context.Background(), upstreamRequest{method: http.MethodPost, worker: plain.URL, body: []byte(`"plain"`)})
	require.NoError(t, err)
	_, isPending := resp.Body.(pendingBody)
	assert.True(t, isPending, "http:// goes through h1")
	assert.Equal(t, `"plain"`, testutil.ReadAll(t, resp))

	resp, _, err = c.roundTrip(context.Background(), upstreamRequest{method: http.MethodPost, worker: tlsSrv.URL, body: []byte(`"tls"`)})
	require.NoError(t, err)
	_, isPending = resp.Body.(pendingBody)
	assert.False(t, isPending, "https:// goes through net/http")
	assert.Equal(t, `"tls"`, testutil.ReadAll(t, resp))

	resp, ue := send(context.Background(), c, &upstreamRequest{method: http.MethodPost, worker: tlsSrv.URL, path: "/redirect", body: []byte("{}"), role: "regular"}, nil)
	if resp != nil {
		resp.Body.Close()
	}
	require.NotNil(t, ue)
	assert.Equal(t, http.StatusTemporaryRedirect, ue.Status)
}

// A forwarded header net/http would refuse to send fails the leg before anything is sent.
func TestLegClientRejectsInvalidHeaderValues(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("the request was sent")
	}))
	t.Cleanup(srv.Close)
	c := newLegClient(3*time.Second, nil)
	_, ue := send(context.Background(), c, &upstreamRequest{method: http.MethodPost, worker: srv.URL, path: "/generate", body: []byte("{}"), hdr: http.Header{"Traceparent": {"a\r\nX-Injected: 1"}}, role: "regular"}, nil)
	require.NotNil(t, ue)
	assert.Contains(t, ue.Error(), "Traceparent")
}

// plainAndTLSLegs starts h on an http:// and an https:// test server and returns them with a
// leg client trusting the second: the two transports a leg may go through.
func plainAndTLSLegs(t *testing.T, h http.Handler) (plain, tlsSrv *httptest.Server, c *legClient) {
	t.Helper()
	plain = httptest.NewServer(h)
	t.Cleanup(plain.Close)
	tlsSrv = httptest.NewTLSServer(h)
	t.Cleanup(tlsSrv.Close)
	c = newLegClient(3*time.Second, tlsSrv.Client().Transport.(*http.Transport).TLSClientConfig)
	t.Cleanup(c.CloseIdleConnections)
	return plain, tlsSrv, c
}
