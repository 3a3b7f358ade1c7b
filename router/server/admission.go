package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/router/wire"
	"github.com/prometheus/client_golang/prometheus"
)

// Admission errors; the handler maps them to 429 and 408 (SPEC §1.6). A tenant over a limit
// is a *router.LimitError (429 with Retry-After).
var (
	ErrQueueFull    = router.ErrAdmissionQueueFull
	ErrQueueTimeout = errors.New("request timed out waiting for an admission slot")
)

// admission runs the router's admission decision ([router.Admission]: concurrency bound and
// queue, rate, tenants' limits and shares, priority) for live requests: a request offered
// either starts, waits (at most --queue-timeout-secs) until a release lets it in, or is refused.
// A permit is held for the whole request, stream included: release it when the response is
// finished. Safe for concurrent use. A nil *admission admits everything.
type admission struct {
	timeout time.Duration
	after   func(time.Duration) <-chan time.Time // time.After; injected by tests
	now     func() time.Time
	m       *tenantMetrics

	mu      sync.Mutex // protects core and ready
	core    *router.Admission
	ready   map[*router.Ticket]chan struct{} // queued tickets' wake-ups
	waiting int                              // queued tickets (core.Queued, read without the core)
}

// newAdmission returns nil when nothing limits or orders requests (no --max-concurrent-requests,
// rate or tenant settings).
func newAdmission(cfg router.AdmissionConfig, timeout time.Duration, reg prometheus.Registerer) *admission {
	core := router.NewAdmission(cfg)
	if core == nil {
		return nil
	}
	return &admission{core: core, timeout: timeout, after: time.After, now: time.Now,
		ready: map[*router.Ticket]chan struct{}{}, m: newTenantMetrics(reg)}
}

// acquire takes a permit for t, waiting in the queue if all are taken. It returns a
// *router.LimitError at once when a limit refuses it (errors.Is ErrQueueFull for a full
// queue), ErrQueueTimeout after the queue timeout, or ctx's error. The returned release must be
// called exactly once (extra calls are no-ops).
func (a *admission) acquire(ctx context.Context, t *router.Ticket) (release func(), err error) {
	if a == nil {
		return func() {}, nil
	}
	a.mu.Lock()
	pushed, err := a.core.Offer(t, a.now())
	if pushed != nil { // refused to make room: its waiter answers 429
		close(a.ready[pushed])
		delete(a.ready, pushed)
		a.waiting--
	}
	if err != nil {
		a.mu.Unlock()
		var le *router.LimitError
		if errors.As(err, &le) {
			a.m.rejected(t.Label(), le.Reason)
		}
		return nil, err
	}
	if t.Admitted() {
		a.mu.Unlock()
		a.m.admitted(t, 0)
		return a.releaser(t), nil
	}
	ch := make(chan struct{})
	a.ready[t] = ch
	a.waiting++
	a.mu.Unlock()
	a.m.queued(t.Label(), 1)
	select {
	case <-ch:
		if err := t.Refused(); err != nil {
			a.m.queued(t.Label(), -1)
			a.m.rejected(t.Label(), router.ReasonQueueFull)
			return nil, err
		}
		return a.releaser(t), nil
	case <-a.after(a.timeout):
		err = ErrQueueTimeout
	case <-ctx.Done():
		err = ctx.Err()
	}
	a.mu.Lock()
	out := a.core.Cancel(t, a.now())
	if out {
		delete(a.ready, t)
		a.waiting--
	}
	a.mu.Unlock()
	if !out { // admitted as it gave up: hand the slot on
		a.releaser(t)()
		return nil, err
	}
	a.m.queued(t.Label(), -1)
	reason := "client_disconnect"
	if err == ErrQueueTimeout {
		reason = "queue_timeout"
	}
	a.m.rejected(t.Label(), reason)
	return nil, err
}

func (a *admission) releaser(t *router.Ticket) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			a.mu.Lock()
			next := a.core.Release(t, a.now())
			for _, n := range next {
				close(a.ready[n])
				delete(a.ready, n)
				a.waiting--
			}
			a.mu.Unlock()
			for _, n := range next {
				a.m.queued(n.Label(), -1)
				a.m.admitted(n, n.AdmittedAt.Sub(n.EnqueuedAt))
			}
		})
	}
}

// tenantMetrics are admission's per-tenant series: pdrouter_tenant_admitted_total,
// pdrouter_tenant_rejected_total{reason}, pdrouter_tenant_queued and
// pdrouter_tenant_queue_wait_seconds, each by tenant (an entry's name, or "default" for every
// tenant without one: API keys never label a series).
type tenantMetrics struct {
	admittedN *prometheus.CounterVec
	rejectedN *prometheus.CounterVec
	queuedN   *prometheus.GaugeVec
	wait      *prometheus.HistogramVec
}

