package router

import (
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/pdrouter/pdrouter/router/kvindex"
)

// Worker is one server process: a base URL with a role, its health and its circuit breaker.
// Its fields are fixed at registration; its state machines and lifecycle are guarded by the
// [Router].
type Worker struct {
	url           string
	role          Role
	bootstrapPort *int
	dpSize        int // 0 when the router is not DP-aware
	health        *Health
	breaker       *Breaker
	targets       []*Target
	// joined is when the worker last entered rotation (became healthy: registered, or back
	// from unhealthy or an open breaker), guarded by the router's mutex: cache_aware's warm-up
	// runs from there.
	joined time.Time
	// reason is why it is in its state: the reason of its last change of state (guarded by
	// the router's mutex), for a NoTargetError to name.
	reason string

	// removed is set once RemoveWorker took the worker out of routing; atomic so that
	// Decision.Done can tell without the router's lock whether a finished leg may end a drain.
	removed atomic.Bool
	// Guarded by the router's mutex: set while the worker is in Router.draining.
	draining   bool
	drainSince time.Time
	removal    Removal
}

// BootstrapPort returns the prefill bootstrap port, nil for none (sent as JSON null).
func (w *Worker) BootstrapPort() *int { return w.bootstrapPort }

// Load returns the requests routed to the worker and not yet finished: the sum over its
// targets. Safe to call without the router's lock, and after the worker is removed.
func (w *Worker) Load() int64 {
	var n int64
	for _, t := range w.targets {
		n += t.Load()
	}
	return n
}

// Target is what a policy chooses: a worker, or one DP rank of it under --dp-aware. It owns the
// in-flight load counter and the cache-aware tenant. A Target must not be copied.
type Target struct {
	name   string // url, or url@rank
	worker *Worker
	rank   int // -1 without a DP rank
	load   atomic.Int64

	// Scratch of the role's policy, guarded by the router's mutex (a target belongs to one
	// role, and each role has one policy instance).
	pickEpoch uint64
	pickIndex int
	// kvID is the target's handle in its policy's KV event index, interned from its name when
	// the index is attached or the target registered; guarded by the router's mutex.
	kvID kvindex.TargetID
	// engine is its engine's latest load report (ReportLoad); guarded by the router's mutex.
	engine engineView
	// latency is predicted_latency's view of it and its corrections; guarded by the router's mutex.
	latency latencyView
}

// Name returns "url" or "url@rank": the tenant name in the cache-aware tree.
func (t *Target) Name() string { return t.name }

// Worker returns the worker this target belongs to.
func (t *Target) Worker() *Worker { return t.worker }

// URL returns the worker's base URL (requests go there, with the rank in the body).
func (t *Target) URL() string { return t.worker.url }

// Rank returns the DP rank and whether the target has one.
func (t *Target) Rank() (int, bool) { return t.rank, t.rank >= 0 }

// RankPtr returns the DP rank, or nil without one (the shape the wire format wants).
func (t *Target) RankPtr() *int {
	if t.rank < 0 {
		return nil
	}
	r := t.rank
	return &r
}

// Load returns the number of requests routed to the target and not yet finished. Safe to call
// without the router's lock.
func (t *Target) Load() int64 { return t.load.Load() }

// TargetName returns the target name of a worker URL and rank (rank < 0: the URL itself).
func TargetName(url string, rank int) string {
	if rank < 0 {
		return url
	}
	return url + "@" + strconv.Itoa(rank)
}

// SplitTargetName splits "url@rank" at the last '@' (so IPv6 URLs work). A name without a
// numeric "@rank" suffix is returned whole with rank -1.
func SplitTargetName(name string) (url string, rank int) {
	i := strings.LastIndexByte(name, '@')
	if i < 0 {
		return name, -1
	}
	r, err := strconv.Atoi(name[i+1:])
	if err != nil || r < 0 || strings.ContainsAny(name[i+1:], "+-") {
		return name, -1
	}
	return name[:i], r
}

// WorkerSpec describes a worker to register.
type WorkerSpec struct {
	URL  string
	Role Role
	// BootstrapPort is the prefill bootstrap port; nil means none (JSON null on the wire).
	BootstrapPort *int
	// DPSize is the worker's dp_size from /get_server_info; used only when the router is
	// DP-aware, where it must be ≥ 1.
	DPSize int
	// Starting registers a worker not yet probed: it takes no traffic until a health probe
	// passes (WorkerStarting). Without it the worker starts healthy (it was just probed).
	Starting bool
	// Source says who registered it ("config", "api", "discovery", …); it is carried in the
	// registration's [WorkerEvent], for the logs. "" is fine.
	Source string
}

