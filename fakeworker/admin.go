package fakeworker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"time"

	"github.com/pdrouter/pdrouter/router/wire"
	"github.com/pdrouter/pdrouter/sim/engine"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// queryTimeout bounds admin round trips to the engine loop.
const queryTimeout = 5 * time.Second

// routes is the worker's HTTP API (SPEC §3).
func (w *Worker) routes() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range wire.Routes {
		mux.Handle(rt.String(), w.serveInference(rt))
	}
	mux.HandleFunc("GET /health", w.serveHealth)
	mux.HandleFunc("GET /health_generate", w.serveHealthGenerate)
	mux.HandleFunc("GET /get_server_info", w.serveServerInfo)
	mux.HandleFunc("GET /server_info", w.serveServerInfo)
	mux.HandleFunc("GET /get_model_info", w.serveModelInfo)
	mux.HandleFunc("GET /model_info", w.serveModelInfo)
	mux.HandleFunc("GET /v1/models", w.serveModels)
	mux.HandleFunc("GET /get_load", w.serveLoad)
	if !w.cfg.NoLoadReports {
		mux.HandleFunc("GET /v1/loads", w.serveV1Loads)
	}
	mux.HandleFunc("/flush_cache", w.serveFlush)
	mux.HandleFunc("POST /abort_request", w.serveAbort)
	mux.HandleFunc("GET /fakeworker/slow_factor", w.serveSlowFactor)
	mux.HandleFunc("POST /fakeworker/slow_factor", w.serveSlowFactor)
	mux.Handle("GET /metrics", promhttp.HandlerFor(w.metrics.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/", func(rw http.ResponseWriter, r *http.Request) {
		writeError(rw, http.StatusNotFound, "fakeworker: no route "+r.Method+" "+r.URL.Path)
	})
	return mux
}

// healthy reports whether health checks pass (false once --fail-health-after has elapsed).
func (w *Worker) healthy() bool {
	t := w.cfg.Failures.FailHealthAfter
	return t <= 0 || time.Since(w.started) < t
}

func (w *Worker) serveHealth(rw http.ResponseWriter, _ *http.Request) {
	if !w.healthy() {
		writeError(rw, http.StatusServiceUnavailable, "fakeworker: unhealthy (--fail-health-after "+w.cfg.Failures.FailHealthAfter.String()+")")
		return
	}
	rw.WriteHeader(http.StatusOK)
}

// serveHealthGenerate checks health and a round trip through the engine loop (SGLang runs a
// one-token generation).
func (w *Worker) serveHealthGenerate(rw http.ResponseWriter, r *http.Request) {
	if !w.healthy() {
		writeError(rw, http.StatusServiceUnavailable, "fakeworker: unhealthy (--fail-health-after "+w.cfg.Failures.FailHealthAfter.String()+")")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), queryTimeout)
	defer cancel()
	dead := false
	if !w.loop.query(ctx, func(l *loop, _ time.Time) { dead = l.srv.Dead() }) || dead {
		writeError(rw, http.StatusServiceUnavailable, "fakeworker: engine is not running")
		return
	}
	rw.WriteHeader(http.StatusOK)
}

// loads returns the engine's per-rank snapshot, or nil when the loop is gone.
func (w *Worker) loads(ctx context.Context) []engine.RankLoad {
	var out []engine.RankLoad
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	if !w.loop.query(ctx, func(l *loop, now time.Time) { out = l.srv.Loads(now) }) {
		return nil
	}
	return out
}

// maxTotalTokens and pageSize are the engine's KV capacity per rank and page size.
func (w *Worker) maxTotalTokens() int { return w.loop.srv.Config().MaxTotalTokens }

func (w *Worker) pageSize() int { return w.loop.srv.Config().PageSize }

