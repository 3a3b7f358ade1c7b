package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"strings"
	"time"
)

// Routing is the shape of the routing layer beyond one router's settings (router.Config): how
// many router replicas run and how clients reach them, whether cache_aware routes on the
// engines' KV events (serve's precise mode) and how late and lossy those reach the routers, and
// how often and how late the engines' load reports reach them. The zero value is one router on
// its approximate tree and in-flight counts alone. JSON keys are
// the flag names with underscores (sweep keys; results.json meta.router carries them beside
// the router's settings).
type Routing struct {
	// KVEvents is "off" (or "", "approximate": cache_aware routes on its approximate tree) or
	// "on" ("precise", "auto": every simulated server whose role routes with cache_aware
	// publishes its radix cache's events as SGLang does with --kv-events-config, and each router
	// replica's index follows them, as `router serve --kv-events auto`). Roles without
	// cache_aware ignore it, as serve does.
	KVEvents string `json:"kv_events" yaml:"kv_events"`
	// KVEventsDelay is the time from an engine's publish to a router replica applying the batch
	// (network, the subscriber's decode, its lock): a fixed duration or a distribution
	// (ParseDelay). Each replica draws its own; batches of one rank still arrive in order.
	KVEventsDelay Delay `json:"kv_events_delay" yaml:"kv_events_delay"`
	// KVEventsLoss is the probability that a replica misses a batch (a ZeroMQ SUB dropping at
	// its high-water mark). As the live subscriber without a replay endpoint does, the next
	// batch it receives from that rank shows a sequence gap and the target goes stale — routed
	// on the approximate tree — until an AllBlocksCleared rebuilds it (a flush or a restart).
	KVEventsLoss float64 `json:"kv_events_loss" yaml:"kv_events_loss"`
	// Replicas is the number of router replicas (0 → 1), each its own router: approximate
	// tree, pending overlay, in-flight counts and, with KV events, its own index fed by its own
	// subscription to every worker.
	Replicas int `json:"router_replicas" yaml:"router_replicas"`
	// ReplicaAffinity says how clients reach the replicas: "round-robin" (default: each request
	// to the next replica, as a Kubernetes Service spreads new connections) or "session"
	// (sticky: every turn of a conversation to the replica its session id hashes to).
	ReplicaAffinity string `json:"replica_affinity" yaml:"replica_affinity"`
	// LoadReportInterval is how often each router replica reads every server's engine load,
	// per DP rank, as serve polls GET /v1/loads every --load-poll-interval-ms (loads.go). 0 (the
	// zero value; `router sim` defaults to DefaultLoadReportInterval): no reports, the policies
	// compare the router's in-flight counts. Reports are used only while router.Config.LoadReportMaxAgeMs
	// says they are fresh.
	LoadReportInterval time.Duration `json:"load_report_interval" yaml:"load_report_interval"`
	// LoadReportDelay is the time from a poll's start (the report's timestamp) to the replica
	// holding its answer (the request, the engine's answer, the parse): a fixed duration or a
	// distribution (ParseDelay), drawn per poll and replica. Zero: at once (`router sim`
	// defaults to DefaultLoadReportDelay).
	LoadReportDelay Delay `json:"load_report_delay" yaml:"load_report_delay"`
	// TenantMix and PriorityMix give the requests tenants and priorities (ParseMix): a
	// conversation is one tenant's, drawn by its session id; a request's priority is drawn by
	// its id. Tenants named as router.Config.Tenants entries take their weights and limits;
	// the others the --tenant-* defaults, each a tenant of its own.
	TenantMix   string `json:"tenant_mix" yaml:"tenant_mix"`
	PriorityMix string `json:"priority_mix" yaml:"priority_mix"`
}

// Defaults of `router sim`'s load-report flags (Routing's zero value has no reports).
const (
	// DefaultLoadReportInterval is serve's --load-poll-interval-ms default.
	DefaultLoadReportInterval = 500 * time.Millisecond
	// DefaultLoadReportDelay is the age of a report's numbers when the router holds them: the
	// answer's network hop and JSON parse. SGLang's scheduler answers between two forward
	// steps, which delays the answer but not its freshness, so the wait for the step is not
	// part of it.
	DefaultLoadReportDelay = time.Millisecond
)

