package router

import (
	"container/heap"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// Admission decides which requests start and in what order when the router is saturated:
// the concurrency bound (--max-concurrent-requests) with its queue (--queue-size), the
// router-wide admission rate (--rate-limit-tokens-per-second, smg's bucket of one token per
// request), and each tenant's limits (its requests in the router, its LLM tokens per second)
// and share. Serve and the simulator both run it, with time passed in (no wall clock here).
//
// Order in the queue: between tenants, weighted fair share (start-time fair queuing in tokens
// over every admission: the tenant with the least service per unit of weight goes next, so a
// tenant that floods cannot take more than its share while another waits); within a tenant, its requests'
// priority (SGLang's default: higher values first; [AdmissionConfig.LowPriorityFirst] flips it,
// as SGLang's --schedule-low-priority-values-first), then arrival. A request's priority orders
// only its own tenant's requests: a field the client sets cannot take another tenant's share.
//
// Not safe for concurrent use: serve holds a lock around it.
type Admission struct {
	cfg     AdmissionConfig
	byKey   map[string]*TenantSpec // configured tenants by each of their keys and their name
	tenants map[string]*tenantState
	backlog []*tenantState // the tenants with requests queued
	running int            // admitted, not released
	queued  int
	vnow    float64 // virtual time: the start tag of the last request admitted from the queue
	seq     uint64
	rate    bucket // the router-wide admission bucket (RateLimitTokensPerSecond)
	offers  int    // Offer calls since the last sweep of idle tenants
}

// AdmissionConfig is what [NewAdmission] needs: [Config.Admission] builds it.
type AdmissionConfig struct {
	MaxConcurrent int     // requests admitted at once; ≤ 0: no bound (and no queue)
	QueueSize     int     // requests that may wait for a slot
	RatePerSecond float64 // router-wide admissions per second, burst MaxConcurrent; 0: none
	// Default limits of a tenant without its own entry, and of an entry's zero fields; ≤ 0: none.
	TenantMaxConcurrent int
	TenantTokensPerSec  float64
	LowPriorityFirst    bool // lower priority values are served first (SGLang's flag)
	Tenants             []TenantSpec
}

// TenantSpec is one tenant's entry (--tenants, or `tenants:` in a settings file).
type TenantSpec struct {
	// Name labels the tenant in metrics, logs and 429 bodies, and is how the simulator's tenant
	// mix names it.
	Name string `json:"name" yaml:"name"`
	// Keys are the canonical tenant keys that are this tenant, as smg spells them:
	// auth:<sha256 hex of an API key> (Authorization: Bearer KEY) or header:<value> (the tenant
	// header, with --trust-tenant-header).
	Keys []string `json:"tenant_keys" yaml:"tenant_keys"`
	// Weight is its share when the router is saturated, relative to the others' (0: 1).
	Weight float64 `json:"weight" yaml:"weight"`
	// MaxConcurrentRequests bounds its requests in the router, running or queued (0: the
	// default, --tenant-max-concurrent-requests; < 0: none).
	MaxConcurrentRequests int `json:"max_concurrent_requests" yaml:"max_concurrent_requests"`
	// TokensPerSecond bounds the LLM tokens (prompt plus the output asked for) it may start
	// per second, burst one second's worth (0: the default, --tenant-tokens-per-second; < 0:
	// none).
	TokensPerSecond float64 `json:"tokens_per_second" yaml:"tokens_per_second"`
}

// TenantAnonymous is the tenant key of a request with neither an API key nor a tenant header.
const TenantAnonymous = "anonymous"

// DefaultTenant labels every tenant without an entry of its own (metrics, 429 bodies); each
// such key still has limits of its own.
const DefaultTenant = "default"

// Ticket is one request's place in admission, from Offer to Release.
type Ticket struct {
	Tenant   string // the tenant key: auth:…, header:…, anonymous, or a configured tenant's name
	Priority int    // the request's priority field (0 when absent)
	Tokens   int    // the LLM tokens it costs its tenant's bucket (prompt + output asked for)

	st         *tenantState
	seq        uint64
	index      int // in its tenant's queue; -1 when not queued
	admitted   bool
	released   bool
	EnqueuedAt time.Time // when it joined the queue (zero: admitted at once)
	AdmittedAt time.Time
	refused    *LimitError // pushed out of the queue
}

// Refused is the *LimitError of a ticket pushed out of the queue (Offer's pushedOut), else nil.
func (t *Ticket) Refused() error {
	if t.refused == nil {
		return nil
	}
	return t.refused
}

// Admitted reports whether the ticket holds a slot.
func (t *Ticket) Admitted() bool { return t.admitted }

// Label is the ticket's tenant label: its entry's name, or DefaultTenant.
func (t *Ticket) Label() string {
	if t.st == nil || t.st.spec == nil {
		return DefaultTenant
	}
	return t.st.spec.Name
}

// LimitError is a request refused because a limit is reached: serve answers 429 with
// Retry-After.
type LimitError struct {
	Tenant     string        // the tenant's label
	Reason     string        // tenant_concurrency, tenant_tokens, rate_limit or queue_full (metrics' reason)
	Limit      string        // the setting at fault, as the body names it
	RetryAfter time.Duration // when trying again may succeed
	msg        string
}

func (e *LimitError) Error() string { return e.msg }

// ErrAdmissionQueueFull is the LimitError reason of a full queue.
var ErrAdmissionQueueFull = errors.New("too many requests: the admission queue is full")

// Is makes errors.Is(err, ErrAdmissionQueueFull) hold for a full queue.
func (e *LimitError) Is(target error) bool {
	return target == ErrAdmissionQueueFull && e.Reason == ReasonQueueFull
}

// LimitError reasons.
const (
	ReasonTenantConcurrency = "tenant_concurrency"
	ReasonTenantTokens      = "tenant_tokens"
	ReasonRateLimit         = "rate_limit"
	ReasonQueueFull         = "queue_full"
)

// NewAdmission returns an Admission for cfg; nil when nothing would ever be limited or
// ordered (no bound, no rate, no tenant limits or entries): then every request is admitted.
func NewAdmission(cfg AdmissionConfig) *Admission {
	if cfg.MaxConcurrent <= 0 && cfg.RatePerSecond <= 0 && cfg.TenantMaxConcurrent <= 0 &&
		cfg.TenantTokensPerSec <= 0 && len(cfg.Tenants) == 0 {
		return nil
	}
	a := &Admission{cfg: cfg, byKey: map[string]*TenantSpec{}, tenants: map[string]*tenantState{}}
	for i := range cfg.Tenants {
		sp := &a.cfg.Tenants[i]
		a.byKey[sp.Name] = sp
		for _, k := range sp.Keys {
			a.byKey[k] = sp
		}
	}
	if cfg.RatePerSecond > 0 {
		a.rate = bucket{rate: cfg.RatePerSecond, capacity: float64(max(cfg.MaxConcurrent, 1))}
		a.rate.level = a.rate.capacity
	}
	return a
}

// tenantState is one tenant's admission state.
type tenantState struct {
	id       string      // its key in Admission.tenants
	spec     *TenantSpec // nil: no entry of its own
	weight   float64
	maxConc  int // ≤ 0: none
	inRouter int // admitted or queued
	vfinish  float64
	queue    ticketHeap
	tokens   bucket // rate 0: none
	lowFirst bool   // its queue serves lower priority values first
}

// bucket is a token bucket refilled continuously at rate per second up to capacity, whose
// level may go below zero: a request costlier than the whole capacity is let through when the
// bucket is full and leaves a debt, rather than never fitting.
type bucket struct {
	rate, capacity, level float64
	at                    time.Time
}

func (b *bucket) refill(now time.Time) {
	if !b.at.IsZero() && now.After(b.at) {
		b.level = math.Min(b.capacity, b.level+now.Sub(b.at).Seconds()*b.rate)
	}
	if b.at.IsZero() || now.After(b.at) {
		b.at = now
	}
}

// take takes cost if the bucket holds min(cost, capacity), else reports how long until it will.
func (b *bucket) take(cost float64, now time.Time) (time.Duration, bool) {
	b.refill(now)
	need := math.Min(cost, b.capacity)
	if b.level >= need {
		b.level -= cost
		return 0, true
	}
	return time.Duration((need - b.level) / b.rate * float64(time.Second)), false
}

func (b *bucket) full(now time.Time) bool {
	b.refill(now)
	return b.level >= b.capacity
}

func (a *Admission) tenant(key string, now time.Time) *tenantState {
	sp := a.byKey[key]
	id := key
	if sp != nil {
		id = "\x00" + sp.Name // one state per entry, whichever of its keys came
	}
	if st, ok := a.tenants[id]; ok {
		return st
	}
	st := &tenantState{id: id, spec: sp, weight: 1, maxConc: a.cfg.TenantMaxConcurrent, lowFirst: a.cfg.LowPriorityFirst}
	tps := a.cfg.TenantTokensPerSec
	if sp != nil {
		if sp.Weight > 0 {
			st.weight = sp.Weight
		}
		if sp.MaxConcurrentRequests != 0 {
			st.maxConc = sp.MaxConcurrentRequests
		}
		if sp.TokensPerSecond != 0 {
			tps = sp.TokensPerSecond
		}
	}
	if tps > 0 {
		st.tokens = bucket{rate: tps, capacity: tps, level: tps, at: now}
	}
	st.vfinish = a.vnow
	a.tenants[id] = st
	return st
}

// Offer asks admission for t at now. It returns nil with t admitted (t.Admitted()) or queued
// (waiting for a Release to admit it), or a *LimitError and t is neither. When the queue is
// full and t's tenant has fewer requests queued per unit of weight than the tenant with the
// most, that tenant's last request (its worst priority, then its newest) is pushed out to make
// room and returned: it is refused (its Refused error), so a flooding tenant cannot keep the
// others out of the queue.
func (a *Admission) Offer(t *Ticket, now time.Time) (pushedOut *Ticket, err error) {
	a.sweep(now)
	st := a.tenant(t.Tenant, now)
	t.st, t.index = st, -1
	label := t.Label()
	if st.maxConc > 0 && st.inRouter >= st.maxConc {
		return nil, &LimitError{Tenant: label, Reason: ReasonTenantConcurrency, Limit: "max_concurrent_requests", RetryAfter: time.Second,
			msg: fmt.Sprintf("tenant %s has %d requests in the router, its limit (max_concurrent_requests of its entry, else --tenant-max-concurrent-requests): retry later", label, st.maxConc)}
	}
	if st.tokens.rate > 0 {
		if wait, ok := st.tokens.take(float64(max(t.Tokens, 1)), now); !ok {
			return nil, &LimitError{Tenant: label, Reason: ReasonTenantTokens, Limit: "tokens_per_second", RetryAfter: wait,
				msg: fmt.Sprintf("tenant %s is over its %g tokens per second (tokens_per_second of its entry, else --tenant-tokens-per-second): this request's %d tokens fit in %.1f s", label, st.tokens.rate, t.Tokens, wait.Seconds())}
		}
	}
	if a.rate.rate > 0 {
		if wait, ok := a.rate.take(1, now); !ok {
			a.refund(t)
			return nil, &LimitError{Tenant: label, Reason: ReasonRateLimit, Limit: "--rate-limit-tokens-per-second", RetryAfter: wait,
				msg: fmt.Sprintf("the router admits at most %g requests per second (--rate-limit-tokens-per-second): retry in %.1f s", a.rate.rate, wait.Seconds())}
		}
	}
	if a.cfg.MaxConcurrent <= 0 || a.running < a.cfg.MaxConcurrent && a.queued == 0 {
		st.inRouter++
		a.serve(st, t)
		a.admit(t, now)
		return nil, nil
	}
	if a.queued >= a.cfg.QueueSize {
		if pushedOut = a.pushOut(st, now); pushedOut == nil {
			a.refund(t)
			if a.rate.rate > 0 {
				a.rate.level++
			}
			return nil, queueFull(label)
		}
	}
	st.inRouter++
	a.seq++
	t.seq, t.EnqueuedAt = a.seq, now
	if st.queue.Len() == 0 {
		a.backlog = append(a.backlog, st)
	}
	heap.Push(&st.queue, t)
	a.queued++
	return pushedOut, nil
}

func queueFull(tenant string) *LimitError {
	return &LimitError{Tenant: tenant, Reason: ReasonQueueFull, Limit: "--queue-size", RetryAfter: time.Second, msg: ErrAdmissionQueueFull.Error()}
}

// pushOut makes room in the full queue for a request of st: it refuses the last request of the
// tenant with the most queued per unit of weight, if that tenant has more than st would with
// the newcomer, and returns it; nil when no tenant has more.
func (a *Admission) pushOut(st *tenantState, now time.Time) *Ticket {
	var big *tenantState
	for _, b := range a.backlog {
		if big == nil || float64(b.queue.Len())/b.weight > float64(big.queue.Len())/big.weight {
			big = b
		}
	}
	if big == nil || big == st || float64(big.queue.Len())/big.weight <= float64(st.queue.Len()+1)/st.weight {
		return nil
	}
	last := 0
	for i := range big.queue.items {
		if big.queue.Less(last, i) {
			last = i
		}
	}
	t := big.queue.items[last]
	a.Cancel(t, now)
	t.refused = queueFull(t.Label())
	return t
}

// refund gives back the tokens t took from its tenant's bucket.
func (a *Admission) refund(t *Ticket) {
	if t.st.tokens.rate > 0 {
		t.st.tokens.level += float64(max(t.Tokens, 1))
	}
}

func (a *Admission) admit(t *Ticket, now time.Time) {
	t.admitted, t.AdmittedAt = true, now
	a.running++
}

// Release ends admitted ticket t (its response is over) and returns the queued tickets it
// lets in, in order; extra calls and tickets never admitted return nil.
func (a *Admission) Release(t *Ticket, now time.Time) []*Ticket {
	if !t.admitted || t.released {
		return nil
	}
	t.released = true
	a.running--
	t.st.inRouter--
	return a.dispatch(now)
}

// Cancel takes queued ticket t out of the queue (its client went away or it timed out) and
// reports whether it was still queued; false means it was admitted meanwhile (Release it).
func (a *Admission) Cancel(t *Ticket, now time.Time) bool {
	if t.index < 0 {
		return false
	}
	heap.Remove(&t.st.queue, t.index)
	a.dequeued(t.st)
	a.queued--
	t.st.inRouter--
	a.refund(t)
	return true
}

// dispatch admits queued tickets while slots are free: the tenant with the smallest start
// tag goes next (ties: the earlier arrival), its best request first.
func (a *Admission) dispatch(now time.Time) []*Ticket {
	var out []*Ticket
	for a.queued > 0 && a.running < a.cfg.MaxConcurrent {
		var best *tenantState
		bestTag := 0.0
		for _, st := range a.backlog {
			tag := math.Max(a.vnow, st.vfinish)
			if best == nil || tag < bestTag || tag == bestTag && st.queue.items[0].seq < best.queue.items[0].seq {
				best, bestTag = st, tag
			}
		}
		t := heap.Pop(&best.queue).(*Ticket)
		a.dequeued(best)
		a.queued--
		a.serve(best, t)
		a.admit(t, now)
		out = append(out, t)
	}
	return out
}

// serve advances the virtual clocks for t of st starting: virtual time moves to its start tag
// (its tenant's finish tag, or the virtual time if that is later: an idle tenant banks no
// credit), and the tenant's finish tag by its tokens over its weight.
func (a *Admission) serve(st *tenantState, t *Ticket) {
	a.vnow = math.Max(a.vnow, st.vfinish)
	st.vfinish = a.vnow + float64(max(t.Tokens, 1))/st.weight
}

// dequeued drops st from the backlog once its queue is empty.
func (a *Admission) dequeued(st *tenantState) {
	if st.queue.Len() == 0 {
		i := slices.Index(a.backlog, st)
		a.backlog = slices.Delete(a.backlog, i, i+1)
	}
}

// sweep forgets, every 1024 offers, the tenants without an entry that have nothing in the
// router and a full bucket: a client cycling through API keys cannot grow the state.
func (a *Admission) sweep(now time.Time) {
	if a.offers++; a.offers < 1024 {
		return
	}
	a.offers = 0
	for id, st := range a.tenants {
		if st.spec == nil && st.inRouter == 0 && (st.tokens.rate == 0 || st.tokens.full(now)) {
			delete(a.tenants, id)
		}
	}
}

// Running and Queued return the requests admitted and waiting.
func (a *Admission) Running() int { return a.running }
func (a *Admission) Queued() int  { return a.queued }

// ticketHeap is one tenant's queue: best priority first, then arrival.
type ticketHeap struct{ items []*Ticket }

func (h *ticketHeap) Len() int { return len(h.items) }
func (h *ticketHeap) Less(i, j int) bool {
	a, b := h.items[i], h.items[j]
	switch {
	case a.Priority == b.Priority:
		return a.seq < b.seq
	case a.st.lowFirst:
		return a.Priority < b.Priority
	}
	return a.Priority > b.Priority
}
func (h *ticketHeap) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.items[i].index, h.items[j].index = i, j
}
func (h *ticketHeap) Push(x any) {
	t := x.(*Ticket)
	t.index = len(h.items)
	h.items = append(h.items, t)
}
func (h *ticketHeap) Pop() any {
	n := len(h.items) - 1
	t := h.items[n]
	h.items[n], h.items = nil, h.items[:n]
	t.index = -1
	return t
}