// serveServerInfo answers as SGLang's /get_server_info: its server_args fields (SGLang's
// names) with the values this worker's engine runs with, the scheduler's max_total_num_tokens,
// and per-rank internal_states (http_server.py get_server_info merges the three). As in SGLang,
// under DP attention chunked_prefill_size and schedule_conservativeness are the per-rank values
// (server_args.py _handle_data_parallelism rewrites them), max_running_requests is the
// server's and internal_states[].effective_max_running_requests_per_dp each rank's. Values
// the engine does not model are null: mem_fraction_static of a preset or profile file (its
// KV capacity is its own), cuda_graph_max_bs when CUDA graphs are not modelled.
func (w *Worker) serveServerInfo(rw http.ResponseWriter, r *http.Request) {
	ec := w.loop.srv.Config() // set once at engine.New
	_, args, _ := w.cfg.engine()
	par := w.cfg.parallelism()
	maxRunning := ec.MaxRunningRequests
	if par.DPAttention {
		maxRunning *= ec.DPSize
	}
	var memFraction, graphMaxBS, maxTotalTokens any
	if args.MemFractionStatic > 0 {
		memFraction = args.MemFractionStatic
	}
	if ec.CUDAGraphMaxBS > 0 {
		graphMaxBS = ec.CUDAGraphMaxBS
	}
	if args.MaxTotalTokens > 0 {
		maxTotalTokens = args.MaxTotalTokens
	}
	conservativeness := ec.ScheduleConservativeness
	if conservativeness == 0 {
		conservativeness = 1 // the engine's 0 is SGLang's default
	}
	gpu := any(nil)
	if w.cfg.GPU != "" {
		gpu = w.cfg.GPU
	}
	states := make([]any, ec.DPSize)
	for i := range states {
		states[i] = map[string]any{"last_gen_throughput": 0.0, "effective_max_running_requests_per_dp": ec.MaxRunningRequests,
			"memory_usage": map[string]any{"token_capacity": ec.MaxTotalTokens}}
	}
	info := map[string]any{
		"model_path":                      w.cfg.ModelPath,
		"tokenizer_path":                  w.cfg.ModelPath,
		"served_model_name":               w.cfg.ModelPath,
		"host":                            w.cfg.Host,
		"port":                            w.ln.Addr().(*net.TCPAddr).Port,
		"tp_size":                         w.cfg.TPSize,
		"dp_size":                         w.cfg.DPSize,
		"ep_size":                         w.cfg.EPSize,
		"enable_dp_attention":             par.DPAttention,
		"disaggregation_mode":             disaggregationMode(w.cfg.Mode),
		"disaggregation_bootstrap_port":   w.infoBootstrapPort(),
		"disaggregation_transfer_backend": "fake",
		"page_size":                       ec.PageSize,
		"max_total_num_tokens":            ec.MaxTotalTokens,
		"max_total_tokens":                maxTotalTokens,
		"chunked_prefill_size":            ec.ChunkedPrefillSize,
		"max_running_requests":            maxRunning,
		"cuda_graph_max_bs":               graphMaxBS,
		"mem_fraction_static":             memFraction,
		"schedule_conservativeness":       conservativeness,
		"schedule_policy":                 ec.SchedulePolicy,
		"disable_overlap_schedule":        ec.DisableOverlap,
		"enable_mixed_chunk":              ec.MixedChunk,
		"enable_hierarchical_cache":       ec.HostCacheTokens > 0,
		"hicache_ratio":                   cmp.Or(w.cfg.Args.HiCacheRatio, 2), // SGLang's default, unused unless enabled
		"bootstrap_timeout_s":             w.cfg.BootstrapTimeout.Seconds(),
		"profile":                         ec.Profile.Name,
		"gpu":                             gpu,
		"speedup":                         w.cfg.Speedup,
		"version":                         serverVersion,
		"internal_states":                 states,
		"kv_events_config":                nullIfEmpty(w.kvEventsConfigJSON()),
		"kv_events":                       w.kvEventsInfo(),
	}
	// Speculative decoding, as SGLang reports its arguments (null when off).
	info["speculative_algorithm"], info["speculative_num_steps"], info["speculative_eagle_topk"], info["speculative_num_draft_tokens"] = nil, nil, nil, nil
	if sp := ec.Spec; sp.On() {
		info["speculative_algorithm"], info["speculative_num_steps"], info["speculative_eagle_topk"], info["speculative_num_draft_tokens"] = sp.Algorithm, sp.NumSteps, sp.EagleTopK, sp.DraftTokens
	}
	if ls := w.loads(r.Context()); ls != nil {
		info["load"] = loadEntries(ls)
	}
	body, _ := json.Marshal(info)
	writeJSON(rw, http.StatusOK, body)
}