// Replica affinities (Routing.ReplicaAffinity).
const (
	AffinityRoundRobin = "round-robin"
	AffinitySession    = "session"
)

// PreciseOn reports whether KV-event routing is on.
func (r Routing) PreciseOn() bool {
	switch strings.ToLower(r.KVEvents) {
	case "on", "precise", "auto", "true":
		return true
	}
	return false
}

// replicas returns the replica count (at least 1).
func (r Routing) replicas() int { return max(r.Replicas, 1) }

// Validate reports the first invalid field, naming its flag.
func (r Routing) Validate() error {
	switch strings.ToLower(r.KVEvents) {
	case "", "off", "on", "precise", "approximate", "auto", "true", "false":
	default:
		return fmt.Errorf("sim: --kv-events %q is not on or off", r.KVEvents)
	}
	if !(r.KVEventsLoss >= 0 && r.KVEventsLoss <= 1) {
		return fmt.Errorf("sim: --kv-events-loss %g is outside [0,1]", r.KVEventsLoss)
	}
	if err := r.KVEventsDelay.validate("kv-events-delay"); err != nil {
		return err
	}
	if r.LoadReportInterval < 0 || r.LoadReportInterval > 0 && r.LoadReportInterval < time.Millisecond {
		return fmt.Errorf("sim: --load-report-interval %v must be 0 (no engine load reports) or at least 1ms (serve polls in whole milliseconds)", r.LoadReportInterval)
	}
	if err := r.LoadReportDelay.validate("load-report-delay"); err != nil {
		return err
	}
	if r.Replicas < 0 {
		return fmt.Errorf("sim: --router-replicas %d must be ≥ 1", r.Replicas)
	}
	switch r.ReplicaAffinity {
	case "", AffinityRoundRobin, AffinitySession:
	default:
		return fmt.Errorf("sim: --replica-affinity %q is not %s or %s", r.ReplicaAffinity, AffinityRoundRobin, AffinitySession)
	}
	return nil
}

// Delay is a delay distribution: Fixed, or exponential with mean Mean, or uniform in [Lo, Hi].
// Its text form (ParseDelay, String) is "D" (a Go duration: "10ms", "0"), "exp:MEAN"
// ("exp:10ms") or "uniform:LO-HI" ("uniform:0-20ms", "uniform:5ms-20ms"). The zero value is no
// delay.
type Delay struct {
	Kind   string        // "" (fixed), "exp" or "uniform"
	Fixed  time.Duration // Kind "": the delay
	Mean   time.Duration // Kind "exp": the mean
	Lo, Hi time.Duration // Kind "uniform": the bounds
}

// ParseDelay parses the text form of a Delay.
func ParseDelay(s string) (Delay, error) {
	s = strings.TrimSpace(s)
	bad := func() (Delay, error) {
		return Delay{}, fmt.Errorf("sim: delay %q: want a duration (10ms), exp:MEAN (exp:10ms) or uniform:LO-HI (uniform:0-20ms)", s)
	}
	dur := func(v string) (time.Duration, bool) {
		v = strings.TrimSpace(v)
		if v == "0" {
			return 0, true
		}
		d, err := time.ParseDuration(v)
		return d, err == nil && d >= 0
	}
	kind, rest, ok := strings.Cut(s, ":")
	if !ok {
		d, ok := dur(s)
		if !ok {
			return bad()
		}
		return Delay{Fixed: d}, nil
	}
	switch strings.ToLower(kind) {
	case "exp":
		d, ok := dur(rest)
		if !ok {
			return bad()
		}
		return Delay{Kind: "exp", Mean: d}, nil
	case "uniform":
		a, b, ok := strings.Cut(rest, "-")
		lo, ok1 := dur(a)
		hi, ok2 := dur(b)
		if !ok || !ok1 || !ok2 {
			return bad()
		}
		if hi < lo {
			return Delay{}, fmt.Errorf("sim: delay %q: the high bound is below the low one", s)
		}
		return Delay{Kind: "uniform", Lo: lo, Hi: hi}, nil
	}
	return bad()
}