func newTenantMetrics(reg prometheus.Registerer) *tenantMetrics {
	m := &tenantMetrics{
		admittedN: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pdrouter_tenant_admitted_total",
			Help: "Requests admitted, by tenant (its entry's name, or default)."}, []string{"tenant"}),
		rejectedN: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pdrouter_tenant_rejected_total",
			Help: "Requests refused by admission, by tenant and reason: tenant_concurrency, tenant_tokens, rate_limit, queue_full (429), queue_timeout (408), client_disconnect (gone while queued)."}, []string{"tenant", "reason"}),
		queuedN: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pdrouter_tenant_queued",
			Help: "Requests waiting in the admission queue, by tenant."}, []string{"tenant"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "pdrouter_tenant_queue_wait_seconds",
			Help: "Time admitted requests waited in the admission queue (0 when admitted at once), by tenant.", Buckets: durationBuckets}, []string{"tenant"}),
	}
	if reg != nil {
		reg.MustRegister(m.admittedN, m.rejectedN, m.queuedN, m.wait)
	}
	return m
}

func (m *tenantMetrics) admitted(t *router.Ticket, wait time.Duration) {
	l := t.Label()
	m.admittedN.WithLabelValues(l).Inc()
	m.wait.WithLabelValues(l).Observe(wait.Seconds())
}
func (m *tenantMetrics) rejected(tenant, reason string) {
	m.rejectedN.WithLabelValues(tenant, reason).Inc()
}
func (m *tenantMetrics) queued(tenant string, d float64) { m.queuedN.WithLabelValues(tenant).Add(d) }

// tenantKey names a request's tenant as smg's canonical keys do: header:<value> of the tenant
// header when --trust-tenant-header, else auth:<sha256 hex> of its Bearer API key (unless that
// is the router's own --api-key, which every client sends), else anonymous. The key itself is
// never kept: only its hash.
func (s *Server) tenantKey(req *http.Request) string {
	if s.cfg.TrustTenantHeader {
		if v := strings.TrimSpace(req.Header.Get(s.cfg.TenantHeaderName)); v != "" {
			return "header:" + v
		}
	}
	if key, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer "); ok {
		if key = strings.TrimSpace(key); key != "" && key != s.cfg.APIKey {
			sum := sha256.Sum256([]byte(key))
			return "auth:" + hex.EncodeToString(sum[:])
		}
	}
	return router.TenantAnonymous
}

// ticket is x's admission ticket: its tenant, its priority field, and its cost in LLM tokens —
// the prompt (its input_ids, or about four bytes of text a token) plus the output asked for
// (max_tokens, max_completion_tokens, or sampling_params.max_new_tokens).
func (s *Server) ticket(x *exchange) *router.Ticket {
	t := &router.Ticket{Tenant: s.tenantKey(x.req)}
	b := x.body
	if v, ok := b.Field("priority"); ok {
		_ = json.Unmarshal(v, &t.Priority) // not an integer: 0, as SGLang's default
	}
	if v, ok := b.Field("input_ids"); ok && len(v) > 0 && v[0] == '[' {
		t.Tokens = bytes.Count(v, []byte{','}) + 1
	} else {
		t.Tokens = (len(b.Text) + 3) / 4
	}
	for _, f := range []string{"max_tokens", "max_completion_tokens"} {
		if v, ok := b.Field(f); ok {
			var n int
			if json.Unmarshal(v, &n) == nil && n > 0 {
				t.Tokens += n
				return t
			}
		}
	}
	if v, ok := b.Field("sampling_params"); ok {
		var sp struct {
			MaxNewTokens int `json:"max_new_tokens"`
		}
		if json.Unmarshal(v, &sp) == nil && sp.MaxNewTokens > 0 {
			t.Tokens += sp.MaxNewTokens
		}
	}
	return t
}

// admit takes x's admission permit. It answers and returns false when the request is refused:
// 429 with Retry-After and the limit named for a limit, 408 after the queue timeout.
func (s *Server) admit(x *exchange) (release func(), ok bool) {
	var t *router.Ticket
	if s.adm != nil {
		t = s.ticket(x)
	}
	release, err := s.adm.acquire(x.req.Context(), t)
	if err == nil {
		return release, true
	}
	var le *router.LimitError // (after the return: errors.As takes it to the heap)
	switch {
	case errors.As(err, &le): // a full queue too (reason queue_full)
		x.w.Header().Set("Retry-After", retryAfterSecs(le.RetryAfter))
		s.fail(x, &wire.Error{Status: http.StatusTooManyRequests, Type: typeRateLimit, Message: err.Error()}, le.Reason)
	case errors.Is(err, ErrQueueTimeout):
		s.fail(x, &wire.Error{Status: http.StatusRequestTimeout, Type: typeTimeout, Message: err.Error()}, "queue_timeout")
	default:
		s.metrics.Errors.WithLabelValues("client_disconnect").Inc()
	}
	return nil, false
}

// retryAfterSecs is a Retry-After value: d in whole seconds, at least 1.
func retryAfterSecs(d time.Duration) string {
	return strconv.Itoa(max(1, int(math.Ceil(d.Seconds()))))
}