// Removal says who removed a worker and why (Router.RemoveWorker), for its events.
type Removal struct {
	Source string // "api", "discovery", …
	Reason string // e.g. "removed through the API"
}

// TargetInfo is a snapshot of one target for /get_loads and metrics.
type TargetInfo struct {
	Name    string
	URL     string
	Role    Role
	Rank    int // -1 without a DP rank
	Load    int64
	Healthy bool // worker healthy and its breaker not open
}

// WorkerInfo is a snapshot of one worker for /workers and metrics.
type WorkerInfo struct {
	URL           string
	Role          Role
	BootstrapPort *int
	DPSize        int
	// State is the one verdict every view shows (/workers, /readiness, /get_loads, metrics);
	// Healthy is State == WorkerHealthy: the worker takes traffic.
	State   WorkerState
	Healthy bool
	Breaker BreakerState
	Load    int64 // sum over the worker's targets
}

// WorkerState is a worker's state as every view shows it.
type WorkerState string

// Worker states, worst first: a failing health check wins over an open breaker. A worker's
// lifecycle is added → starting → healthy/unhealthy/breaker_open → draining → gone; every
// change is a [WorkerEvent].
const (
	// WorkerAdded is the From of a registration event: the worker did not exist before.
	WorkerAdded       WorkerState = "added"
	WorkerStarting    WorkerState = "starting"     // registered, no health probe passed yet: no traffic
	WorkerHealthy     WorkerState = "healthy"      // passes health checks, breaker closed or half-open: takes traffic
	WorkerUnhealthy   WorkerState = "unhealthy"    // failed --health-failure-threshold probes in a row
	WorkerBreakerOpen WorkerState = "breaker_open" // failed --cb-failure-threshold requests in a row: no traffic until a probe passes or the timeout ends
	// WorkerDraining is a worker removed (DELETE /workers, service discovery) while requests
	// to it were in flight: it takes no new request, and the views still show it, with its
	// load, until those requests finish; then it is gone.
	WorkerDraining WorkerState = "draining"
	// WorkerGone is a removed worker with nothing in flight: no view shows it; only the
	// event of its going and RemoveWorker's answer name it.
	WorkerGone WorkerState = "gone"
)

func workerState(w *Worker, now time.Time) WorkerState {
	switch {
	case w.draining:
		return WorkerDraining
	case w.removed.Load():
		return WorkerGone
	case w.health.Starting():
		return WorkerStarting
	case !w.health.Healthy():
		return WorkerUnhealthy
	case !w.breaker.Allow(now):
		return WorkerBreakerOpen
	}
	return WorkerHealthy
}

// WorkerEvent is one step of a worker's lifecycle (Router.OnWorkerEvent): registered, its
// health verdict or breaker changing, removed, drained. Serve logs it as it happens and drops
// what it keeps per worker when the worker is gone.
type WorkerEvent struct {
	URL  string
	Role Role
	// From is WorkerAdded for a registration; WorkerDraining with To a live state for a
	// worker registered again while draining (the old registration's requests finish unshown).
	From WorkerState
	// To is WorkerGone when the worker leaves the registry (removed idle, or drained).
	To     WorkerState
	Reason string // what moved it: "health probe failed", "health probe passed", "removed through the API", …
	// Source is who added or removed the worker (WorkerSpec.Source, Removal.Source); "" for
	// changes of health or breaker.
	Source string
	// InFlight is the requests a draining worker still waits for (To WorkerDraining), or those
	// the old registration of a worker registered again still has (From WorkerDraining).
	InFlight int64
	// DPSize is the registered worker's dp_size (registrations; 0 when not DP-aware).
	DPSize int
}

// NoTargetError is returned by [Router.Route] when a role has no available target (all
// starting, unhealthy or with open circuits, or none registered). Serve answers 503.
type NoTargetError struct {
	Role       Role
	Registered int // targets registered for the role
	// Workers are the role's workers and why each takes no traffic (URLs and reasons
	// redacted), in registration order.
	Workers []UnavailableWorker
}

