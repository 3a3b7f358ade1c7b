package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/pdrouter/pdrouter/router"
)

// serverInfo is the part of a worker's /get_server_info the router reads.
type serverInfo struct {
	DPSize                      *int    `json:"dp_size"`
	DisaggregationMode          *string `json:"disaggregation_mode"`
	DisaggregationBootstrapPort *int    `json:"disaggregation_bootstrap_port"`
	ModelPath                   string  `json:"model_path"`
}

// permanentError marks probe failures that retrying cannot fix.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// serverInfoProbe reads a worker's /get_server_info before it is registered — under
// --dp-aware, for its dp_size — retrying while the worker starts (SPEC §1.1). (Finding
// workers is Kubernetes service discovery, router/server/kube.)
type serverInfoProbe struct {
	// Client sends the requests; its timeout bounds one attempt (sgl-router: 10 s).
	Client *http.Client
	// APIKey, when set, is sent as a bearer token.
	APIKey string
	// Timeout bounds the whole wait for a starting worker (--worker-startup-timeout-secs).
	Timeout time.Duration
	// Interval separates attempts (--worker-startup-check-interval).
	Interval time.Duration
	// After is time.After; tests inject an instant one.
	After func(time.Duration) <-chan time.Time
}

// raw fetches {url}/get_server_info once and returns its body (at most 1 MiB).
func (d *serverInfoProbe) raw(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(url, "/")+"/get_server_info", nil)
	if err != nil {
		return nil, &permanentError{err}
	}
	if d.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+d.APIKey)
	}
	resp, err := d.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/get_server_info: status %d", url, resp.StatusCode)
	}
	return body, nil
}

// get fetches {url}/get_server_info once and decodes what the router reads of it.
func (d *serverInfoProbe) get(ctx context.Context, url string) (serverInfo, error) {
	var info serverInfo
	body, err := d.raw(ctx, url)
	if err != nil {
		return info, err
	}
	if err := json.Unmarshal(body, &info); err != nil {
		return info, &permanentError{fmt.Errorf("GET %s/get_server_info: not JSON: %w", url, err)}
	}
	return info, nil
}

// info waits for the worker at url to answer /get_server_info and returns the answer, its
// dp_size checked, retrying every Interval until Timeout while it is unreachable or not ready. A
// worker that answers without dp_size fails at once: retrying cannot fix it.
func (d *serverInfoProbe) info(ctx context.Context, url string) (serverInfo, error) {
	after := d.After
	if after == nil {
		after = time.After
	}
	deadline := after(d.Timeout)
	for attempt := 1; ; attempt++ {
		info, err := d.get(ctx, url)
		var perm *permanentError
		switch {
		case err == nil && info.DPSize == nil:
			return info, fmt.Errorf("worker %s: /get_server_info has no dp_size (is it an SGLang server? --dp-aware needs it)", url)
		case err == nil && *info.DPSize < 1:
			return info, fmt.Errorf("worker %s: /get_server_info reports dp_size %d", url, *info.DPSize)
		case err == nil:
			return info, nil
		case errors.As(err, &perm):
			return info, fmt.Errorf("worker %s: %w", url, perm.err)
		}
		select {
		case <-ctx.Done():
			return info, ctx.Err()
		case <-deadline:
			return info, fmt.Errorf("worker %s did not answer /get_server_info within --worker-startup-timeout-secs (%s, %d attempts): %w",
				url, d.Timeout, attempt, err)
		case <-after(d.Interval):
		}
	}
}

// modeCheckTimeout bounds the one /get_server_info read that checks the disaggregation mode of
// a worker when --dp-aware does not read it anyway.
const modeCheckTimeout = 2 * time.Second

// dpSize returns the dp_size of the worker at url given as role under --dp-aware (0 otherwise),
// and refuses a worker whose /get_server_info says it runs in another disaggregation mode than
// role (checkMode). Under --dp-aware it waits for a starting worker as serverInfoProbe.dpSize
// does; otherwise it reads /get_server_info once, briefly, and a worker that does not answer
// it (starting, or not SGLang) is not checked: its health probes decide.
func (s *Server) dpSize(ctx context.Context, url string, role router.Role) (int, error) {
	if s.cfg.DPAware {
		info, err := s.probe.info(ctx, url)
		if err != nil {
			return 0, err
		}
		if err := checkMode(url, role, info); err != nil {
			return 0, err
		}
		return *info.DPSize, nil
	}
	cctx, cancel := context.WithTimeout(ctx, modeCheckTimeout)
	defer cancel()
	if info, err := s.probe.get(cctx, url); err == nil {
		return 0, checkMode(url, role, info)
	}
	return 0, nil
}

// modeOf is the router role a worker's disaggregation_mode runs as: SGLang's server_args
// disaggregation_mode is "null" (a regular server), "prefill" or "decode"
// (python/sglang/srt/server_args.py, ServerArgs.disaggregation_mode; /get_server_info
// returns the server args). ok is false when the worker does not say, or says something else.
func modeOf(info serverInfo) (router.Role, bool) {
	if info.DisaggregationMode == nil {
		return 0, false
	}
	switch *info.DisaggregationMode {
	case "null", "":
		return router.Regular, true
	case "prefill":
		return router.Prefill, true
	case "decode":
		return router.Decode, true
	}
	return 0, false
}

// checkMode refuses a worker given as role whose /get_server_info says it runs as another:
// a prefill server given as decode answers the decode leg with a prefill (or hangs in its
// bootstrap), a regular server given as prefill never sends the KV cache. Workers that do not
// report a mode are not checked.
func checkMode(url string, role router.Role, info serverInfo) error {
	runs, ok := modeOf(info)
	if !ok || runs == role {
		return nil
	}
	return &permanentError{fmt.Errorf("worker %s is given as a %s worker but its /get_server_info says it runs as %s (disaggregation_mode %q): %s",
		router.RedactURL(url), role, modeName(runs), *info.DisaggregationMode, modeHint(runs))}
}

func modeName(r router.Role) string {
	if r == router.Regular {
		return "a regular server (no --disaggregation-mode)"
	}
	return "a " + r.String() + " server (--disaggregation-mode " + r.String() + ")"
}

// modeHint says how to give a worker of the mode it runs in.
func modeHint(runs router.Role) string {
	switch runs {
	case router.Prefill:
		return "give it with --prefill URL [BOOTSTRAP_PORT] under --pd-disaggregation (worker_type prefill)"
	case router.Decode:
		return "give it with --decode URL under --pd-disaggregation (worker_type decode)"
	}
	return "give it with --worker-urls, without --pd-disaggregation, or restart it with --disaggregation-mode"
}
