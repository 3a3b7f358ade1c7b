package server

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/router/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func keyHash(k string) string {
	sum := sha256.Sum256([]byte(k))
	return "auth:" + hex.EncodeToString(sum[:])
}

// An API key names its tenant through its hash; the key shows nowhere (metrics, 429 body).
// A tenant over its concurrency is answered 429 with Retry-After and the limit named, while
// another tenant is served.
func TestTenantLimitsByAPIKeyAndHeader(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	w := newWorker(t, func(rw http.ResponseWriter, r *http.Request, c call) {
		if c.body["text"] == "hold" {
			hangReply(release)(rw, r, c)
		}
		jsonReply(`{"text":"ok"}`)(rw, r, c)
	})
	cfg := regularConfig(w)
	cfg.TrustTenantHeader = true
	cfg.TenantHeaderName = "x-smg-tenant-id"
	cfg.TenantMaxConcurrentRequests = 1
	cfg.Tenants = []router.TenantSpec{{Name: "team-a", Keys: []string{keyHash("sk-team-a-secret")}},
		{Name: "team-b", Keys: []string{"header:b"}, MaxConcurrentRequests: 2}}
	tr := startRouter(t, cfg)
	keyA := map[string]string{"Authorization": "Bearer sk-team-a-secret"}

	held := make(chan int)
	go func() {
		status, _, _ := tr.post(t, "/generate", `{"text":"hold"}`, keyA)
		held <- status
	}()
	waitFor(t, func() bool { return len(w.callsTo("/generate")) == 1 })
	status, hdr, body := tr.post(t, "/generate", `{"text":"more"}`, keyA)
	require.Equal(t, http.StatusTooManyRequests, status, body)
	assert.Equal(t, "1", hdr.Get("Retry-After"))
	assert.Contains(t, body, "tenant team-a")
	assert.Contains(t, body, "max_concurrent_requests")
	// Another tenant (by header, before any key) and an unconfigured key are served.
	status, _, body = tr.post(t, "/generate", `{"text":"x"}`, map[string]string{"X-Smg-Tenant-Id": "b", "Authorization": "Bearer sk-team-a-secret"})
	require.Equal(t, http.StatusOK, status, body)
	status, _, body = tr.post(t, "/generate", `{"text":"x"}`, map[string]string{"Authorization": "Bearer sk-other-secret"})
	require.Equal(t, http.StatusOK, status, body)
	close(release)
	require.Equal(t, http.StatusOK, <-held)

	m := tr.metricsText()
	assert.Contains(t, m, `pdrouter_tenant_rejected_total{reason="tenant_concurrency",tenant="team-a"} 1`)
	assert.Contains(t, m, `pdrouter_tenant_admitted_total{tenant="team-a"} 1`)
	assert.Contains(t, m, `pdrouter_tenant_admitted_total{tenant="team-b"} 1`)
	assert.Contains(t, m, `pdrouter_tenant_admitted_total{tenant="default"} 1`)
	assert.Contains(t, m, `pdrouter_errors_total{kind="tenant_concurrency"} 1`)
	for _, secret := range []string{"sk-team-a", "sk-other", keyHash("sk-other-secret")[5:]} {
		assert.NotContains(t, m, secret)
		assert.NotContains(t, body, secret)
	}
	tr.requireLoadsZero(t)
}

// A tenant over its tokens per second gets 429 with the wait until its request fits; the
// request's cost counts its prompt and the output it asks for.
func TestTenantTokensPerSecond(t *testing.T) {
	t.Parallel()
	w := newWorker(t, jsonReply(`{"text":"ok"}`))
	cfg := regularConfig(w)
	cfg.TenantTokensPerSecond = 100
	tr := startRouter(t, cfg)
	status, _, body := tr.post(t, "/v1/completions", `{"prompt":"abcd","max_tokens":90}`, nil) // 91 tokens
	require.Equal(t, http.StatusOK, status, body)
	status, hdr, body := tr.post(t, "/generate", `{"text":"abcdefghabcdefghabcdefghabcdefghabcdefgh","sampling_params":{"max_new_tokens":20}}`, nil) // 30
	require.Equal(t, http.StatusTooManyRequests, status, body)
	assert.Contains(t, body, "tokens per second")
	assert.Contains(t, body, "this request's 30 tokens")
	assert.Equal(t, "1", hdr.Get("Retry-After")) // ≈ 0.2 s, rounded up to a whole second
}

func TestTicketCost(t *testing.T) {
	t.Parallel()
	s := &Server{}
	for _, c := range []struct {
		route, body string
		tokens      int
		prio        int
	}{
		{"/generate", `{"input_ids":[1,2,3,4,5],"priority":7}`, 5, 7},
		{"/generate", `{"text":"12345678","sampling_params":{"max_new_tokens":10}}`, 12, 0},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"12345678"}],"max_completion_tokens":3,"priority":-2}`, 0, -2},
	} {
		x := exchangeFor(t, c.route, c.body)
		tk := s.ticket(x)
		assert.Equal(t, c.prio, tk.Priority, c.body)
		if c.tokens > 0 {
			assert.Equal(t, c.tokens, tk.Tokens, c.body)
		} else {
			assert.Equal(t, (len(x.body.Text)+3)/4+3, tk.Tokens, c.body)
		}
		assert.Equal(t, router.TenantAnonymous, tk.Tenant)
	}
}

// exchangeFor is an exchange of a request to path with body, parsed.
func exchangeFor(t *testing.T, path, body string) *exchange {
	t.Helper()
	route, ok := wire.RouteFromPath(path)
	require.True(t, ok, path)
	b, err := wire.ParseLimited(route, []byte(body), wire.Limits{})
	require.NoError(t, err)
	return &exchange{req: httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)), route: route, body: b}
}
