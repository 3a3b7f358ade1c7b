package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/pdrouter/pdrouter/reports"
)

// The deployment's workers and their engine arguments: a run records every worker's
// /get_server_info (SGLang's chunked_prefill_size, max_running_requests, max_total_num_tokens,
// page_size, cuda_graph_max_bs, tp/dp/ep sizes, …) so that `router sim calibrate` can take
// them as given rather than fit them. The workers are those the router's /get_router_config
// lists (worker_urls, prefill[].url, decode); a target that is itself a worker (no router
// config, but a /get_server_info) is the one worker. A worker that does not answer is a
// warning in results.json, never a failed run.

// routerWorkers is the part of /get_router_config naming the workers.
type routerWorkers struct {
	WorkerURLs []string `json:"worker_urls"`
	Prefill    []struct {
		URL string `json:"url"`
	} `json:"prefill"`
	Decode []string `json:"decode"`
}

// workerRef is a worker to ask: its URL as configured (credentials kept, to reach it) and
// its role.
type workerRef struct{ url, role string }

// workersOf lists the workers a /get_router_config answer names, in its order, each once.
func workersOf(routerConfig json.RawMessage) ([]workerRef, error) {
	var rw routerWorkers
	if err := json.Unmarshal(routerConfig, &rw); err != nil {
		return nil, err
	}
	var out []workerRef
	seen := map[string]bool{}
	add := func(u, role string) {
		if u = strings.TrimSpace(u); u != "" && !seen[u] {
			seen[u] = true
			out = append(out, workerRef{u, role})
		}
	}
	for _, p := range rw.Prefill {
		add(p.URL, "prefill")
	}
	for _, d := range rw.Decode {
		add(d, "decode")
	}
	for _, w := range rw.WorkerURLs {
		add(w, "regular")
	}
	return out, nil
}

// RedactURL returns u with any user:password replaced by ***, so a recorded URL never carries
// credentials; a value that does not parse is redacted whole after its scheme.
func RedactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		if scheme, _, ok := strings.Cut(u, "://"); ok {
			return scheme + "://***"
		}
		return "***"
	}
	if p.User == nil {
		return u
	}
	p.User = nil
	return strings.Replace(p.String(), "://", "://***@", 1)
}

// recordWorkers fills res.Meta.Workers and its warnings: every worker's /get_server_info.
// The bench's --header values go to the target only: they are its credentials, not the
// workers'.
func (r *runner) recordWorkers(res *reports.Results) {
	var refs []workerRef
	switch {
	case res.Meta.Router != nil:
		var err error
		if refs, err = workersOf(res.Meta.Router); err != nil {
			res.Meta.Warnings = append(res.Meta.Warnings, fmt.Sprintf("workers: /get_router_config does not list them: %v", err))
			return
		}
		res.Meta.Router = redactURLs(res.Meta.Router)
		if len(refs) == 0 {
			res.Meta.Warnings = append(res.Meta.Warnings, "workers: /get_router_config lists none (service discovery?): their /get_server_info is not recorded")
			return
		}
	case res.Meta.ServerInfo != nil: // the target is a worker
		role := "regular"
		var m struct {
			Mode string `json:"disaggregation_mode"`
		}
		if json.Unmarshal(res.Meta.ServerInfo, &m) == nil && (m.Mode == "prefill" || m.Mode == "decode") {
			role = m.Mode
		}
		res.Meta.Workers = []reports.WorkerInfo{{URL: RedactURL(r.base), Role: role, ServerInfo: res.Meta.ServerInfo}}
		return
	default:
		res.Meta.Warnings = append(res.Meta.Warnings, "workers: the target answers neither /get_router_config nor /get_server_info: no engine arguments recorded")
		return
	}
	for _, w := range refs {
		info := reports.WorkerInfo{URL: RedactURL(w.url), Role: w.role}
		body, err := r.getJSON(strings.TrimRight(w.url, "/")+"/get_server_info", nil)
		if err != nil {
			info.Error = err.Error()
			res.Meta.Warnings = append(res.Meta.Warnings, fmt.Sprintf("worker %s: /get_server_info: %s", info.URL, info.Error))
		}
		info.ServerInfo = body
		res.Meta.Workers = append(res.Meta.Workers, info)
	}
}

// getJSON GETs u (with header) within describeTimeout and returns its JSON object answer.
// Errors name no URL (the caller redacts it) and never carry credentials.
func (r *runner) getJSON(u string, header http.Header) (json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(r.ctx, describeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("bad URL")
	}
	for k, vs := range header {
		req.Header[http.CanonicalHeaderKey(k)] = vs
	}
	resp, err := r.flushClient.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the url.Error's text would repeat the URL, credentials included
		}
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDescribeBody))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %s", resp.Status)
	}
	var buf bytes.Buffer
	if json.Compact(&buf, body) != nil || buf.Len() == 0 || buf.Bytes()[0] != '{' {
		return nil, fmt.Errorf("answer is not a JSON object")
	}
	return buf.Bytes(), nil
}

// redactURLs returns raw with every string that is a URL carrying credentials redacted
// (RedactURL): a router's /get_router_config lists worker URLs as configured, and results.json
// must not keep their passwords. raw comes back unchanged (same bytes) when nothing needed it.
func redactURLs(raw json.RawMessage) json.RawMessage {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return raw
	}
	changed := false
	var walk func(v any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case string:
			if strings.Contains(x, "://") && strings.Contains(x, "@") {
				if r := RedactURL(x); r != x {
					changed = true
					return r
				}
			}
		case []any:
			for i := range x {
				x[i] = walk(x[i])
			}
		case map[string]any:
			for k := range x {
				x[k] = walk(x[k])
			}
		}
		return v
	}
	v = walk(v)
	if !changed {
		return raw
	}
	out, err := json.Marshal(v)
	if err != nil {
		return raw
	}
	return out
}
