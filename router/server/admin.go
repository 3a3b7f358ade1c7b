package server

import (
	"context"
	"crypto/sha1"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/router/wire"
)

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// passthrough forwards other POST routes to a target chosen by the policy in regular mode,
// and answers 501 in PD mode, which has no meaning for them (SPEC §1.4 step 9, §1.5).
func (s *Server) passthrough(path string) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		if s.r.PD() {
			writeError(w, http.StatusNotImplemented, typeNotImpl, path+" is not supported in PD mode (prefill/decode disaggregation serves generation routes only)")
			return
		}
		raw, err := io.ReadAll(http.MaxBytesReader(w, req.Body, s.cfg.MaxPayloadSize))
		if err != nil {
			writeError(w, http.StatusRequestEntityTooLarge, typeTooLarge, fmt.Sprintf("request body exceeds --max-payload-size %d bytes", s.cfg.MaxPayloadSize))
			return
		}
		d, err := s.r.Route(&router.Request{})
		if err != nil {
			writeError(w, http.StatusServiceUnavailable, typeUnavailable, err.Error())
			return
		}
		t := d.Regular
		resp, ue := send(req.Context(), s.upstream(router.Regular), &upstreamRequest{method: http.MethodPost, worker: t.URL(), path: path, body: raw, hdr: s.forwardHeaders(req), role: "regular"}, nil)
		if ue != nil {
			d.Done(router.Regular, legOutcome(ue))
			writeError(w, ue.clientStatus(), wire.TypeUpstream, ue.Error())
			return
		}
		defer resp.Body.Close()
		copyResponseHeaders(w.Header(), resp.Header)
		w.WriteHeader(resp.StatusCode)
		_, err = io.Copy(w, resp.Body)
		if err != nil {
			d.Done(router.Regular, router.Cancelled)
			return
		}
		d.Done(router.Regular, router.Success)
	}
}

// firstHealthy returns the URL of the first available worker of role, or "".
func (s *Server) firstHealthy(role router.Role) string {
	for _, t := range s.r.Targets() {
		if t.Role == role && t.Healthy {
			return t.URL
		}
	}
	return ""
}

// infoRole is the role whose workers answer informational GETs: prefill in PD mode.
func (s *Server) infoRole() router.Role {
	if s.r.PD() {
		return router.Prefill
	}
	return router.Regular
}

// proxyGet forwards an informational GET to the first healthy (prefill) worker.
func (s *Server) proxyGet(path string) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		u := s.firstHealthy(s.infoRole())
		if u == "" {
			writeError(w, http.StatusServiceUnavailable, typeUnavailable, fmt.Sprintf("no healthy %s worker to answer %s", s.infoRole(), path))
			return
		}
		resp, ue := send(req.Context(), clientDoer{s.admin}, &upstreamRequest{method: http.MethodGet, worker: u, path: path, hdr: s.forwardHeaders(req), role: s.infoRole().String()}, nil)
		if ue != nil {
			writeError(w, ue.clientStatus(), wire.TypeUpstream, ue.Error())
			return
		}
		defer resp.Body.Close()
		copyResponseHeaders(w.Header(), resp.Header)
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}
}

// readiness answers 200 with healthy/total counts, 503 when requests cannot be routed.
func (s *Server) readiness(w http.ResponseWriter, _ *http.Request) {
	counts := map[string]map[string]int{}
	for _, wi := range s.r.Workers() {
		c := counts[wi.Role.String()]
		if c == nil {
			c = map[string]int{"healthy": 0, "total": 0, "draining": 0}
			counts[wi.Role.String()] = c
		}
		// Under --dp-aware every view counts DP ranks, as /workers and /get_loads list them
		// (and as the Model Gateway registers them): each rank has its worker's verdict.
		n := max(wi.DPSize, 1)
		switch {
		case wi.State == router.WorkerDraining: // removed: not in the total
			c["draining"] += n
		case wi.Healthy:
			c["healthy"] += n
			c["total"] += n
		default:
			c["total"] += n
		}
	}
	status, state := http.StatusOK, "ready"
	if !s.r.Ready() {
		status, state = http.StatusServiceUnavailable, "not ready"
	}
	body := map[string]any{"status": state, "workers": counts}
	if s.kv != nil {
		kr := s.kv.readiness(time.Now())
		body["kv_events"] = kr
		if kr.WarmingUp && status == http.StatusOK {
			// The index only knows blocks stored since this replica subscribed: let it hear
			// from every worker first (bounded by --kv-events-warmup-secs).
			status, body["status"] = http.StatusServiceUnavailable, "warming up"
		}
	}
	writeJSON(w, status, body)
}

