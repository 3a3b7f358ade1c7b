package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/fakeworker"
	"github.com/pdrouter/pdrouter/router/server"
	"github.com/pdrouter/pdrouter/sim/engine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testCA is a certificate authority made in the test (crypto/x509), issuing leaf certificates.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

var serial = struct {
	sync.Mutex
	n int64
}{n: 1}

func nextSerial() *big.Int {
	serial.Lock()
	defer serial.Unlock()
	serial.n++
	return big.NewInt(serial.n)
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: nextSerial(), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return &testCA{cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue writes a leaf certificate for 127.0.0.1 with common name cn (server and client use)
// and its key as PEM files in dir, and returns their paths.
func (ca *testCA) issue(t *testing.T, dir, cn string) (certPath, keyPath string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: nextSerial(), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certPath, keyPath = filepath.Join(dir, cn+".crt"), filepath.Join(dir, cn+".key")
	require.NoError(t, os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600))
	return certPath, keyPath
}

func (ca *testCA) write(t *testing.T, dir string) string {
	p := filepath.Join(dir, ca.cert.Subject.CommonName+".pem")
	require.NoError(t, os.WriteFile(p, ca.pem, 0o600))
	return p
}

// replaceFile copies src over dst by rename, as Kubernetes updates a mounted Secret, with a
// later modification time so the change shows even within one clock tick.
func replaceFile(t *testing.T, src, dst string) {
	b, err := os.ReadFile(src)
	require.NoError(t, err)
	tmp := dst + ".new"
	require.NoError(t, os.WriteFile(tmp, b, 0o600))
	later := time.Now().Add(time.Minute)
	require.NoError(t, os.Chtimes(tmp, later, later))
	require.NoError(t, os.Rename(tmp, dst))
}

// mTLS to an https fakeworker: the router verifies the worker against --ca-cert-paths and
// presents --client-cert-path; a rotated client certificate is used from the next connection
// on; a worker signed by another CA fails with an error naming the worker.
func TestTLSToWorkers(t *testing.T) {
	dir := t.TempDir()
	serverCA, clientCA, otherCA := newTestCA(t, "server-ca"), newTestCA(t, "client-ca"), newTestCA(t, "other-ca")
	wCert, wKey := serverCA.issue(t, dir, "worker")
	c1Cert, c1Key := clientCA.issue(t, dir, "client-1")
	c2Cert, c2Key := clientCA.issue(t, dir, "client-2")
	// The router reads its client pair from fixed paths; the test rotates their contents.
	cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	replaceFile(t, c1Cert, cert)
	replaceFile(t, c1Key, key)

	wtls, err := fakeworkerTLS(wCert, wKey, clientCA.write(t, dir))
	require.NoError(t, err)
	var mu sync.Mutex
	var seen []string // client certificate names, one per connection
	wtls.VerifyConnection = func(cs tls.ConnectionState) error {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, cs.PeerCertificates[0].Subject.CommonName)
		return nil
	}
	lastClient := func() string {
		mu.Lock()
		defer mu.Unlock()
		if len(seen) == 0 {
			return ""
		}
		return seen[len(seen)-1]
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := fakeworker.Start(ctx, fakeworker.Config{Mode: engine.RoleUnified, TLS: wtls})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(w.URL(), "https://"), w.URL())

	newRouter := func(ca string, log io.Writer) *httptest.Server {
		cfg := server.DefaultConfig()
		cfg.WorkerURLs = []string{w.URL()}
		cfg.ClientCertPath, cfg.ClientKeyPath, cfg.CACertPaths = cert, key, []string{ca}
		cfg.UpstreamIdleTimeoutMs = 1 // a new upstream connection (and handshake) per request
		cfg.DisableRetries = true
		cfg.Seed = new(int64(1))
		s, err := server.New(server.Options{Config: cfg, Logger: slog.New(slog.NewTextHandler(log, nil))})
		require.NoError(t, err)
		sctx, scancel := context.WithCancel(ctx)
		require.NoError(t, s.Start(sctx))
		hs := httptest.NewServer(s.Handler())
		t.Cleanup(func() { hs.Close(); scancel(); s.Wait() })
		return hs
	}
	generate := func(base string) (int, string) {
		resp, err := http.Post(base+"/generate", "application/json", strings.NewReader(`{"text":"hi","sampling_params":{"max_new_tokens":2}}`))
		if !assert.NoError(t, err) {
			return 0, ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	good := newRouter(serverCA.write(t, dir), io.Discard)
	code, body := generate(good.URL)
	require.Equal(t, http.StatusOK, code, body)
	assert.Equal(t, "client-1", lastClient())

	replaceFile(t, c2Cert, cert)
	replaceFile(t, c2Key, key)
	// Requests in parallel need connections beyond the one pooled, and every new connection
	// after the files changed carries the new certificate. Bounded.
	for i := 0; i < 20 && lastClient() != "client-2"; i++ {
		var wg sync.WaitGroup
		codes := make([]int, 4)
		for j := range codes {
			wg.Add(1)
			go func() { defer wg.Done(); codes[j], _ = generate(good.URL) }()
		}
		wg.Wait()
		assert.Equal(t, []int{200, 200, 200, 200}, codes)
	}
	assert.Equal(t, "client-2", lastClient(), "the rotated client certificate is presented")

	// A worker signed by another CA never passes its first health probe: it takes no traffic
	// and the WARN names it and the cause.
	var logs lockedBuffer
	bad := newRouter(otherCA.write(t, dir), &logs)
	code, body = generate(bad.URL)
	assert.Equal(t, http.StatusServiceUnavailable, code, body)
	assert.Contains(t, logs.String(), "worker did not pass its first health probe")
	assert.Contains(t, logs.String(), "url="+w.URL(), "the log names the worker")
	assert.Contains(t, logs.String(), "not trusted by --ca-cert-paths")
}

// serve --tls-cert-path/--tls-key-path serves HTTPS and says so on its listening line.
func TestServeHTTPS(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, "serve-ca")
	cert, key := ca.issue(t, dir, "router")
	worker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`{}`)) }))
	defer worker.Close()

	pr, pw := io.Pipe()
	cmd := newRootCmd()
	cmd.SetOut(io.Discard)
	cmd.SetErr(pw)
	cmd.SetArgs([]string{"serve", "--worker-urls", worker.URL, "--host", "127.0.0.1", "--port", "0",
		"--prometheus-host", "127.0.0.1", "--prometheus-port", "0", "--tls-cert-path", cert, "--tls-key-path", key})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx); pw.Close() }()
	listening := make(chan string, 1)
	go func() { // keep draining: serve logs while it runs
		sc := bufio.NewScanner(pr)
		re := regexp.MustCompile(`router listening on (https://\S+) `)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				listening <- m[1]
			}
		}
		close(listening)
	}()
	base, ok := <-listening
	require.True(t, ok, "serve printed its listening line")
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.pem)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := c.Get(base + "/liveness")
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, 1, resp.ProtoMajor)
	resp.Body.Close()
	// HTTP/2 is still offered (ALPN h2).
	h2 := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
	resp, err = h2.Get(base + "/liveness")
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, 2, resp.ProtoMajor, "served over HTTP/2")
	resp.Body.Close()
	h2.CloseIdleConnections() // or shutdown waits out HTTP/2's 1 s GOAWAY grace
	// HTTP/1.1 over TLS frames as plain HTTP does (RFC 9112 §6.3: chunked wins).
	tc, err := tls.Dial("tcp", strings.TrimPrefix(base, "https://"), &tls.Config{RootCAs: pool, NextProtos: []string{"http/1.1"}})
	require.NoError(t, err)
	requireConflictingFramingChunkedWins(t, tc)
	cancel()
	require.NoError(t, <-done)
}
