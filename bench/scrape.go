package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// MetricsFile is the file of the run directory holding the samples of --scrape-metrics.
const MetricsFile = "metrics.jsonl"

// ScrapedMetrics are the SGLang server gauges --scrape-metrics samples (fakeworker exports
// the same names): what calibration and a reader of a run need to see the servers' state.
var ScrapedMetrics = []string{"sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage",
	"sglang:gen_throughput", "sglang:cache_hit_rate"}

// DefaultScrapeInterval separates two samples of every scraped URL.
const DefaultScrapeInterval = time.Second

// Sample is one line of metrics.jsonl: one series of one scrape.
type Sample struct {
	// TMs is the scrape's time in ms since the run began.
	TMs float64 `json:"t_ms"`
	// URL is the scraped /metrics URL.
	URL string `json:"url"`
	// Metric and Labels name the series; Value is its value.
	Metric string            `json:"metric"`
	Labels map[string]string `json:"labels,omitempty"`
	Value  float64           `json:"value"`
	// Error is set (and Metric empty) when the scrape failed.
	Error string `json:"error,omitempty"`
}

// metricsURL turns a --scrape-metrics value into the URL to scrape: a base URL gets /metrics.
func metricsURL(u string) string {
	u = strings.TrimRight(u, "/")
	if strings.HasSuffix(u, "/metrics") {
		return u
	}
	return u + "/metrics"
}

// scraper samples the ScrapedMetrics of each URL every interval into dir/metrics.jsonl until
// stopped.
type scraper struct {
	stop func() error
}

func startScraper(ctx context.Context, urls []string, dir string, interval time.Duration, client *http.Client) (*scraper, error) {
	f, err := os.Create(filepath.Join(dir, MetricsFile))
	if err != nil {
		return nil, fmt.Errorf("bench: --scrape-metrics: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	start := time.Now()
	bw := bufio.NewWriter(f)
	enc := json.NewEncoder(bw)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			for _, u := range urls {
				for _, s := range scrapeOnce(ctx, client, metricsURL(u)) {
					s.TMs = float64(time.Since(start).Microseconds()) / 1000
					_ = enc.Encode(s)
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	finish := func() error {
		cancel()
		wg.Wait() // the sampling goroutine is done with bw
		if err := bw.Flush(); err != nil {
			f.Close()
			return fmt.Errorf("bench: --scrape-metrics: %w", err)
		}
		return f.Close()
	}
	var once sync.Once
	var stopErr error
	return &scraper{stop: func() error {
		once.Do(func() { stopErr = finish() })
		return stopErr
	}}, nil
}

// scrapeOnce reads one /metrics answer and returns the samples of ScrapedMetrics, or one
// sample carrying the error.
func scrapeOnce(ctx context.Context, client *http.Client, u string) []Sample {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return []Sample{{URL: u, Error: err.Error()}}
	}
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return []Sample{{URL: u, Error: err.Error()}}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return []Sample{{URL: u, Error: "status " + strconv.Itoa(resp.StatusCode)}}
	}
	out, err := parseMetrics(io.LimitReader(resp.Body, 16<<20), u)
	if err != nil {
		return []Sample{{URL: u, Error: err.Error()}}
	}
	return out
}

// parseMetrics reads the Prometheus text format and keeps the ScrapedMetrics series.
func parseMetrics(r io.Reader, u string) ([]Sample, error) {
	want := map[string]bool{}
	for _, m := range ScrapedMetrics {
		want[m] = true
	}
	var out []Sample
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest := line, ""
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name, rest = line[:i], line[i:]
		}
		if !want[name] {
			continue
		}
		s := Sample{URL: u, Metric: name}
		if strings.HasPrefix(rest, "{") {
			end := strings.LastIndexByte(rest, '}')
			if end < 0 {
				return nil, fmt.Errorf("%s: malformed line %q", u, line)
			}
			s.Labels = parseLabels(rest[1:end])
			rest = rest[end+1:]
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return nil, fmt.Errorf("%s: no value on line %q", u, line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("%s: value of %q: %w", u, line, err)
		}
		s.Value = v
		out = append(out, s)
	}
	return out, sc.Err()
}

// parseLabels reads `a="x",b="y"` (escapes \" \\ \n as the format defines).
func parseLabels(s string) map[string]string {
	m := map[string]string{}
	for s != "" {
		eq := strings.IndexByte(s, '=')
		if eq < 0 || eq+1 >= len(s) || s[eq+1] != '"' {
			break
		}
		key := strings.TrimSpace(s[:eq])
		var val strings.Builder
		i := eq + 2
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' && i+1 < len(s) {
				i++
				switch s[i] {
				case 'n':
					val.WriteByte('\n')
				default:
					val.WriteByte(s[i])
				}
				continue
			}
			val.WriteByte(s[i])
		}
		m[key] = val.String()
		s = strings.TrimLeft(s[min(i+1, len(s)):], ", ")
	}
	return m
}