// loadEntry is one element of /get_loads (SPEC §2).
type loadEntry struct {
	Worker  string `json:"worker"`
	Target  string `json:"target"`
	Role    string `json:"role"`
	DPRank  *int   `json:"dp_rank"`
	Load    int64  `json:"load"`
	Healthy bool   `json:"healthy"`
}

// getLoads reports the router's own in-flight counts per target.
func (s *Server) getLoads(w http.ResponseWriter, _ *http.Request) {
	out := []loadEntry{}
	for _, t := range s.r.Targets() {
		e := loadEntry{Worker: router.RedactURL(t.URL), Target: router.RedactURL(t.Name), Role: t.Role.String(), Load: t.Load, Healthy: t.Healthy}
		if t.Rank >= 0 {
			r := t.Rank
			e.DPRank = &r
		}
		out = append(out, e)
	}
	writeJSON(w, http.StatusOK, map[string]any{"workers": out})
}

// fanOut runs method path on every worker concurrently and returns the failures by URL.
func (s *Server) fanOut(ctx context.Context, method, path string, urls []string) map[string]string {
	var mu sync.Mutex
	failed := map[string]string{}
	var wg sync.WaitGroup
	for _, u := range urls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var body []byte
			if method == http.MethodPost {
				body = []byte("{}")
			}
			resp, ue := send(ctx, clientDoer{s.admin}, &upstreamRequest{method: method, worker: u, path: path, body: body, role: "worker"}, nil)
			if ue == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return
			}
			mu.Lock()
			failed[u] = ue.Error()
			mu.Unlock()
		}()
	}
	wg.Wait()
	return failed
}

// workerURLs lists the registered workers (not the draining ones: they are on their way out).
func (s *Server) workerURLs() []string {
	var urls []string
	for _, w := range s.r.Workers() {
		if w.State != router.WorkerDraining {
			urls = append(urls, w.URL)
		}
	}
	return urls
}

// flushCache fans POST /flush_cache out to every worker and resets the router's cache-aware
// trees: 200, or 206 listing the failures.
func (s *Server) flushCache(w http.ResponseWriter, req *http.Request) {
	urls := s.workerURLs()
	failed := s.fanOut(req.Context(), http.MethodPost, "/flush_cache", urls)
	// The router's approximate trees describe the workers' caches: forget them too (as the
	// simulator does), or every replayed prompt would be routed to a cache that is gone.
	s.r.ResetTrees()
	if len(failed) == 0 {
		writeJSON(w, http.StatusOK, map[string]any{"flushed": len(urls)})
		return
	}
	shown := make(map[string]string, len(failed))
	for u, why := range failed {
		shown[router.RedactURL(u)] = redactIn(why, u)
	}
	writeJSON(w, http.StatusPartialContent, map[string]any{"flushed": len(urls) - len(failed), "failed": shown})
}