// kvEventsInfo is /server_info's kv_events block (sglang PR #25844, http_server.py
// _resolve_kv_events_block): the publisher, the endpoint's host as configured (a wildcard stays
// a wildcard: the consumer uses the worker's host), the base port (rank r publishes on base + r),
// the topic, the block size (the page size subscribers hash at) and the DP size; nil (JSON
// null) when events are off. SGLang does not advertise the replay socket; fakeworker adds
// replay_endpoint_host and replay_endpoint_port_base when replay_endpoint is set (its own
// extension, so a subscriber on fakeworkers can find it).
func (w *Worker) kvEventsInfo() map[string]any {
	if w.kv == nil {
		return nil
	}
	host, _, _ := splitTCPEndpoint(w.kvCfg.Endpoint)
	info := map[string]any{
		"publisher":          w.kvCfg.Publisher,
		"endpoint_host":      host,
		"endpoint_port_base": w.kv.ranks[0].pubPort,
		"topic":              w.kvCfg.Topic,
		"block_size":         w.kv.page,
		"dp_size":            len(w.kv.ranks),
	}
	if w.kvCfg.ReplayEndpoint != nil {
		rh, _, _ := splitTCPEndpoint(*w.kvCfg.ReplayEndpoint)
		info["replay_endpoint_host"] = rh
		info["replay_endpoint_port_base"] = w.kv.ranks[0].repPort
	}
	return info
}

func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// infoBootstrapPort is disaggregation_bootstrap_port: the bound port on a prefill worker, the
// SGLang default elsewhere.
func (w *Worker) infoBootstrapPort() int {
	if p := w.BootstrapPort(); p != 0 {
		return p
	}
	return DefaultBootstrapPort
}

func (w *Worker) serveModelInfo(rw http.ResponseWriter, _ *http.Request) {
	body, _ := json.Marshal(map[string]any{
		"model_path": w.cfg.ModelPath, "tokenizer_path": w.cfg.ModelPath, "is_generation": true,
		"preferred_sampling_params": nil, "weight_version": "default", "has_image_understanding": false,
	})
	writeJSON(rw, http.StatusOK, body)
}

func (w *Worker) serveModels(rw http.ResponseWriter, _ *http.Request) {
	body, _ := json.Marshal(map[string]any{"object": "list", "data": []any{map[string]any{
		"id": w.cfg.ModelPath, "object": "model", "created": w.started.Unix(), "owned_by": "sglang",
		"root": w.cfg.ModelPath, "max_model_len": w.maxTotalTokens(),
	}}})
	writeJSON(rw, http.StatusOK, body)
}

// serveFlush empties the prefix caches; like SGLang it refuses (400) while requests are live.
func (w *Worker) serveFlush(rw http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		writeError(rw, http.StatusMethodNotAllowed, "fakeworker: /flush_cache takes GET or POST")
		return
	}
	ok := false
	ctx, cancel := context.WithTimeout(r.Context(), queryTimeout)
	defer cancel()
	if !w.loop.query(ctx, func(l *loop, _ time.Time) { ok = l.srv.FlushCache() }) {
		writeError(rw, http.StatusServiceUnavailable, "fakeworker: engine is not running")
		return
	}
	rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if !ok {
		rw.WriteHeader(http.StatusBadRequest)
		rw.Write([]byte("Cache not flushed. Please check for pending requests. (There are requests still running.)\n"))
		return
	}
	rw.WriteHeader(http.StatusOK)
	rw.Write([]byte("Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n"))
}

// serveAbort aborts the live request with the body's rid ({"rid": …}), or every live request
// with {"abort_all": true}. Unknown rids are ignored, as in SGLang; the answer is always 200.
func (w *Worker) serveAbort(rw http.ResponseWriter, r *http.Request) {
	raw, err := readBody(rw, r, 1<<16)
	var req struct {
		RID      string `json:"rid"`
		AbortAll bool   `json:"abort_all"`
	}
	if err == nil {
		err = json.Unmarshal(raw, &req)
	}
	if err != nil {
		writeError(rw, http.StatusBadRequest, "fakeworker: /abort_request body must be {\"rid\": string}: "+err.Error())
		return
	}
	var rooms []uint64
	w.ridMu.Lock()
	if req.AbortAll {
		for _, room := range w.rids {
			rooms = append(rooms, room)
		}
	} else if room, ok := w.rids[req.RID]; ok {
		rooms = append(rooms, room)
	}
	w.ridMu.Unlock()
	if len(rooms) > 0 {
		w.loop.do(r.Context(), func(l *loop, now time.Time) {
			for _, room := range rooms {
				l.srv.Abort(now, room, abortByRequest)
			}
		})
	}
	rw.WriteHeader(http.StatusOK)
}

