package server

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/pdrouter/pdrouter/router/wire"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler returns the router's HTTP API (SPEC §2). A known path asked with a method it does
// not take answers 405 with Allow, an unknown path 404. /workers/{url} takes the worker URL raw
// (http://host:port, which net/http's path cleaning would redirect) or percent-encoded.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	allow := map[string][]string{} // path → methods, for 405
	handle := func(method, path string, h http.Handler) {
		mux.Handle(method+" "+path, h)
		allow[path] = append(allow[path], method)
	}
	for _, r := range wire.Routes {
		handle("POST", r.String(), s.protected(s.inference(r)))
	}
	for _, p := range []string{"/v1/embeddings", "/v1/rerank", "/v1/responses", "/v1/classify", "/v1/score"} {
		handle("POST", p, s.protected(s.passthrough(p)))
	}
	for _, p := range []string{"/v1/models", "/get_model_info", "/get_server_info"} {
		handle("GET", p, s.protected(s.proxyGet(p)))
	}
	ok := func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }
	handle("GET", "/health", http.HandlerFunc(ok))
	handle("GET", "/liveness", http.HandlerFunc(ok))
	handle("GET", "/readiness", http.HandlerFunc(s.readiness))
	handle("GET", "/health_generate", s.protected(http.HandlerFunc(s.healthGenerate)))
	handle("GET", "/get_loads", s.protected(http.HandlerFunc(s.getLoads)))
	handle("GET", "/get_router_config", s.protected(http.HandlerFunc(s.routerConfig)))
	handle("POST", "/flush_cache", s.protected(http.HandlerFunc(s.flushCache)))
	handle("GET", "/workers", s.protected(http.HandlerFunc(s.listWorkers)))
	handle("POST", "/workers", s.protected(http.HandlerFunc(s.addWorkerJSON)))
	handle("POST", "/add_worker", s.protected(http.HandlerFunc(s.addWorkerLegacy)))
	handle("POST", "/remove_worker", s.protected(http.HandlerFunc(s.removeWorkerLegacy)))
	handle("GET", "/list_workers", s.protected(http.HandlerFunc(s.listWorkersLegacy)))
	getWorker, deleteWorker := s.protected(http.HandlerFunc(s.getWorker)), s.protected(http.HandlerFunc(s.deleteWorker))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if methods := allow[r.URL.Path]; len(methods) > 0 {
			w.Header().Set("Allow", strings.Join(methods, ", "))
			writeError(w, http.StatusMethodNotAllowed, wire.TypeInvalidRequest,
				fmt.Sprintf("%s %s: method not allowed (allowed: %s)", r.Method, r.URL.Path, strings.Join(methods, ", ")))
			return
		}
		writeError(w, http.StatusNotFound, wire.TypeInvalidRequest, fmt.Sprintf("no route %s %s", r.Method, r.URL.Path))
	})
	// routeOf is the route label of a path in requests_total: known paths as such, the rest
	// "other" (so a scanner cannot grow the label set).
	routeOf := func(path string) string {
		switch {
		case strings.HasPrefix(path, "/workers/"):
			return "/workers/{url}"
		case len(allow[path]) == 0:
			return "other"
		}
		return path
	}
	// /workers/{url}: before the mux, whose path cleaning answers a raw "http://…" with 307.
	routed := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		w = sw
		defer func() {
			code := sw.status
			if code == 0 {
				code = http.StatusOK
			}
			s.metrics.countResponse(routeOf(r.URL.Path), code, sw.streamErr)
		}()
		if rest, found := strings.CutPrefix(r.URL.EscapedPath(), "/workers/"); found && rest != "" {
			r.SetPathValue("url", rest)
			switch r.Method {
			case http.MethodGet:
				getWorker.ServeHTTP(w, r)
			case http.MethodDelete:
				deleteWorker.ServeHTTP(w, r)
			default:
				w.Header().Set("Allow", "GET, DELETE")
				writeError(w, http.StatusMethodNotAllowed, wire.TypeInvalidRequest,
					fmt.Sprintf("%s /workers/{url}: method not allowed (allowed: GET, DELETE)", r.Method))
			}
			return
		}
		mux.ServeHTTP(w, r)
	})
	return s.cors(s.accessLog(routed))
}

// MetricsHandler serves /metrics for the --prometheus-port listener.
func (s *Server) MetricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	return mux
}

// protected requires the API key (constant-time compare) when one is configured (SPEC §1.7).
func (s *Server) protected(h http.Handler) http.Handler {
	if s.cfg.APIKey == "" {
		return h
	}
	want := []byte("Bearer " + s.cfg.APIKey)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			s.metrics.Errors.WithLabelValues("unauthorized").Inc()
			writeError(w, http.StatusUnauthorized, typeAuth, "missing or invalid API key: send Authorization: Bearer <key>")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// cors answers preflights and sets CORS headers (any origin when none are configured).
func (s *Server) cors(h http.Handler) http.Handler {
	allowed := map[string]bool{}
	for _, o := range s.cfg.CORSAllowedOrigins {
		allowed[o] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin != "" {
			switch {
			case len(allowed) == 0:
				w.Header().Set("Access-Control-Allow-Origin", "*")
			case allowed[origin]:
				w.Header().Set("Access-Control-Allow-Origin", origin)
				w.Header().Add("Vary", "Origin")
			}
			w.Header().Set("Access-Control-Expose-Headers", "x-request-id")
		}
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			w.Header().Set("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS")
			w.Header().Set("Access-Control-Allow-Headers", "content-type, authorization, x-request-id")
			w.Header().Set("Access-Control-Max-Age", "3600")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// statusWriter records the status for the access log and the metrics, and keeps Flush working.
type statusWriter struct {
	http.ResponseWriter
	status    int
	streamErr int // the status of the error event a stream sent with status 200 ended in
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// accessLog writes one line per request when --access-log is set: time, method, path,
// status, duration and request id. Bodies and secrets are never logged.
func (s *Server) accessLog(h http.Handler) http.Handler {
	if s.access == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		var line string
		path := redactPath(r.URL.Path) // DELETE /workers/{url} names a worker URL
		ms := float64(time.Since(start).Microseconds()) / 1000
		if s.cfg.LogJSON { // --log-json: one JSON object per request, as every other line
			b, _ := json.Marshal(struct {
				Time       string  `json:"time"`
				Msg        string  `json:"msg"`
				Method     string  `json:"method"`
				Path       string  `json:"path"`
				Status     int     `json:"status"`
				DurationMs float64 `json:"duration_ms"`
				ID         string  `json:"id"`
			}{start.UTC().Format(time.RFC3339Nano), "access", r.Method, path, sw.status, ms, w.Header().Get("X-Request-Id")})
			line = string(b) + "\n"
		} else {
			line = fmt.Sprintf("%s %s %s %d %.3fms id=%s\n", start.UTC().Format(time.RFC3339Nano), r.Method, path,
				sw.status, ms, strings.ReplaceAll(w.Header().Get("X-Request-Id"), " ", "_"))
		}
		s.amu.Lock()
		_, _ = s.access.Write([]byte(line))
		s.amu.Unlock()
	})
}

// routerConfig answers GET /get_router_config (a pdrouter extension): the effective settings
// as `router serve --print-config` prints them, secrets redacted, as JSON. `router bench`
// records it in results.json so `router report --compare` can name the settings that differ.
func (s *Server) routerConfig(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.cfg.Redacted())
}