// healthGenerate probes a worker (PD: a prefill and a decode worker) with /health_generate.
func (s *Server) healthGenerate(w http.ResponseWriter, req *http.Request) {
	roles := []router.Role{router.Regular}
	if s.r.PD() {
		roles = []router.Role{router.Prefill, router.Decode}
	}
	var urls []string
	for _, role := range roles {
		u := s.firstHealthy(role)
		if u == "" {
			writeError(w, http.StatusServiceUnavailable, typeUnavailable, fmt.Sprintf("no healthy %s worker", role))
			return
		}
		urls = append(urls, u)
	}
	shown := make([]string, len(urls))
	for i, u := range urls {
		shown[i] = router.RedactURL(u)
	}
	if failed := s.fanOut(req.Context(), http.MethodGet, "/health_generate", urls); len(failed) > 0 {
		out := make(map[string]string, len(failed))
		for u, why := range failed {
			out[router.RedactURL(u)] = redactIn(why, u)
		}
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "unhealthy", "failed": out})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "healthy", "workers": shown})
}

// workerJSON is a worker as /workers lists it, and what POST /workers accepts.
type workerJSON struct {
	ID            string `json:"id,omitempty"` // stable per URL (workerID): /workers/{id} works as /workers/{url}
	URL           string `json:"url"`
	WorkerType    string `json:"worker_type"`
	BootstrapPort *int   `json:"bootstrap_port"`
	DPSize        int    `json:"dp_size,omitempty"`
	// DPRank is set on the per-rank entries /workers lists under --dp-aware (URL "url@rank").
	DPRank    *int   `json:"dp_rank,omitempty"`
	Healthy   bool   `json:"healthy"`
	IsHealthy bool   `json:"is_healthy"` // sgl-router's name for healthy
	State     string `json:"state"`      // starting, healthy, unhealthy, breaker_open or draining: the one verdict every view shows
	Load      int64  `json:"load"`
	Breaker   string `json:"circuit_breaker"`
	// LoadSource is where the router reads the worker's engine load (v1_loads, metrics or
	// none; absent before the first poll or with polling off) and LoadReportAgeMs how old its
	// latest report is.
	LoadSource      string   `json:"load_source,omitempty"`
	LoadReportAgeMs *float64 `json:"load_report_age_ms,omitempty"`
}

func toWorkerJSON(wi router.WorkerInfo) workerJSON {
	return workerJSON{ID: workerID(wi.URL), URL: router.RedactURL(wi.URL), WorkerType: wi.Role.String(), BootstrapPort: wi.BootstrapPort, DPSize: wi.DPSize,
		Healthy: wi.Healthy, IsHealthy: wi.Healthy, State: string(wi.State), Load: wi.Load, Breaker: wi.Breaker.String()}
}

// toRankJSON is DP rank rank of the worker wi as /workers lists it under --dp-aware: one entry
// per rank, named "url@rank" with its own id, as the SGLang Model Gateway registers a DP-aware
// worker (sgl-router src/core/worker.rs, DPAwareWorkerBuilder: url() is "base@rank"; the
// registry and GET /workers hold one worker per rank; its e2e test
// py_test/e2e/test_regular_router.py test_dp_aware_worker_expansion_and_api_key expects
// /list_workers to give {url@0, url@1}). Each rank shares its worker's verdict and breaker;
// load is the rank's own.
func toRankJSON(wi router.WorkerInfo, rank int, load int64) workerJSON {
	e := toWorkerJSON(wi)
	name := router.TargetName(wi.URL, rank)
	e.ID, e.URL, e.DPRank, e.Load = workerID(name), router.RedactURL(name), &rank, load
	return e
}

// workerEntries lists the workers as /workers shows them: one entry per worker, or per DP
// rank of a DP-aware worker (so its total matches /readiness and /get_loads).
func (s *Server) workerEntries() []workerJSON {
	workers := s.r.Workers()
	now := time.Now()
	var loads map[string]int64
	out := make([]workerJSON, 0, len(workers))
	for _, wi := range workers {
		start := len(out)
		if wi.DPSize == 0 {
			out = append(out, toWorkerJSON(wi))
		} else {
			if loads == nil {
				loads = map[string]int64{}
				for _, t := range s.r.Targets() {
					loads[t.Name] = t.Load
				}
			}
			for rank := range wi.DPSize {
				out = append(out, toRankJSON(wi, rank, loads[router.TargetName(wi.URL, rank)]))
			}
		}
		if s.loads != nil {
			source, age := s.loads.status(wi.URL, now)
			for i := start; i < len(out); i++ {
				out[i].LoadSource = source
				if age >= 0 {
					ms := float64(age.Microseconds()) / 1000
					out[i].LoadReportAgeMs = &ms
				}
			}
		}
	}
	return out
}