// SetSlowFactor makes the worker f times slower than its model from now on, as
// --slow-factor f would have from the start (Failures.SlowFactor, changed at runtime): the
// engine steps that begin after it take f× the model's time, a step under way ends when it
// was due. Failure injection: a worker degrading behind a router's back. POST
// /fakeworker/slow_factor does it over HTTP. It fails unless f > 0, or when the engine loop
// has stopped.
func (w *Worker) SetSlowFactor(ctx context.Context, f float64) error {
	if !(f > 0) || math.IsInf(f, 0) {
		return fmt.Errorf("fakeworker: slow factor %g must be > 0", f)
	}
	var err error
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	if !w.loop.query(ctx, func(l *loop, _ time.Time) {
		if err = l.srv.SetSpeedup(w.cfg.Speedup / f); err == nil {
			w.slow = f
		}
	}) {
		return errors.New("fakeworker: engine is not running")
	}
	return err
}

// SlowFactor is the worker's slow factor now (--slow-factor, or the last SetSlowFactor).
func (w *Worker) SlowFactor(ctx context.Context) (float64, error) {
	var f float64
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	if !w.loop.query(ctx, func(*loop, time.Time) { f = w.slow }) {
		return 0, errors.New("fakeworker: engine is not running")
	}
	return f, nil
}

// serveSlowFactor answers GET /fakeworker/slow_factor with {"slow_factor": f}, and sets it
// on POST with that body (SetSlowFactor), answering the same; a body without a positive
// slow_factor is 400. fakeworker's own route (SGLang has no such knob), outside SGLang's API.
func (w *Worker) serveSlowFactor(rw http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		raw, err := readBody(rw, r, 1<<10)
		var req struct {
			SlowFactor *float64 `json:"slow_factor"`
		}
		if err == nil {
			err = json.Unmarshal(raw, &req)
		}
		if err == nil && req.SlowFactor == nil {
			err = errors.New("no slow_factor")
		}
		if err == nil && !(*req.SlowFactor > 0) {
			err = fmt.Errorf("slow_factor %g must be > 0", *req.SlowFactor)
		}
		if err != nil {
			writeError(rw, http.StatusBadRequest, "fakeworker: /fakeworker/slow_factor body must be {\"slow_factor\": number > 0}: "+err.Error())
			return
		}
		if err := w.SetSlowFactor(r.Context(), *req.SlowFactor); err != nil {
			writeError(rw, http.StatusServiceUnavailable, err.Error())
			return
		}
		w.log.Info("slow factor changed", "slow_factor", *req.SlowFactor)
	}
	f, err := w.SlowFactor(r.Context())
	if err != nil {
		writeError(rw, http.StatusServiceUnavailable, err.Error())
		return
	}
	body, _ := json.Marshal(map[string]float64{"slow_factor": f})
	writeJSON(rw, http.StatusOK, body)
}

// DropKVEventBatches loses each rank's next n KV-event batches on the way to subscribers:
// they are sequenced and kept for replay but not sent, as a message dropped at the high-water
// mark or a network blip would be — the subscriber sees a sequence gap at the next batch.
// Failure injection for tests; a no-op without events.
func (w *Worker) DropKVEventBatches(n int) {
	if w.kv == nil {
		return
	}
	for _, kr := range w.kv.ranks {
		kr.drop.Store(int64(n))
	}
}

// RestartKVEventStream makes every rank's publisher start over before its next batch, as a
// restarted SGLang scheduler's does: sequence numbers from 0 and an empty replay buffer (the
// cache itself is kept). Failure injection for tests; a no-op without events.
func (w *Worker) RestartKVEventStream() {
	if w.kv == nil {
		return
	}
	for _, kr := range w.kv.ranks {
		kr.reset.Store(true)
	}
}

// kvEventsConfigJSON is --kv-events-config as the worker runs it: a port 0 (the OS picks) is
// reported as the port bound, as a real server's configuration always names its ports.
func (w *Worker) kvEventsConfigJSON() string {
	if w.kv == nil {
		return w.cfg.KVEventsConfig
	}
	c := w.kvCfg
	host, _, _ := splitTCPEndpoint(c.Endpoint)
	c.Endpoint = tcpEndpoint(host, w.kv.ranks[0].pubPort)
	if c.ReplayEndpoint != nil {
		rh, _, _ := splitTCPEndpoint(*c.ReplayEndpoint)
		r := tcpEndpoint(rh, w.kv.ranks[0].repPort)
		c.ReplayEndpoint = &r
	}
	b, err := json.Marshal(c)
	if err != nil {
		return w.cfg.KVEventsConfig
	}
	return string(b)
}
