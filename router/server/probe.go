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

// get fetches {url}/get_server_info once.
func (d *serverInfoProbe) get(ctx context.Context, url string) (serverInfo, error) {
	var info serverInfo
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(url, "/")+"/get_server_info", nil)
	if err != nil {
		return info, &permanentError{err}
	}
	if d.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+d.APIKey)
	}
	resp, err := d.Client.Do(req)
	if err != nil {
		return info, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return info, err
	}
	if resp.StatusCode != http.StatusOK {
		return info, fmt.Errorf("GET %s/get_server_info: status %d", url, resp.StatusCode)
	}
	if err := json.Unmarshal(body, &info); err != nil {
		return info, &permanentError{fmt.Errorf("GET %s/get_server_info: not JSON: %w", url, err)}
	}
	return info, nil
}

// dpSize waits for the worker at url to answer /get_server_info and returns its dp_size,
// retrying every Interval until Timeout while it is unreachable or not ready. A worker that
// answers without dp_size fails at once: retrying cannot fix it.
func (d *serverInfoProbe) dpSize(ctx context.Context, url string) (int, error) {
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
			return 0, fmt.Errorf("worker %s: /get_server_info has no dp_size (is it an SGLang server? --dp-aware needs it)", url)
		case err == nil && *info.DPSize < 1:
			return 0, fmt.Errorf("worker %s: /get_server_info reports dp_size %d", url, *info.DPSize)
		case err == nil:
			return *info.DPSize, nil
		case errors.As(err, &perm):
			return 0, fmt.Errorf("worker %s: %w", url, perm.err)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-deadline:
			return 0, fmt.Errorf("worker %s did not answer /get_server_info within --worker-startup-timeout-secs (%s, %d attempts): %w",
				url, d.Timeout, attempt, err)
		case <-after(d.Interval):
		}
	}
}

// dpSize returns the worker's dp_size under --dp-aware, 0 otherwise (no probe).
func (s *Server) dpSize(ctx context.Context, url string) (int, error) {
	if !s.cfg.DPAware {
		return 0, nil
	}
	return s.probe.dpSize(ctx, url)
}
