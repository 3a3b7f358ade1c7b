package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
)

// discoverModel asks the target's GET /v1/models (OpenAI's list; SGLang workers and router
// serve answer it) for the model it serves and returns the first entry's id. Like sglang
// bench_serving without --model, the first listed model is the one benchmarked.
func discoverModel(ctx context.Context, client *http.Client, base string, header http.Header) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, describeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/models", nil)
	if err != nil {
		return "", err
	}
	for k, vs := range header {
		req.Header[http.CanonicalHeaderKey(k)] = vs
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDescribeBody))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET /v1/models answered %s", resp.Status)
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return "", fmt.Errorf("GET /v1/models: %w", err)
	}
	for _, m := range list.Data {
		if m.ID != "" {
			return m.ID, nil
		}
	}
	return "", fmt.Errorf("GET /v1/models lists no model")
}

// reachable reports, as the run's first error, a target nothing answers at: connection
// refused, no such host, unreachable, or no connection within describeTimeout. Without it a
// dead --url ran every level and said why only after a table of zeros.
func reachable(ctx context.Context, u *url.URL) error {
	host := u.Host
	if u.Port() == "" {
		port := "80"
		if u.Scheme == "https" {
			port = "443"
		}
		host = net.JoinHostPort(u.Hostname(), port)
	}
	d := net.Dialer{Timeout: describeTimeout}
	c, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return fmt.Errorf("bench: --url %s: nothing answers there (is the router or worker running?): %w", RedactURL(u.String()), err)
	}
	return c.Close()
}
