package bench

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/reports"
)

// A bench of a router records every worker /get_router_config names with its own
// /get_server_info: credentials in a worker URL reach the worker (basic auth) but never the
// results; a worker that does not answer is a warning, not a failed run; the bench's own
// headers (the router's key) are not sent to workers.
func TestRunRecordsWorkersServerInfo(t *testing.T) {
	t.Parallel()
	var gotAuth, gotKey string
	prefill := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pw, _ := r.BasicAuth()
		gotAuth, gotKey = user+":"+pw, r.Header.Get("Authorization-Key")
		fmt.Fprint(w, `{"disaggregation_mode":"prefill","max_total_num_tokens":12000,"chunked_prefill_size":4096,"page_size":16,"dp_size":1}`)
	}))
	t.Cleanup(prefill.Close)
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL
	down.Close() // nothing listens there any more

	f := &fakeSSE{}
	gen := startFake(t, f)
	withCreds := strings.Replace(prefill.URL, "http://", "http://user:s3cret@", 1)
	cfgJSON, err := json.Marshal(map[string]any{"pd_disaggregation": true, "prefill": []any{map[string]any{"url": withCreds, "bootstrap_port": 8998}},
		"decode": []string{downURL}, "worker_urls": []string{}})
	require.NoError(t, err)
	router := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/get_router_config" {
			_, _ = w.Write(cfgJSON)
			return
		}
		f.ServeHTTP(w, r)
	}))
	t.Cleanup(router.Close)
	_ = gen

	cfg := smallConfig(router.URL)
	cfg.Header = http.Header{"Authorization-Key": {"router-key"}}
	cfg.Out = t.TempDir()
	runOK(t, cfg)
	res, err := reports.ReadResults(cfg.Out)
	require.NoError(t, err)

	require.Len(t, res.Meta.Workers, 2)
	p, d := res.Meta.Workers[0], res.Meta.Workers[1]
	assert.Equal(t, "prefill", p.Role)
	assert.Equal(t, strings.Replace(prefill.URL, "http://", "http://***@", 1), p.URL, "credentials redacted")
	assert.JSONEq(t, `{"disaggregation_mode":"prefill","max_total_num_tokens":12000,"chunked_prefill_size":4096,"page_size":16,"dp_size":1}`, string(p.ServerInfo))
	assert.Empty(t, p.Error)
	assert.Equal(t, "user:s3cret", gotAuth, "the worker URL's credentials reach the worker")
	assert.Empty(t, gotKey, "the bench's headers are the target's, not the workers'")

	assert.Equal(t, "decode", d.Role)
	assert.Equal(t, downURL, d.URL)
	assert.Nil(t, d.ServerInfo)
	assert.NotEmpty(t, d.Error)
	require.Len(t, res.Meta.Warnings, 1)
	assert.Contains(t, res.Meta.Warnings[0], "worker "+downURL+": /get_server_info")

	raw, err := json.Marshal(res)
	require.NoError(t, err)
	assert.NotContains(t, string(raw), "s3cret", "no credential anywhere in results.json")
}

// A bench of a worker (no router config) records the target as the one worker, with the role
// its disaggregation_mode gives; a target with neither answer leaves a warning.
func TestRunRecordsTargetAsWorker(t *testing.T) {
	t.Parallel()
	srv := startFake(t, &fakeSSE{})
	cfg := smallConfig(srv.URL)
	res := runOK(t, cfg)
	require.Len(t, res.Meta.Workers, 1)
	assert.Equal(t, reports.WorkerInfo{URL: srv.URL, Role: "regular", ServerInfo: res.Meta.ServerInfo}, res.Meta.Workers[0])
	assert.Empty(t, res.Meta.Warnings)
}

func TestWorkersOfAndRedact(t *testing.T) {
	t.Parallel()
	refs, err := workersOf(json.RawMessage(`{"worker_urls":["http://a:1","http://a:1"],"prefill":[{"url":"http://p:1","bootstrap_port":null}],"decode":["http://d:1"]}`))
	require.NoError(t, err)
	assert.Equal(t, []workerRef{{"http://p:1", "prefill"}, {"http://d:1", "decode"}, {"http://a:1", "regular"}}, refs)
	_, err = workersOf(json.RawMessage(`[]`))
	assert.Error(t, err)

	for in, want := range map[string]string{
		"http://host:1/x":               "http://host:1/x",
		"https://u:p@host:1/x?y=1":      "https://***@host:1/x?y=1",
		"http://u@host":                 "http://***@host",
		"http://u:p@host:bad port/%zz":  "http://***",
		"no scheme with user:pw@host %": "***",
	} {
		assert.Equal(t, want, RedactURL(in), in)
	}
}
