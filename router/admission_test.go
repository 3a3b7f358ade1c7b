package router

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var t0 = time.Unix(1_700_000_000, 0)

// offer offers a ticket and requires it to be accepted (admitted or queued).
func offer(t testing.TB, a *Admission, tenant string, prio, tokens int, now time.Time) *Ticket {
	t.Helper()
	tk := &Ticket{Tenant: tenant, Priority: prio, Tokens: tokens}
	pushed, err := a.Offer(tk, now)
	require.NoError(t, err)
	require.Nil(t, pushed)
	return tk
}

func TestAdmissionNilWithoutLimits(t *testing.T) {
	t.Parallel()
	require.Nil(t, NewAdmission(AdmissionConfig{MaxConcurrent: -1, QueueSize: 100}))
	require.NotNil(t, NewAdmission(AdmissionConfig{MaxConcurrent: -1, Tenants: []TenantSpec{{Name: "a"}}}))
}

// High-priority requests overtake queued low-priority ones of their tenant: SGLang's default
// polarity serves higher values first, --schedule-low-priority-values-first lower ones.
func TestAdmissionPriorityOvertakes(t *testing.T) {
	t.Parallel()
	for _, lowFirst := range []bool{false, true} {
		a := NewAdmission(AdmissionConfig{MaxConcurrent: 1, QueueSize: 10, LowPriorityFirst: lowFirst})
		run := offer(t, a, TenantAnonymous, 0, 1, t0)
		require.True(t, run.Admitted())
		var queued []*Ticket
		for _, p := range []int{0, 0, 5, -5, 5} {
			tk := offer(t, a, TenantAnonymous, p, 1, t0)
			require.False(t, tk.Admitted())
			queued = append(queued, tk)
		}
		var order []int
		cur := run
		for range queued {
			next := a.Release(cur, t0.Add(time.Second))
			require.Len(t, next, 1)
			cur = next[0]
			order = append(order, cur.Priority)
		}
		if lowFirst {
			require.Equal(t, []int{-5, 0, 0, 5, 5}, order)
		} else {
			require.Equal(t, []int{5, 5, 0, 0, -5}, order)
		}
		// Equal priorities keep their arrival order.
		require.Equal(t, queued[0].seq+1, queued[1].seq)
	}
}

// When saturated, slots go by weighted fair share: a tenant that queued many requests before
// another's arrive does not keep the other waiting behind all of them.
func TestAdmissionWeightedFairShare(t *testing.T) {
	t.Parallel()
	a := NewAdmission(AdmissionConfig{MaxConcurrent: 1, QueueSize: 100,
		Tenants: []TenantSpec{{Name: "flood", Keys: []string{"header:flood"}}, {Name: "gold", Keys: []string{"header:gold"}, Weight: 2}}})
	run := offer(t, a, "header:flood", 0, 10, t0)
	for range 12 {
		offer(t, a, "header:flood", 0, 10, t0)
	}
	for range 4 {
		offer(t, a, "header:gold", 0, 10, t0)
	}
	var order string
	cur := run
	for a.Queued() > 0 {
		next := a.Release(cur, t0)
		require.Len(t, next, 1)
		cur = next[0]
		order += cur.Label()[:1]
	}
	// gold (weight 2) gets two slots per flood slot until it has no more waiting.
	require.Equal(t, "ggfggfffffffffff", order, "flood's running request counts: gold goes first")
	require.Equal(t, 1, a.Running())
}

func TestAdmissionTenantLimits(t *testing.T) {
	t.Parallel()
	a := NewAdmission(AdmissionConfig{MaxConcurrent: -1, TenantMaxConcurrent: 2, TenantTokensPerSec: 100,
		Tenants: []TenantSpec{{Name: "big", Keys: []string{"header:big"}, MaxConcurrentRequests: -1, TokensPerSecond: 1000}}})
	// The default: two in the router at once, then 429 naming the limit.
	r1 := offer(t, a, "header:x", 0, 10, t0)
	offer(t, a, "header:x", 0, 10, t0)
	var le *LimitError
	err := offerErr(a, &Ticket{Tenant: "header:x", Tokens: 10}, t0)
	require.ErrorAs(t, err, &le)
	require.Equal(t, ReasonTenantConcurrency, le.Reason)
	require.Equal(t, DefaultTenant, le.Tenant)
	require.Contains(t, le.Error(), "max_concurrent_requests")
	// Another unconfigured key has limits of its own.
	offer(t, a, "header:y", 0, 10, t0)
	// Tokens: 100 per second, burst 100.
	a.Release(r1, t0)
	y1 := offer(t, a, "header:y", 0, 85, t0) // y: 95 of 100
	a.Release(y1, t0)
	err = offerErr(a, &Ticket{Tenant: "header:y", Tokens: 10}, t0)
	require.ErrorAs(t, err, &le)
	require.Equal(t, ReasonTenantTokens, le.Reason)
	require.Equal(t, 50*time.Millisecond, le.RetryAfter) // 5 more tokens at 100/s
	require.Contains(t, le.Error(), "tokens per second")
	require.NoError(t, offerErr(a, &Ticket{Tenant: "header:y", Tokens: 10}, t0.Add(le.RetryAfter)))
	// A request costlier than the whole bucket passes when it is full, leaving a debt.
	offer(t, a, "header:z", 0, 500, t0)
	err = offerErr(a, &Ticket{Tenant: "header:z", Tokens: 1}, t0.Add(time.Second))
	require.ErrorAs(t, err, &le)
	require.Equal(t, 3*time.Second+10*time.Millisecond, le.RetryAfter)
	// An entry's own limits replace the defaults (-1: none).
	for range 5 {
		offer(t, a, "header:big", 0, 200, t0)
	}
}