// UnavailableWorker is a worker that takes no traffic, its state and the reason it entered it.
type UnavailableWorker struct {
	URL    string // redacted
	State  WorkerState
	Reason string // redacted; "" when none was recorded
}

// maxNamedWorkers bounds the workers a NoTargetError's message names.
const maxNamedWorkers = 4

func (e *NoTargetError) Error() string {
	if e.Registered == 0 {
		return fmt.Sprintf("no %s workers registered", e.Role)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "no available %s workers (%d registered, all starting, unhealthy or circuit open)", e.Role, e.Registered)
	for i, w := range e.Workers {
		if i == maxNamedWorkers {
			fmt.Fprintf(&b, "; %d more", len(e.Workers)-i)
			break
		}
		sep := "; "
		if i == 0 {
			sep = ": "
		}
		fmt.Fprintf(&b, "%s%s %s", sep, w.URL, w.State)
		if w.Reason != "" {
			fmt.Fprintf(&b, " (%s)", w.Reason)
		}
	}
	return b.String()
}

// Redacted is what stands for a URL's credentials (user name and password alike) wherever a
// URL is shown: http://user:pw@host → http://***@host.
const Redacted = "***"

// RedactURL hides the credentials of a worker URL or target name (http://user:pw@host →
// http://***@host, http://user:pw@host@3 → http://***@host@3), user name included,
// wherever a URL is shown — logs, /workers, /get_loads, /get_router_config, the decision and
// access logs, metric labels, error messages — so no secret leaves the router (SPEC §1.7).
// The router keeps the URL as given to reach the worker (Go's client sends its user info as
// Basic auth).
func RedactURL(u string) string {
	// A target name is url@rank: keep the rank, redact the URL.
	if i := strings.LastIndex(u, "@"); i >= 0 && i+1 < len(u) && strings.Trim(u[i+1:], "0123456789") == "" && strings.Contains(u[:i], "://") {
		return redactURL(u[:i]) + u[i:]
	}
	return redactURL(u)
}

func redactURL(u string) string {
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		return u
	}
	host := rest
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		host = rest[:i]
	}
	at := strings.LastIndex(host, "@")
	if at < 0 || host[:at] == Redacted {
		return u
	}
	return scheme + "://" + Redacted + "@" + rest[at+1:]
}

// RedactIn hides the credentials of workerURL, and of any other URL, inside free text such as
// a transport error. Go's errors quote the URL they dialled with the password replaced but
// the user name kept (net/http's stripPassword: "http://user:***@host"); a dialler may quote
// the host with its user info. Both lose the user info here.
func RedactIn(text, workerURL string) string {
	if _, rest, ok := strings.Cut(workerURL, "://"); ok {
		host := rest
		if i := strings.IndexAny(rest, "/?#"); i >= 0 {
			host = rest[:i]
		}
		if at := strings.LastIndex(host, "@"); at > 0 {
			info := host[:at]
			text = strings.ReplaceAll(text, info+"@", Redacted+"@")
			if user, _, hasPw := strings.Cut(info, ":"); hasPw {
				text = strings.ReplaceAll(text, user+":***@", Redacted+"@")
			}
		}
	}
	return RedactText(text)
}

// RedactText replaces the user info of every scheme://user:pw@host in text with ***. An
// "@digits" after a host is a DP rank (url@rank), not user info.
func RedactText(text string) string {
	if !strings.Contains(text, "@") || !strings.Contains(text, "://") {
		return text
	}
	var b strings.Builder
	rest := text
	for {
		i := strings.Index(rest, "://")
		if i < 0 {
			break
		}
		i += len("://")
		b.WriteString(rest[:i])
		rest = rest[i:]
		// User info may hold sub-delimiters (,;()' …): only what cannot be in an
		// authority, or quotes it, ends it.
		end := strings.IndexAny(rest, "/?# \t\r\n\"<>`\\")
		if end < 0 {
			end = len(rest)
		}
		auth := rest[:end]
		at := strings.LastIndex(auth, "@")
		if at >= 0 && strings.Trim(auth[at+1:], "0123456789") == "" {
			// url@rank: the user info, if any, ends at the '@' before.
			at = strings.LastIndex(auth[:at], "@")
		}
		if at > 0 && auth[:at] != Redacted {
			b.WriteString(Redacted)
			rest = rest[at:]
		}
	}
	b.WriteString(rest)
	return b.String()
}
