package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/pdrouter/pdrouter/router"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRedactPath(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, in, want string }{
		{"raw URL", "/workers/http://alice:s3cret@h:1", "/workers/http://***@h:1"},
		{"cleaned scheme", "/workers/http:/alice:s3cret@h:1", "/workers/http:/***@h:1"},
		{"no scheme", "/workers/alice:s3cret@h:1", "/workers/***@h:1"},
		{"rank", "/workers/http://alice:s3cret@h:1@0", "/workers/http://***@h:1@0"},
		{"plain rank", "/workers/http://h:1@0", "/workers/http://h:1@0"},
		{"id", "/workers/5f1c0a2e-0000-5000-8000-000000000000", "/workers/5f1c0a2e-0000-5000-8000-000000000000"},
		{"other route", "/generate", "/generate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, redactPath(tc.in))
		})
	}
}

// Every log line goes through redactHandler: messages, string, error, Stringer and other
// attributes, attributes bound by With, and groups.
func TestRedactHandler(t *testing.T) {
	t.Parallel()
	for _, json := range []bool{false, true} {
		var buf syncBuffer
		var h slog.Handler = slog.NewTextHandler(&buf, nil)
		if json {
			h = slog.NewJSONHandler(&buf, nil)
		}
		log := newRedactLogger(slog.New(h)).With("bound", "http://alice:s3cret@h:1")
		err := errors.New(`Get "http://alice:***@h:1/health": refused`)
		u, _ := url.Parse("http://alice:s3cret@h:2")
		log.Warn("probe of http://alice:s3cret@h:1 failed", "cause", err, "reason", "GET http://alice:s3cret@h:1",
			"list", []string{"http://alice:s3cret@h:3"}, "stringer", u, slog.Group("g", "url", "http://alice:s3cret@h:4"))
		out := buf.String()
		assert.NotContains(t, out, "alice", "json=%v: %s", json, out)
		assert.NotContains(t, out, "s3cret", "json=%v", json)
		assert.Equal(t, 7, strings.Count(out, "***@h:"), "json=%v: every URL still named: %s", json, out)
		assert.Same(t, log.Handler().(redactHandler).next, newRedactLogger(log).Handler().(redactHandler).next, "not wrapped twice")
	}
}

// /get_router_config (which `router bench` records) and --print-config show the worker URLs
// without credentials; the server keeps them to reach the workers.
func TestConfigRedacted(t *testing.T) {
	t.Parallel()
	port := 8998
	cfg := DefaultConfig()
	cfg.APIKey = "k3y"
	cfg.WorkerURLs = []string{"http://alice:s3cret@h:1"}
	cfg.Prefill = []router.PrefillWorker{{URL: "http://bob:pw@p:1", BootstrapPort: &port}}
	cfg.Decode = []string{"http://carol@d:1", "http://d:2"}
	red := cfg.Redacted()
	assert.Equal(t, "<redacted>", red.APIKey)
	assert.Equal(t, []string{"http://***@h:1"}, red.WorkerURLs)
	assert.Equal(t, []router.PrefillWorker{{URL: "http://***@p:1", BootstrapPort: &port}}, red.Prefill)
	assert.Equal(t, []string{"http://***@d:1", "http://d:2"}, red.Decode)
	assert.Equal(t, "http://alice:s3cret@h:1", cfg.WorkerURLs[0], "the original keeps its credentials")
	assert.Equal(t, "http://bob:pw@p:1", cfg.Prefill[0].URL)
	assert.Equal(t, "http://carol@d:1", cfg.Decode[0])
}

// basicAuthWorker is a worker that answers only requests carrying user:pass as Basic auth (as
// Go's client sends a URL's user info); it records whether one came without.
func basicAuthWorker(t *testing.T, user, pass string, handle func(w http.ResponseWriter, r *http.Request, c call)) (*testWorker, *syncBuffer) {
	t.Helper()
	var refused syncBuffer
	w := newWorker(t, handle)
	inner := w.srv.Config.Handler
	w.srv.Config.Handler = http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != user || p != pass {
			_, _ = refused.Write([]byte(r.URL.Path + "\n"))
			http.Error(rw, "unauthorized", http.StatusUnauthorized)
			return
		}
		inner.ServeHTTP(rw, r)
	})
	return w, &refused
}

