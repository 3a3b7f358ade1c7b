package server

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/pdrouter/pdrouter/router"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// del sends DELETE path and returns the status and body.
func (tr *testRouter) del(t *testing.T, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodDelete, tr.srv.URL+path, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

func (tr *testRouter) metricsText() string {
	rec := httptest.NewRecorder()
	tr.s.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return rec.Body.String()
}

// workerEntry returns the /workers entry of url, or nil.
func (tr *testRouter) workerEntry(t *testing.T, u string) map[string]any {
	t.Helper()
	var ws struct{ Workers []map[string]any }
	getJSON(t, tr.srv.URL+"/workers", &ws)
	for _, w := range ws.Workers {
		if w["url"] == u {
			return w
		}
	}
	return nil
}

// A worker removed with a request in flight is shown draining — in /workers, /workers/{url},
// /get_loads, /readiness and the metrics — takes no new requests, and is gone once that
// request finishes. Both steps are logged at INFO with the worker, its role and the reason.
func TestRemovedWorkerDrains(t *testing.T) {
	t.Parallel()
	arrived, release := make(chan struct{}), make(chan struct{})
	slow := newWorker(t, arrivedThen(arrived, after(release, jsonReply(genReply))))
	fast := newWorker(t, jsonReply(genReply))
	cfg := regularConfig(slow, fast)
	cfg.Policy = router.PolicyRoundRobin
	logs := &syncBuffer{}
	tr := startRouterLogging(t, cfg, slog.New(slog.NewTextHandler(logs, nil)))

	// One request held open by the slow worker (round robin: the first or the second).
	held := make(chan int, 2)
	send := func() {
		status, _, _ := tr.post(t, "/generate", genBody, nil)
		held <- status
	}
	go send()
	select {
	case <-arrived:
	case status := <-held: // it went to the fast worker: the next goes to the slow one
		require.Equal(t, http.StatusOK, status)
		go send()
		<-arrived
	}

	status, body := tr.del(t, "/workers/"+slow.URL())
	require.Equal(t, http.StatusAccepted, status, body)
	assert.JSONEq(t, fmt.Sprintf(`{"status":"accepted","worker_id":%q,"url":%q,"state":"draining","load":1,
		"message":"worker draining: removed once its 1 in-flight requests finish"}`, workerID(slow.URL()), slow.URL()), body)
	assert.Contains(t, logs.String(), `level=INFO msg="worker draining: no new requests; removed once its in-flight requests finish" worker=`+slow.URL()+
		` role=regular from=healthy to=draining reason="removed through the API" in_flight=1`)

	w := tr.workerEntry(t, slow.URL())
	require.NotNil(t, w, "still listed while its request is in flight")
	assert.Equal(t, "draining", w["state"])
	assert.Equal(t, false, w["healthy"])
	assert.Equal(t, 1.0, w["load"])
	var one map[string]any
	getJSON(t, tr.srv.URL+"/workers/"+url.PathEscape(slow.URL()), &one)
	assert.Equal(t, "draining", one["state"])
	var loads struct{ Workers []map[string]any }
	getJSON(t, tr.srv.URL+"/get_loads", &loads)
	assert.Contains(t, loads.Workers, map[string]any{"worker": slow.URL(), "target": slow.URL(), "role": "regular", "dp_rank": nil, "load": 1.0, "healthy": false})
	var ready map[string]any
	getJSON(t, tr.srv.URL+"/readiness", &ready)
	assert.Equal(t, map[string]any{"healthy": 1.0, "total": 1.0, "draining": 1.0}, ready["workers"].(map[string]any)["regular"])
	m := tr.metricsText()
	assert.Contains(t, m, `pdrouter_worker_state{role="regular",state="draining",worker="`+slow.URL()+`"} 1`)
	assert.Contains(t, m, `pdrouter_worker_state{role="regular",state="healthy",worker="`+fast.URL()+`"} 1`)
	assert.Contains(t, m, `pdrouter_worker_healthy{role="regular",worker="`+slow.URL()+`"} 0`)
	assert.Contains(t, m, `pdrouter_target_load{role="regular",target="`+slow.URL()+`"} 1`)

	// No new request goes to it; removing it again changes nothing.
	before := fast.callCount()
	for range 4 {
		status, _, body := tr.post(t, "/generate", genBody, nil)
		require.Equal(t, http.StatusOK, status, body)
	}
	assert.Equal(t, 1, slow.callCount(), "the draining worker takes no new request")
	assert.Equal(t, before+4, fast.callCount())
	status, body = tr.del(t, "/workers/"+slow.URL())
	assert.Equal(t, http.StatusAccepted, status, body)

	// Its request finishes: it is gone, from every view.
	close(release)
	require.Equal(t, http.StatusOK, <-held)
	waitFor(t, func() bool { return tr.workerEntry(t, slow.URL()) == nil })
	waitFor(t, func() bool { return strings.Contains(logs.String(), "worker removed: its in-flight requests finished") })
	assert.Contains(t, logs.String(), `level=INFO msg="worker removed: its in-flight requests finished" worker=`+slow.URL()+` role=regular from=draining reason="drained in `)
	getJSON(t, tr.srv.URL+"/readiness", &ready)
	assert.Equal(t, map[string]any{"healthy": 1.0, "total": 1.0, "draining": 0.0}, ready["workers"].(map[string]any)["regular"])
	assert.NotContains(t, tr.metricsText(), slow.URL())
	status, body = tr.del(t, "/workers/"+slow.URL())
	assert.Equal(t, http.StatusNotFound, status, body)
}

// A worker removed with nothing in flight goes at once; one registered again while draining
// is shown once, as registered (its old request still finishes).
func TestRemovedWorkerIdleOrReAdded(t *testing.T) {
	t.Parallel()
	arrived, release := make(chan struct{}), make(chan struct{})
	w := newWorker(t, arrivedThen(arrived, after(release, jsonReply(genReply))))
	idle := newWorker(t, jsonReply(genReply))
	logs := &syncBuffer{}
	tr := startRouterLogging(t, regularConfig(w, idle), slog.New(slog.NewTextHandler(logs, nil)))

	status, body := tr.del(t, "/workers/"+idle.URL())
	require.Equal(t, http.StatusAccepted, status, body)
	assert.JSONEq(t, fmt.Sprintf(`{"status":"accepted","worker_id":%q,"url":%q,"message":"worker removed"}`, workerID(idle.URL()), idle.URL()), body)
	assert.Nil(t, tr.workerEntry(t, idle.URL()))
	assert.Contains(t, logs.String(), `msg="worker removed" worker=`+idle.URL()+` role=regular from=healthy reason="removed through the API" source=api`)

	held := make(chan int, 1)
	go func() {
		status, _, _ := tr.post(t, "/generate", genBody, nil)
		held <- status
	}()
	<-arrived
	status, body = tr.del(t, "/workers/"+w.URL())
	require.Equal(t, http.StatusAccepted, status, body)
	require.Equal(t, "draining", tr.workerEntry(t, w.URL())["state"])
	status, _, body = tr.post(t, "/workers", fmt.Sprintf(`{"url":%q}`, w.URL()), nil)
	require.Equal(t, http.StatusAccepted, status, body)
	var ws struct{ Workers []map[string]any }
	getJSON(t, tr.srv.URL+"/workers", &ws)
	require.Len(t, ws.Workers, 1, "listed once")
	assert.Equal(t, "healthy", ws.Workers[0]["state"])
	assert.Contains(t, logs.String(), `msg="worker registered again while draining: its in-flight requests finish unshown" worker=`+w.URL())
	close(release)
	require.Equal(t, http.StatusOK, <-held)
	tr.requireLoadsZero(t)
}

// Each step of the core's worker lifecycle is one log line, at the level its meaning wants;
// a worker that is gone loses its per-worker series.
func TestWorkerEventsLogged(t *testing.T) {
	t.Parallel()
	const u = "http://user:pw@w:1"
	for _, tc := range []struct {
		name string
		ev   router.WorkerEvent
		want string
	}{
		{"registered from the config", router.WorkerEvent{From: router.WorkerAdded, To: router.WorkerStarting, Source: "config", DPSize: 2},
			`level=INFO msg="worker registered" url=http://***@w:1 role=decode dp_size=2`},
		{"added through the API", router.WorkerEvent{From: router.WorkerAdded, To: router.WorkerHealthy, Source: "api"},
			`level=INFO msg="worker added" url=http://***@w:1 role=decode dp_size=0 source=api`},
		{"registered again while draining", router.WorkerEvent{From: router.WorkerDraining, To: router.WorkerHealthy, Source: "discovery", InFlight: 3},
			`level=INFO msg="worker registered again while draining: its in-flight requests finish unshown" worker=http://***@w:1 role=decode in_flight=3`},
		{"draining", router.WorkerEvent{From: router.WorkerBreakerOpen, To: router.WorkerDraining, Source: "api", Reason: "removed through the API", InFlight: 1},
			`level=INFO msg="worker draining: no new requests; removed once its in-flight requests finish" worker=http://***@w:1 role=decode from=breaker_open to=draining reason="removed through the API" in_flight=1 source=api`},
		{"drained", router.WorkerEvent{From: router.WorkerDraining, To: router.WorkerGone, Source: "api", Reason: "drained in 2.0s after it was removed through the API"},
			`level=INFO msg="worker removed: its in-flight requests finished" worker=http://***@w:1 role=decode from=draining reason="drained in 2.0s after it was removed through the API"`},
		{"removed idle", router.WorkerEvent{From: router.WorkerUnhealthy, To: router.WorkerGone, Source: "discovery", Reason: "its pod left service discovery"},
			`level=INFO msg="worker removed" worker=http://***@w:1 role=decode from=unhealthy reason="its pod left service discovery" source=discovery`},
		{"breaker opens", router.WorkerEvent{From: router.WorkerHealthy, To: router.WorkerBreakerOpen, Reason: "3 failed requests in a row"},
			`level=WARN msg="worker stopped taking traffic" worker=http://***@w:1 role=decode from=healthy to=breaker_open reason="3 failed requests in a row"`},
		{"back", router.WorkerEvent{From: router.WorkerUnhealthy, To: router.WorkerHealthy, Reason: "health probe passed"},
			`level=INFO msg="worker takes traffic again" worker=http://***@w:1 role=decode from=unhealthy to=healthy reason="health probe passed"`},
		{"ready", router.WorkerEvent{From: router.WorkerStarting, To: router.WorkerHealthy, Reason: "health probe passed"},
			`level=INFO msg="worker ready: takes traffic" worker=http://***@w:1 role=decode from=starting to=healthy reason="health probe passed"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			logs := &syncBuffer{}
			s, err := New(Options{Config: DefaultConfig(), Logger: slog.New(slog.NewTextHandler(logs, nil))})
			require.NoError(t, err)
			s.metrics.WorkerErrors.WithLabelValues(router.RedactURL(u), "decode", "timeout").Inc()
			tc.ev.URL, tc.ev.Role = u, router.Decode
			s.workerEvent(tc.ev)
			assert.Contains(t, logs.String(), tc.want)
			lines := 1
			if tc.ev.From == router.WorkerDraining && tc.ev.To != router.WorkerGone {
				lines = 2 // and the registration itself: "worker added"
			}
			assert.Equal(t, lines, strings.Count(logs.String(), "msg="))
			series := 1
			if tc.ev.To == router.WorkerGone {
				series = 0
			}
			assert.Equal(t, series, promtest.CollectAndCount(s.metrics.WorkerErrors), "worker_errors_total series")
		})
	}
}