// smg's --rate-limit-tokens-per-second: a bucket of one token per request, capacity
// --max-concurrent-requests; a full queue is its own reason.
func TestAdmissionRateAndQueueFull(t *testing.T) {
	t.Parallel()
	a := NewAdmission(AdmissionConfig{MaxConcurrent: 2, QueueSize: 1, RatePerSecond: 4})
	r1 := offer(t, a, TenantAnonymous, 0, 1, t0)
	offer(t, a, TenantAnonymous, 0, 1, t0)
	var le *LimitError
	require.ErrorAs(t, offerErr(a, &Ticket{Tenant: TenantAnonymous}, t0), &le)
	require.Equal(t, ReasonRateLimit, le.Reason)
	require.Equal(t, 250*time.Millisecond, le.RetryAfter)
	require.Contains(t, le.Error(), "--rate-limit-tokens-per-second")
	q := offer(t, a, TenantAnonymous, 0, 1, t0.Add(le.RetryAfter)) // one token back
	require.False(t, q.Admitted())
	err := offerErr(a, &Ticket{Tenant: TenantAnonymous}, t0.Add(500*time.Millisecond))
	require.True(t, errors.Is(err, ErrAdmissionQueueFull), "%v", err)
	// Cancel takes a queued ticket out; it cannot be cancelled twice.
	require.True(t, a.Cancel(q, t0))
	require.False(t, a.Cancel(q, t0))
	require.Empty(t, a.Release(r1, t0))
	require.Empty(t, a.Release(r1, t0))
	require.Equal(t, 1, a.Running())
}

// Tenants without entries are forgotten once idle with a full bucket.
func TestAdmissionForgetsIdleTenants(t *testing.T) {
	t.Parallel()
	a := NewAdmission(AdmissionConfig{MaxConcurrent: -1, TenantTokensPerSec: 10})
	for i := range 5000 {
		tk := offer(t, a, "auth:"+string(rune('a'+i%26))+string(rune('a'+i/26%26))+string(rune('a'+i/676)), 0, 1, t0.Add(time.Duration(i)*time.Second))
		a.Release(tk, t0.Add(time.Duration(i)*time.Second))
	}
	require.Less(t, len(a.tenants), 1100)
}

// offerErr offers a ticket and returns only the error.
func offerErr(a *Admission, t *Ticket, now time.Time) error {
	_, err := a.Offer(t, now)
	return err
}

// A full queue makes room for a tenant with fewer requests queued (per unit of weight) by
// refusing the last request of the tenant with the most: a flooder cannot keep others out.
func TestAdmissionFullQueuePushesOutTheLargestBacklog(t *testing.T) {
	t.Parallel()
	a := NewAdmission(AdmissionConfig{MaxConcurrent: 1, QueueSize: 4})
	run := offer(t, a, "header:flood", 0, 1, t0)
	var flood []*Ticket
	for i := range 4 {
		flood = append(flood, offer(t, a, "header:flood", []int{0, 3, 0, 0}[i], 1, t0))
	}
	// flood's last request by order (priority 0, newest) makes room for calm's.
	calm := &Ticket{Tenant: "header:calm"}
	pushed, err := a.Offer(calm, t0)
	require.NoError(t, err)
	require.Same(t, flood[3], pushed)
	require.ErrorIs(t, pushed.Refused(), ErrAdmissionQueueFull)
	require.Nil(t, flood[2].Refused())
	// Now flood has 3 queued, calm 1: another calm request pushes out flood[2]; a third would
	// leave calm with 3 against flood's 2: refused itself, as is flood's next.
	pushed, err = a.Offer(&Ticket{Tenant: "header:calm"}, t0)
	require.NoError(t, err)
	require.Same(t, flood[2], pushed)
	require.ErrorIs(t, offerErr(a, &Ticket{Tenant: "header:calm"}, t0), ErrAdmissionQueueFull)
	require.ErrorIs(t, offerErr(a, &Ticket{Tenant: "header:flood"}, t0), ErrAdmissionQueueFull)
	require.Equal(t, 4, a.Queued())
	next := a.Release(run, t0)
	require.Len(t, next, 1)
	require.Same(t, calm, next[0], "flood had its share running: calm goes next")
	next = a.Release(next[0], t0)
	require.Len(t, next, 1)
	require.Equal(t, 3, next[0].Priority, "flood's priority-3 request stayed, and goes before its priority 0")
}

// BenchmarkAdmission is one request through a saturated admission (64 slots, 8 tenants with
// token limits, requests queued): Offer, then the Release of an earlier one that admits it.
func BenchmarkAdmission(b *testing.B) {
	a := NewAdmission(AdmissionConfig{MaxConcurrent: 64, QueueSize: 1 << 20, TenantTokensPerSec: 1e12})
	keys := []string{"header:a", "header:b", "header:c", "header:d", "header:e", "header:f", "header:g", "header:h"}
	var running []*Ticket
	for i := range 64 {
		running = append(running, offer(b, a, keys[i%8], 0, 100, t0))
	}
	for i := range 256 { // a standing queue
		offer(b, a, keys[i%8], i%3, 100, t0)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		now := t0.Add(time.Duration(i) * time.Microsecond)
		if _, err := a.Offer(&Ticket{Tenant: keys[i%8], Priority: i % 3, Tokens: 100}, now); err != nil {
			b.Fatal(err)
		}
		next := a.Release(running[i%64], now)
		running[i%64] = next[0]
	}
}
