package sim

import (
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/pdrouter/pdrouter/reports"
	"github.com/pdrouter/pdrouter/router"
)

// Mix is a weighted choice among names (--tenant-mix "batch:0.9,chat:0.1") or priorities
// (--priority-mix "0:0.9,10:0.1"): each item is drawn with its share of the total weight.
type Mix struct {
	Names   []string
	Weights []float64
}

// ParseMix parses "NAME:WEIGHT,..." (a NAME alone weighs 1); flag names the flag for errors.
func ParseMix(flag, s string) (Mix, error) {
	var m Mix
	if strings.TrimSpace(s) == "" {
		return m, nil
	}
	for _, item := range strings.Split(s, ",") {
		name, w, hasW := strings.Cut(strings.TrimSpace(item), ":")
		weight := 1.0
		if hasW {
			var err error
			if weight, err = strconv.ParseFloat(w, 64); err != nil || !(weight > 0) || weight > 1e9 {
				return m, fmt.Errorf("sim: %s %q: weight %q must be a number > 0", flag, s, w)
			}
		}
		if name == "" || slices.Contains(m.Names, name) {
			return m, fmt.Errorf("sim: %s %q: want NAME:WEIGHT,... with distinct non-empty names", flag, s)
		}
		m.Names, m.Weights = append(m.Names, name), append(m.Weights, weight)
	}
	return m, nil
}

// pick draws the item of key's hash (deterministic: the same key, the same item).
func (m Mix) pick(key string, salt byte) string {
	if len(m.Names) == 0 {
		return ""
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte{salt})
	_, _ = h.Write([]byte(key))
	total := 0.0
	for _, w := range m.Weights {
		total += w
	}
	// FNV's high bits barely change between short keys: mix them (splitmix64's finalizer).
	z := h.Sum64()
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	z ^= z >> 31
	u := float64(z>>11) / (1 << 53) * total
	for i, w := range m.Weights {
		if u < w {
			return m.Names[i]
		}
		u -= w
	}
	return m.Names[len(m.Names)-1]
}

// tenancy is a run's tenants and priorities: the mixes its requests draw from, each replica's
// admission (serve's router.Admission: each router replica admits for itself), the queued
// tickets' requests, and what each tenant saw.
type tenancy struct {
	tenants, prios Mix
	adm            []*router.Admission // by replica; nil entries: nothing to admit
	queued         map[*router.Ticket]*request
	timeout        int64 // --queue-timeout-secs, ns
}

func newTenancy(cfg Config, replicas int) (*tenancy, error) {
	tm, err := ParseMix("--tenant-mix", cfg.Routing.TenantMix)
	if err != nil {
		return nil, err
	}
	pm, err := ParseMix("--priority-mix", cfg.Routing.PriorityMix)
	if err != nil {
		return nil, err
	}
	for _, p := range pm.Names {
		if _, err := strconv.Atoi(p); err != nil {
			return nil, fmt.Errorf("sim: --priority-mix %q: priority %q is not an integer", cfg.Routing.PriorityMix, p)
		}
	}
	t := &tenancy{tenants: tm, prios: pm, queued: map[*router.Ticket]*request{},
		timeout: int64(time.Duration(cfg.Router.QueueTimeoutSecs) * time.Second)}
	for range replicas {
		t.adm = append(t.adm, router.NewAdmission(cfg.Router.Admission()))
	}
	return t, nil
}

// TenantStats is what one tenant's recorded requests saw (Stats.Tenants).
type TenantStats struct {
	Level    string // the load level's label
	Tenant   string
	Requests int            // recorded requests
	Rejected map[string]int // refused by admission, by router.LimitError reason (and queue_timeout)
	// TTFTs are the recorded successful requests' times to first token, Waits their time in
	// the admission queue (0 when admitted at once), ms.
	TTFTs, Waits []float64
}

