package bench

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/pdrouter/pdrouter/reports"
	"github.com/pdrouter/pdrouter/workloads"
)

// DefaultRequestTimeout bounds one request, stream included, when Config.RequestTimeout is 0.
const DefaultRequestTimeout = 10 * time.Minute

// DefaultFollowUpWorkers caps the later turns of open-loop conversations in flight at once
// when Config.FollowUpWorkers is 0; more wait (their wait shows in queue_ms).
const DefaultFollowUpWorkers = 1024

// Config is one bench run. Build it from workloads.DefaultParams and
// workloads.DefaultLoadParams; the zero values of the other fields are the defaults.
type Config struct {
	// URL is the target's base URL (scheme, host, port, optional path prefix); each request
	// goes to URL + the API's path, e.g. /v1/chat/completions. Required.
	URL string
	// Header holds extra headers sent with every request (--header K:V); may be nil.
	Header http.Header
	// Workload is the workload and request form (--workload, --api, --model, --seed, …).
	Workload workloads.Params
	// DiscoverModel, set when --model was not given, makes Run ask the target's GET /v1/models
	// and send the first listed model as the "model" of chat and completions requests (and
	// record it in results.json). Workload.Model stays when the target lists none; Progress
	// says which model was used.
	DiscoverModel bool
	// Load is the levels and their bounds (--concurrency, --rate, --requests, --warmup, …).
	Load workloads.LoadParams
	// SLO, when non-nil, adds goodput to every level (--slo).
	SLO *reports.SLO
	// RequestTimeout bounds each request including its whole stream; 0 means
	// DefaultRequestTimeout. A request past it fails with kind "timeout".
	RequestTimeout time.Duration
	// FollowUpWorkers caps in-flight later turns in open loop; 0 means DefaultFollowUpWorkers.
	FollowUpWorkers int
	// Out, when non-empty, is the directory that receives requests.jsonl (streamed while the
	// run goes) and results.json (rewritten after every level).
	Out string
	// Progress, when non-nil, receives progress per level (stderr): a bar redrawn in place
	// when ProgressTTY; otherwise whole lines: one per level, one for its warm-up, and a
	// heartbeat every HeartbeatInterval (requests done, errors, P50 TTFT so far).
	Progress io.Writer
	// ProgressTTY says Progress is a terminal, where a bar may be redrawn in place.
	ProgressTTY bool
	// MaxErrorRate is the fraction of a level's requests that may fail before Run reports
	// the run as failed (*ErrorRateError, after every level ran); 0 means any failure fails
	// the run, a negative value disables the check.
	MaxErrorRate float64
	// Version is written to results.json's meta.version.
	Version string
	// Label names the run in reports (--label); Command is the command line that started it.
	// Both go to results.json's meta.
	Label   string
	Command []string
	// ScrapeMetrics are worker URLs (base or /metrics) whose SGLang gauges (ScrapedMetrics)
	// are sampled every ScrapeInterval during the run into Out/metrics.jsonl; needs Out.
	ScrapeMetrics  []string
	ScrapeInterval time.Duration // 0 → DefaultScrapeInterval
	// Transport is the base RoundTripper under the timing transport; nil means a tuned
	// *http.Transport of the run's own (HTTP/1.1, no compression, large idle pool).
	Transport http.RoundTripper
}

// validate checks what Run needs beyond the workloads' own validation.
func (c *Config) validate() (*url.URL, error) {
	if c.URL == "" {
		return nil, fmt.Errorf("bench: --url is required")
	}
	if !strings.Contains(c.URL, "://") {
		// "127.0.0.1:30000" would otherwise fail in url.Parse with its own wording ("first
		// path segment in URL cannot contain colon"); the wording is router.CheckWorkerURL's.
		return nil, fmt.Errorf("bench: --url %q must start with http:// or https:// (e.g. http://%s)", c.URL, c.URL)
	}
	u, err := url.Parse(c.URL)
	if err != nil {
		return nil, fmt.Errorf("bench: --url %q: %w", c.URL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("bench: --url %q: want http://host:port or https://host:port", c.URL)
	}
	if err := c.Workload.Validate(); err != nil {
		return nil, err
	}
	if err := c.Load.Validate(c.Workload.IsTrace()); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, lv := range c.Load.Levels(c.Workload.IsTrace()) {
		label := levelInfo(lv).Label
		if seen[label] {
			return nil, fmt.Errorf("bench: level %s appears twice (--concurrency, --rate)", label)
		}
		seen[label] = true
	}
	if c.RequestTimeout < 0 {
		return nil, fmt.Errorf("bench: request timeout %v must be ≥ 0", c.RequestTimeout)
	}
	if c.FollowUpWorkers < 0 {
		return nil, fmt.Errorf("bench: follow-up workers %d must be ≥ 0", c.FollowUpWorkers)
	}
	if c.MaxErrorRate > 1 || c.MaxErrorRate != c.MaxErrorRate {
		return nil, fmt.Errorf("bench: --max-error-rate %g must be a fraction in [0,1] (negative: no check)", c.MaxErrorRate)
	}
	return u, nil
}

// ParseSLO parses --slo: comma-separated objectives in ms, "ttft=MS", "tpot=MS" and "e2e=MS"
// (e.g. "ttft=200,tpot=50"); at least one.
func ParseSLO(s string) (*reports.SLO, error) {
	var slo reports.SLO
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("bench: --slo is empty (want ttft=MS,tpot=MS)")
	}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		ms, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), "ms"), 64)
		if !ok || err != nil || !(ms > 0) || ms > 1e12 {
			return nil, fmt.Errorf("bench: --slo %q: %q is not KEY=MS with MS > 0", s, part)
		}
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "ttft":
			slo.TTFTMs = ms
		case "tpot":
			slo.TPOTMs = ms
		case "e2e", "e2el":
			slo.E2EMs = ms
		default:
			return nil, fmt.Errorf("bench: --slo %q: unknown objective %q (want ttft, tpot or e2e)", s, k)
		}
	}
	return &slo, nil
}

// ParseHeader parses one --header value "Key: value" (the space is optional) into h.
func ParseHeader(h http.Header, s string) error {
	k, v, ok := strings.Cut(s, ":")
	k = strings.TrimSpace(k)
	if !ok || k == "" || strings.ContainsAny(k, " \t\r\n") {
		return fmt.Errorf("bench: --header %q: want Key:value", s)
	}
	h.Add(k, strings.TrimSpace(v))
	return nil
}