// workerID is a worker's id in the worker API: a UUID-shaped name derived from its URL
// (SHA-1, as a name-based UUID), so it is the same across restarts and replicas, and
// /workers/{id} reaches the worker as /workers/{url} does (the SGLang Model Gateway's clients
// address workers by id).
func workerID(u string) string {
	h := sha1.Sum([]byte("pdrouter-worker:" + u))
	h[6] = h[6]&0x0f | 0x50 // version 5
	h[8] = h[8]&0x3f | 0x80 // RFC 4122 variant
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

func (s *Server) listWorkers(w http.ResponseWriter, _ *http.Request) {
	out := s.workerEntries()
	stats := map[string]int{"prefill_count": 0, "decode_count": 0, "regular_count": 0}
	for _, e := range out {
		stats[e.WorkerType+"_count"]++
	}
	writeJSON(w, http.StatusOK, map[string]any{"workers": out, "total": len(out), "stats": stats})
}

// workerByPath finds the worker /workers/{url-or-id} names: by its URL or id, or, under
// --dp-aware, by one of its ranks' names ("url@rank") or ids, which name the rank (rank ≥ 0;
// -1 for the worker itself). name is the worker URL or rank name the path addressed.
func (s *Server) workerByPath(req *http.Request) (wi router.WorkerInfo, rank int, name string, ok bool) {
	u := workerPathURL(req)
	for _, wi := range s.r.Workers() {
		if wi.URL == u || workerID(wi.URL) == u {
			return wi, -1, wi.URL, true
		}
		for r := range wi.DPSize {
			if n := router.TargetName(wi.URL, r); n == u || workerID(n) == u {
				return wi, r, n, true
			}
		}
	}
	return router.WorkerInfo{}, -1, u, false
}

func (s *Server) getWorker(w http.ResponseWriter, req *http.Request) {
	wi, rank, name, ok := s.workerByPath(req)
	if !ok {
		writeError(w, http.StatusNotFound, wire.TypeInvalidRequest, fmt.Sprintf("worker %s is not registered", router.RedactURL(name)))
		return
	}
	if rank >= 0 {
		for _, e := range s.workerEntries() {
			if e.ID == workerID(name) {
				writeJSON(w, http.StatusOK, e)
				return
			}
		}
	}
	writeJSON(w, http.StatusOK, toWorkerJSON(wi))
}

// workerPathURL reads the worker URL from /workers/{url...}, URL-encoded or not.
func workerPathURL(req *http.Request) string {
	u := req.PathValue("url")
	if dec, err := url.PathUnescape(u); err == nil {
		u = dec
	}
	// A raw "http://x" in a path is cleaned to "http:/x" by some clients: restore it.
	for _, scheme := range []string{"http:/", "https:/"} {
		if strings.HasPrefix(u, scheme) && !strings.HasPrefix(u, scheme+"/") {
			u = scheme + "/" + u[len(scheme):]
		}
	}
	return strings.TrimSuffix(u, "/")
}

// deleteWorker handles DELETE /workers/{url-or-id}: 202 {"status": "accepted", "worker_id"},
// as the SGLang Model Gateway answers (smg model_gateway/src/core/worker_service.rs,
// DeleteWorkerResult, where the removal is queued as a job). Here the worker is out of
// routing by the time of the answer, draining while requests to it are in flight. A DP rank
// ("url@rank" or its id) removes its whole worker: ranks are not removed one by one.
func (s *Server) deleteWorker(w http.ResponseWriter, req *http.Request) {
	wi, _, name, ok := s.workerByPath(req)
	u := name
	if ok {
		u = wi.URL
	}
	s.removeWorker(w, u, workerID(name), http.StatusAccepted)
}

// removeWorker removes the worker with URL u and answers okStatus: 202 for DELETE /workers,
// 200 for the legacy POST /remove_worker. id is the worker_id answered: the id of what the
// client named.
func (s *Server) removeWorker(w http.ResponseWriter, u, id string, okStatus int) {
	wi, err := s.remove(u, "api")
	if err != nil {
		writeError(w, http.StatusNotFound, wire.TypeInvalidRequest, err.Error())
		return
	}
	out := map[string]any{"status": "accepted", "worker_id": id, "url": router.RedactURL(u), "message": "worker removed"}
	if wi.State == router.WorkerDraining { // requests in flight: it goes when they finish
		out["state"], out["load"] = string(router.WorkerDraining), wi.Load
		out["message"] = fmt.Sprintf("worker draining: removed once its %d in-flight requests finish", wi.Load)
	}
	writeJSON(w, okStatus, out)
}

// addWorkerJSON handles POST /workers {"url", "worker_type", "bootstrap_port"}.
func (s *Server) addWorkerJSON(w http.ResponseWriter, req *http.Request) {
	var in workerJSON
	dec := json.NewDecoder(io.LimitReader(req.Body, 1<<20))
	if err := dec.Decode(&in); err != nil {
		writeError(w, http.StatusBadRequest, wire.TypeInvalidRequest, "POST /workers wants {\"url\", \"worker_type\", \"bootstrap_port\"}: "+err.Error())
		return
	}
	s.addWorker(w, req.Context(), in.URL, in.WorkerType, in.BootstrapPort, http.StatusAccepted)
}

// addWorkerLegacy handles POST /add_worker?url=…[&role=prefill&bootstrap_port=N].
func (s *Server) addWorkerLegacy(w http.ResponseWriter, req *http.Request) {
	q := req.URL.Query()
	var port *int
	if p := q.Get("bootstrap_port"); p != "" && !strings.EqualFold(p, "none") {
		n, err := strconv.Atoi(p)
		if err != nil {
			writeError(w, http.StatusBadRequest, wire.TypeInvalidRequest, fmt.Sprintf("bootstrap_port %q is not a number", p))
			return
		}
		port = &n
	}
	s.addWorker(w, req.Context(), q.Get("url"), q.Get("role"), port, http.StatusOK)
}

func (s *Server) removeWorkerLegacy(w http.ResponseWriter, req *http.Request) {
	u := strings.TrimSuffix(req.URL.Query().Get("url"), "/")
	s.removeWorker(w, u, workerID(u), http.StatusOK)
}

// listWorkersLegacy answers GET /list_workers {"urls"}: one per worker, or per DP rank
// ("url@rank") under --dp-aware, as sgl-router lists them.
func (s *Server) listWorkersLegacy(w http.ResponseWriter, _ *http.Request) {
	urls := []string{}
	for _, e := range s.workerEntries() {
		if e.State != string(router.WorkerDraining) {
			urls = append(urls, e.URL)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"urls": urls})
}

// addWorker registers a worker at run time and answers okStatus: POST /workers answers 202
// with the worker's id, as the SGLang Model Gateway does (here the worker is registered, and
// health-probed, by the time it answers); the legacy /add_worker answers 200.
func (s *Server) addWorker(w http.ResponseWriter, ctx context.Context, u, roleName string, port *int, okStatus int) {
	role := router.Regular
	if s.r.PD() {
		role = router.Decode
	}
	if roleName != "" {
		r, err := router.ParseRole(roleName)
		if err != nil {
			writeError(w, http.StatusBadRequest, wire.TypeInvalidRequest, err.Error())
			return
		}
		role = r
	}
	u = strings.TrimSuffix(u, "/")
	dp, err := s.AddWorker(ctx, u, role, port, "api")
	if err != nil {
		var re *registerError
		status := http.StatusBadRequest
		if errors.As(err, &re) {
			status = re.status
		}
		typ := wire.TypeInvalidRequest
		if status == http.StatusBadGateway {
			typ = wire.TypeUpstream
		}
		writeError(w, status, typ, err.Error())
		return
	}
	id := workerID(u)
	writeJSON(w, okStatus, map[string]any{"status": "accepted", "worker_id": id, "location": "/workers/" + id,
		"added": router.RedactURL(u), "url": router.RedactURL(u), "worker_type": role.String(), "dp_size": dp})
}

// apiProbeTimeout bounds the dp_size read of a worker added through the API, which has
// just answered its health probe (service discovery keeps --worker-startup-timeout-secs for
// workers still starting).
const apiProbeTimeout = 30 * time.Second

// registerError carries the HTTP status POST /workers answers for a failed registration.
type registerError struct {
	status int
	err    error
}

func (e *registerError) Error() string { return e.err.Error() }
func (e *registerError) Unwrap() error { return e.err }

// AddWorker registers a worker at run time: the URL checks of SPEC §1.7, --worker-url-allow,
// the dp_size probe under --dp-aware (waiting up to --worker-startup-timeout-secs for a
// starting worker, without holding up other registrations), then the router. POST /workers
// and Kubernetes service discovery both come through here; source ("api", "discovery") is
// logged. It returns the worker's dp_size (0 without --dp-aware).
func (s *Server) AddWorker(ctx context.Context, u string, role router.Role, port *int, source string) (int, error) {
	if err := router.CheckWorkerURL(u); err != nil {
		return 0, &registerError{http.StatusBadRequest, err}
	}
	if !s.allowedWorker(u) {
		return 0, &registerError{http.StatusForbidden, fmt.Errorf("worker %s is not allowed by --worker-url-allow", router.RedactURL(u))}
	}
	if source == "api" {
		// An operator adding a worker by hand learns at once when it does not answer, rather
		// than after a 600 s dp_size wait or from a "ready" router sending it traffic.
		if err := s.hc.check(ctx, u); err != nil {
			return 0, &registerError{http.StatusBadGateway, fmt.Errorf("worker %s does not answer: %w", router.RedactURL(u), redactErr(err, u))}
		}
		if s.cfg.DPAware {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, apiProbeTimeout)
			defer cancel()
		}
	}
	dp, err := s.dpSize(ctx, u, role)
	if err != nil {
		return 0, &registerError{http.StatusBadGateway, redactErr(err, u)}
	}
	// The core registers atomically (a worker with the URL of a draining one replaces it) and
	// emits the registration, which workerEvent logs.
	if err := s.r.AddWorker(router.WorkerSpec{URL: u, Role: role, BootstrapPort: port, DPSize: dp, Source: source}); err != nil {
		status := http.StatusBadRequest
		if strings.Contains(err.Error(), "already registered") {
			status = http.StatusConflict
		}
		return 0, &registerError{status, err}
	}
	return dp, nil
}

// DiscoveryEvent counts one service-discovery event (added, removed, skipped) for role.
func (s *Server) DiscoveryEvent(role router.Role, event string) {
	s.metrics.DiscoveryEvents.WithLabelValues(role.String(), event).Inc()
}

// allowedWorker applies --worker-url-allow (hosts or CIDRs; empty allows any).
func (s *Server) allowedWorker(raw string) bool {
	if len(s.cfg.WorkerURLAllow) == 0 {
		return true
	}
	u, err := url.Parse(raw)
	if err != nil {
		return false
	}
	host := u.Hostname()
	ip := net.ParseIP(host)
	for _, a := range s.cfg.WorkerURLAllow {
		if _, cidr, err := net.ParseCIDR(a); err == nil {
			if ip != nil && cidr.Contains(ip) {
				return true
			}
			continue
		}
		if strings.EqualFold(a, host) {
			return true
		}
	}
	return false
}