// tenantStats returns the stats of tenant in the current level, made on first use.
func (x *sim) tenantStats(tenant string) *TenantStats {
	if tenant == "" {
		tenant = router.TenantAnonymous
	}
	level := x.lv.info.Label
	for _, ts := range x.stats.Tenants {
		if ts.Tenant == tenant && ts.Level == level {
			return ts
		}
	}
	ts := &TenantStats{Level: level, Tenant: tenant, Rejected: map[string]int{}}
	x.stats.Tenants = append(x.stats.Tenants, ts)
	return ts
}

// admit is admission of r, arrived at its replica: it is routed at once, waits in the queue
// (routed when a release admits it), or is refused (429 or, after the queue timeout, 408).
func (x *sim) admit(r *request) {
	tn := x.tn
	r.tenant = tn.tenants.pick(r.turn.Session, 't') // a conversation is one tenant's
	a := tn.adm[r.rep]
	if a == nil {
		x.route(r)
		return
	}
	prio, _ := strconv.Atoi(tn.prios.pick(r.id, 'p'))
	key := r.tenant
	if key == "" {
		key = router.TenantAnonymous
	}
	r.ticket = &router.Ticket{Tenant: key, Priority: prio, Tokens: r.turn.InputTokens + r.turn.MaxTokens}
	pushed, err := a.Offer(r.ticket, x.t())
	if pushed != nil { // refused to make room for r
		p := tn.queued[pushed]
		delete(tn.queued, pushed)
		x.refuse(p, 429, router.ReasonQueueFull, pushed.Refused().Error())
	}
	var le *router.LimitError
	switch {
	case errors.As(err, &le):
		x.refuse(r, 429, le.Reason, err.Error())
	case err != nil:
		x.err = err
	case r.ticket.Admitted():
		x.route(r)
	default:
		tn.queued[r.ticket] = r
		x.push(x.clock.now+tn.timeout, event{kind: evQueueTimeout, p: unsafe.Pointer(r)})
	}
}

// refuse ends r without routing it: status (429, 408) reaches the client.
func (x *sim) refuse(r *request, status int, reason, msg string) {
	r.ticket, r.refused = nil, reason
	r.errMsg = reports.FormatError(reports.HTTPErrorKind(status), msg)
	x.pushHop(x.clock.now, event{kind: evClientEnd, p: unsafe.Pointer(r)})
}

// queueTimeout ends r if it still waits in the admission queue.
func (x *sim) queueTimeout(r *request) {
	if r.ticket == nil || r.ticket.Admitted() || !x.tn.adm[r.rep].Cancel(r.ticket, x.t()) {
		return
	}
	delete(x.tn.queued, r.ticket)
	x.refuse(r, 408, "queue_timeout", "request timed out waiting for an admission slot")
}

// release gives r's admission slot back as its response ends, and routes the requests it
// lets in.
func (x *sim) release(r *request) {
	if r.ticket == nil {
		return
	}
	for _, t := range x.tn.adm[r.rep].Release(r.ticket, x.t()) {
		next := x.tn.queued[t]
		delete(x.tn.queued, t)
		x.route(next)
	}
}

// recordTenant adds r, recorded, to its tenant's stats.
func (x *sim) recordTenant(r *request, ttftMs *float64) {
	if len(x.tn.tenants.Names) == 0 && x.tn.adm[0] == nil {
		return
	}
	ts := x.tenantStats(r.tenant)
	ts.Requests++
	switch {
	case r.refused != "":
		ts.Rejected[r.refused]++
	case r.errMsg == nil && ttftMs != nil:
		ts.TTFTs = append(ts.TTFTs, *ttftMs)
		wait := 0.0
		if t := r.ticket; t != nil && !t.EnqueuedAt.IsZero() {
			wait = float64(t.AdmittedAt.Sub(t.EnqueuedAt)) / 1e6
		}
		ts.Waits = append(ts.Waits, wait)
	}
}