func withUser(rawURL, user, pass string) string {
	return strings.Replace(rawURL, "://", "://"+user+":"+pass+"@", 1)
}

// In process (the real-process test is cmd/router's TestIntegrationServeRedactsCredentials):
// a credentialed worker is reached with its credentials as Basic auth, and neither the secret
// nor the user name appears in a response, the decision or access log, a log line or /metrics
// — through a success, a failing worker, DELETE by URL and every listing.
func TestCredentialsNowhere(t *testing.T) {
	t.Parallel()
	const user, pass = "alice", "s3cret"
	good, refused := basicAuthWorker(t, user, pass, jsonReply(genReply))
	bad, _ := basicAuthWorker(t, user, pass, statusReply(http.StatusInternalServerError, "boom"))
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := withUser(dead.URL, user, pass)
	dead.Close()
	cfg := DefaultConfig()
	cfg.WorkerURLs = []string{withUser(good.URL(), user, pass), withUser(bad.URL(), user, pass)}
	cfg.Policy = router.PolicyRoundRobin
	cfg.RetryMaxRetries, cfg.RetryInitialBackoffMs, cfg.RetryMaxBackoffMs = 2, 1, 1
	var logs, dlog, access syncBuffer
	s, err := New(Options{Config: cfg, DecisionLog: &dlog, AccessLog: &access,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, s.Start(ctx))
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() { srv.Close(); cancel(); s.Wait() })
	tr := &testRouter{s: s, srv: srv}

	var seen strings.Builder
	do := func(method, path, body string) int {
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		seen.WriteString(resp.Status + "\n" + string(raw) + "\n") // the answer only: the client sent the path
		for k, v := range resp.Header {
			seen.WriteString(k + ": " + strings.Join(v, ",") + "\n")
		}
		return resp.StatusCode
	}
	for range 4 {
		do(http.MethodPost, "/generate", `{"text":"x"}`)
	}
	require.NotEmpty(t, good.callsTo("/generate"), "the credentialed worker served")
	require.NotEmpty(t, bad.callsTo("/generate"), "the failing worker was tried")
	for _, path := range []string{"/workers", "/get_loads", "/list_workers", "/get_router_config", "/readiness",
		"/health_generate", "/v1/models", "/workers/" + url.PathEscape(cfg.WorkerURLs[0])} {
		do(http.MethodGet, path, "")
	}
	do(http.MethodPost, "/flush_cache", "")
	assert.Equal(t, http.StatusBadGateway, do(http.MethodPost, "/workers", `{"url":"`+deadURL+`"}`), "a dead worker added: its error is shown")
	assert.Equal(t, http.StatusConflict, do(http.MethodPost, "/workers", `{"url":"`+cfg.WorkerURLs[0]+`"}`))
	assert.Equal(t, http.StatusAccepted, do(http.MethodDelete, "/workers/"+cfg.WorkerURLs[1], ""), "DELETE by raw URL")
	assert.Equal(t, http.StatusNotFound, do(http.MethodDelete, "/workers/"+url.PathEscape(cfg.WorkerURLs[1]), ""), "and again, percent-encoded")
	assert.Equal(t, http.StatusNotFound, do(http.MethodPost, "/remove_worker?url="+url.QueryEscape(deadURL), ""))
	tr.requireLoadsZero(t)

	rec := httptest.NewRecorder()
	s.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	outputs := map[string]string{"responses": seen.String(), "log": logs.String(), "decision log": dlog.String(),
		"access log": access.String(), "metrics": rec.Body.String()}
	for name, out := range outputs {
		require.NotEmpty(t, out, name)
		assert.NotContains(t, out, pass, "%s holds the secret", name)
		assert.NotContains(t, out, user, "%s holds the user name", name)
	}
	assert.Contains(t, dlog.String(), `"worker":"http://***@127.0.0.1:`, "the decision log still names the worker")
	assert.Contains(t, access.String(), "DELETE /workers/http://***@127.0.0.1:")
	assert.Contains(t, logs.String(), "attempt failed")
	assert.Empty(t, refused.String(), "every request reached the worker with its Basic auth")
}