// String returns the text form ParseDelay reads.
func (d Delay) String() string {
	switch d.Kind {
	case "exp":
		return "exp:" + d.Mean.String()
	case "uniform":
		return "uniform:" + d.Lo.String() + "-" + d.Hi.String()
	}
	return d.Fixed.String()
}

// validate checks d, naming flag in its error ("" for a delay of no flag).
func (d Delay) validate(flag string) error {
	name := "delay"
	if flag != "" {
		name = "--" + flag
	}
	switch d.Kind {
	case "", "exp", "uniform":
	default:
		return fmt.Errorf("sim: %s: unknown distribution %q (exp, uniform)", name, d.Kind)
	}
	if d.Fixed < 0 || d.Mean < 0 || d.Lo < 0 || d.Hi < d.Lo {
		return fmt.Errorf("sim: %s %s: delays must be ≥ 0 (and uniform's low ≤ high)", name, d)
	}
	return nil
}

// draw returns one delay in nanoseconds from rng (which it leaves untouched for a fixed delay).
func (d Delay) draw(rng *rand.Rand) int64 {
	switch d.Kind {
	case "exp":
		return int64(math.Round(rng.ExpFloat64() * float64(d.Mean)))
	case "uniform":
		return int64(d.Lo) + rng.Int64N(int64(d.Hi-d.Lo)+1)
	}
	return int64(d.Fixed)
}

// MarshalJSON writes the text form.
func (d Delay) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads the text form, or a number of nanoseconds (a sweep's "10ms").
func (d *Delay) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] != '"' {
		var ns int64
		if err := json.Unmarshal(b, &ns); err != nil {
			return fmt.Errorf("sim: delay %s: want a duration or a distribution", b)
		}
		*d = Delay{Fixed: time.Duration(ns)}
		return d.validate("")
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := ParseDelay(s)
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// MarshalYAML writes the text form.
func (d Delay) MarshalYAML() (any, error) { return d.String(), nil }

// Set implements pflag.Value (--kv-events-delay, --load-report-delay).
func (d *Delay) Set(s string) error {
	v, err := ParseDelay(s)
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// Type implements pflag.Value.
func (d *Delay) Type() string { return "D|exp:MEAN|uniform:LO-HI" }

// pickReplica returns the replica a request of session reaches: the next in turn, or the one
// its session hashes to.
func (x *sim) pickReplica(session string) int {
	n := len(x.reps)
	if n == 1 {
		return 0
	}
	if x.cfg.Routing.ReplicaAffinity == AffinitySession {
		h := fnv.New64a()
		_, _ = h.Write([]byte(session))
		return int(h.Sum64() % uint64(n))
	}
	i := x.nextRep
	x.nextRep = (x.nextRep + 1) % n
	return i
}

// routerMeta is results.json's meta.router: the routing settings, with the routing layer's
// (Routing) beside them under their own keys, as a bench of `router serve` records serve's
// kv_events beside the router's.
func (x *sim) routerMeta() (json.RawMessage, error) {
	b, err := json.Marshal(x.cfg.Router)
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	r := x.cfg.Routing
	kv := "off"
	if r.PreciseOn() {
		kv = "on"
	}
	aff := r.ReplicaAffinity
	if aff == "" {
		aff = AffinityRoundRobin
	}
	for k, v := range map[string]any{"kv_events": kv, "kv_events_delay": r.KVEventsDelay, "kv_events_loss": r.KVEventsLoss,
		"router_replicas": r.replicas(), "replica_affinity": aff,
		"load_report_interval": r.LoadReportInterval.String(), "load_report_delay": r.LoadReportDelay} {
		if m[k], err = json.Marshal(v); err != nil {
			return nil, err
		}
	}
	return json.Marshal(m)
}
