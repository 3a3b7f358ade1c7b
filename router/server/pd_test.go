package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/pdrouter/pdrouter/router"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const genReply = `{"text":"ok","meta_info":{"prompt_tokens":3,"completion_tokens":1,"cached_tokens":0}}`

// TestPDWireConformance checks both legs' bodies and headers against SPEC §1.4 for every
// route, with and without DP, both rank-field styles, and `--prefill URL none` vs a port.
func TestPDWireConformance(t *testing.T) {
	t.Parallel()
	routes := []struct {
		path, body, ridPrefix string
		batch                 int
	}{
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"x_unknown":{"a":[1,2]}}`, "chatcmpl-", 0},
		{"/v1/completions", `{"model":"m","prompt":"hello","x_unknown":{"a":[1,2]}}`, "cmpl-", 0},
		{"/generate", `{"text":"hello","sampling_params":{"max_new_tokens":4},"x_unknown":{"a":[1,2]}}`, "gnt-", 0},
		{"/generate", `{"text":["a","b","c"],"x_unknown":{"a":[1,2]}}`, "gnt-", 3},
		{"/v1/completions", `{"prompt":["a","b"],"x_unknown":{"a":[1,2]}}`, "cmpl-", 2},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"n":2,"x_unknown":{"a":[1,2]}}`, "chatcmpl-", 2},
	}
	port := 9001
	for _, dp := range []bool{false, true} {
		for _, style := range []string{router.DPRankFieldsLegacy, router.DPRankFieldsRouted} {
			for _, bport := range []*int{nil, &port} {
				name := fmt.Sprintf("dp=%v/style=%s/port=%v", dp, style, bport != nil)
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					pw := newWorker(t, jsonReply(genReply))
					dw := newWorker(t, jsonReply(genReply))
					pw.dpSize, dw.dpSize = 2, 4
					cfg := pdConfig([]*testWorker{pw}, []*testWorker{dw}, bport)
					cfg.DPAware = dp
					cfg.DPRankFields = style
					cfg.Policy = router.PolicyRoundRobin
					tr := startRouter(t, cfg)
					for i, rt := range routes {
						status, hdr, out := tr.post(t, rt.path, rt.body, map[string]string{
							"Authorization": "Bearer client", "Traceparent": "00-abc-def-01", "X-Request-Id": fmt.Sprintf("req-%d", i)})
						require.Equal(t, http.StatusOK, status, out)
						require.Equal(t, fmt.Sprintf("req-%d", i), hdr.Get("X-Request-Id"))
						// The prefill leg may still be on its way: the response does not wait for it.
						waitFor(t, func() bool { return pw.callCount() == i+1 })
						p, d := pw.callsTo(rt.path), dw.callsTo(rt.path)
						require.NotEmpty(t, p)
						require.NotEmpty(t, d)
						pb, db := p[len(p)-1], d[len(d)-1]
						checkLegs(t, pb, db, rt.ridPrefix, rt.batch, bport, dp, style)
						for _, c := range []call{pb, db} {
							assert.Equal(t, "Bearer client", c.header.Get("Authorization"))
							assert.Equal(t, "00-abc-def-01", c.header.Get("Traceparent"))
							assert.Equal(t, fmt.Sprintf("req-%d", i), c.header.Get("X-Request-Id"))
							assert.JSONEq(t, `{"a":[1,2]}`, string(mustJSON(t, c.body["x_unknown"])), "unknown fields kept")
						}
					}
					tr.requireLoadsZero(t)
				})
			}
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

func checkLegs(t *testing.T, pb, db call, ridPrefix string, batch int, port *int, dp bool, style string) {
	t.Helper()
	for _, c := range []call{pb, db} {
		host, bp, room, rid := c.body["bootstrap_host"], c.body["bootstrap_port"], c.body["bootstrap_room"], c.body["rid"]
		if batch > 0 {
			require.Len(t, host, batch)
			require.Len(t, bp, batch)
			require.Len(t, room, batch)
			require.Len(t, rid, batch)
			host, bp, room, rid = host.([]any)[0], bp.([]any)[0], room.([]any)[0], rid.([]any)[0]
		}
		assert.Equal(t, "127.0.0.1", host)
		if port == nil {
			assert.Nil(t, bp, "--prefill URL none sends bootstrap_port null")
			assert.Contains(t, string(c.raw), `"bootstrap_port":`)
		} else {
			assert.Equal(t, float64(*port), bp)
		}
		assert.True(t, strings.HasPrefix(rid.(string), ridPrefix), rid)
		assert.True(t, strings.HasSuffix(rid.(string), "-127.0.0.1"), rid)
		_ = room
	}
	// Same room(s) and rid(s) on both legs; a fresh room per batch element.
	assert.Equal(t, string(mustJSON(t, pb.body["bootstrap_room"])), string(mustJSON(t, db.body["bootstrap_room"])))
	assert.Equal(t, pb.body["rid"], db.body["rid"])
	if batch > 1 {
		rooms := pb.body["bootstrap_room"].([]any)
		assert.NotEqual(t, rooms[0], rooms[1])
	}
	// DP fields exactly where SPEC §1.4 puts them.
	_, pHasLegacy := pb.body["data_parallel_rank"]
	_, pHasRouted := pb.body["routed_dp_rank"]
	switch style {
	case router.DPRankFieldsLegacy:
		assert.Equal(t, dp, pHasLegacy, "prefill data_parallel_rank only with a rank")
		assert.False(t, pHasRouted)
		require.Contains(t, db.body, "data_parallel_rank")
		require.Contains(t, db.body, "data_parallel_rank_decode")
		if dp {
			assert.Equal(t, pb.body["data_parallel_rank"], db.body["data_parallel_rank"], "decode carries prefill's rank")
			assert.NotNil(t, db.body["data_parallel_rank_decode"])
		} else {
			assert.Nil(t, db.body["data_parallel_rank"])
			assert.Nil(t, db.body["data_parallel_rank_decode"])
		}
	case router.DPRankFieldsRouted:
		assert.False(t, pHasLegacy)
		assert.Equal(t, dp, pHasRouted)
		require.Contains(t, db.body, "routed_dp_rank")
		require.Contains(t, db.body, "disagg_prefill_dp_rank")
		assert.NotContains(t, db.body, "data_parallel_rank")
		if dp {
			assert.Equal(t, pb.body["routed_dp_rank"], db.body["disagg_prefill_dp_rank"])
		}
	}
}

func TestPDClientRIDKept(t *testing.T) {
	t.Parallel()
	pw, dw := newWorker(t, jsonReply(genReply)), newWorker(t, jsonReply(genReply))
	tr := startRouter(t, pdConfig([]*testWorker{pw}, []*testWorker{dw}, nil))
	status, hdr, _ := tr.post(t, "/generate", `{"text":"x","rid":"my-rid"}`, nil)
	require.Equal(t, http.StatusOK, status)
	waitFor(t, func() bool { return pw.callCount() == 1 })
	require.Equal(t, "my-rid", pw.callsTo("/generate")[0].body["rid"])
	require.Equal(t, "my-rid", dw.callsTo("/generate")[0].body["rid"])
	require.Equal(t, "my-rid", hdr.Get("X-Request-Id"), "without a request-id header the rid is the id")
	// The decision log has one line naming both legs.
	var line map[string]any
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(tr.dlog.String())), &line))
	require.Equal(t, float64(1), line["seq"])
	require.Equal(t, "/generate", line["route"])
	require.Equal(t, pw.URL(), line["prefill"].(map[string]any)["worker"])
	require.Nil(t, line["regular"])
}

// When decode's held head waits for prefill's answer before its commit, case by case: the
// states the hold can be in once decode's first event or whole body is read (a read that broke
// fails the attempt before).
func TestPDNeedsPrefill(t *testing.T) {
	for _, tc := range []struct {
		name                       string
		stream, sawEvent, logprobs bool
		want                       bool
	}{
		{"stream: first event", true, true, false, false},
		{"stream: first event, logprobs", true, true, true, true},
		{"stream: ended without an event", true, false, false, true},
		{"body: whole", false, false, false, false},
		{"body: whole, logprobs", false, false, true, true},
	} {
		assert.Equal(t, tc.want, needsPrefill(tc.stream, tc.sawEvent, tc.logprobs), tc.name)
	}
}

// A decode stream that arrives whole, its events with the end of its body (here a
// Content-Length body, whose last read brings io.EOF with the bytes), is answered at once
// while prefill is still silent (SPEC §1.4: the head is held until prefill succeeded or
// decode's first data event arrived), and prefill's leg still ends with its Done.
func TestPDWholeStreamDoesNotWaitForPrefill(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var answered atomic.Bool
	pw := newWorker(t, func(w http.ResponseWriter, r *http.Request, c call) {
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		answered.Store(true)
		jsonReply(genReply)(w, r, c)
	})
	const stream = "data: {\"text\":\"a\"}\n\ndata: [DONE]\n\n"
	dw := newWorker(t, func(w http.ResponseWriter, _ *http.Request, _ call) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Content-Length", fmt.Sprint(len(stream)))
		_, _ = io.WriteString(w, stream)
	})
	cfg := pdConfig([]*testWorker{pw}, []*testWorker{dw}, nil)
	cfg.RequestTimeoutSecs = 5 // a hold that waits for prefill ends here, not with the answer
	tr := startRouter(t, cfg)
	status, _, body := tr.post(t, "/generate", `{"text":"x","stream":true}`, nil)
	assert.False(t, answered.Load(), "answered before prefill did")
	close(release)
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, stream, body)
	tr.requireLoadsZero(t)
}

// An attempt that fails before its commit leaves no field of decode's held head behind, neither
// in the retry's answer nor in the error answer when there is no retry.
func TestPDFailedAttemptLeavesNoDecodeHeader(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	flaky := func(w http.ResponseWriter, r *http.Request, c call) {
		n := calls.Add(1)
		w.Header().Set("X-Attempt", fmt.Sprint(n))
		if n == 1 {
			w.Header().Set("X-Failed-Only", "1")
			sseReply([]string{`data: {"error":{"message":"decode room failed","code":500}}`}, nil)(w, r, c)
			return
		}
		sseReply([]string{`data: {"text":"a"}`, "data: [DONE]"}, nil)(w, r, c)
	}
	for _, retry := range []bool{true, false} {
		calls.Store(0)
		pw, dw := newWorker(t, jsonReply(genReply)), newWorker(t, flaky)
		cfg := pdConfig([]*testWorker{pw}, []*testWorker{dw}, nil)
		if !retry {
			cfg = noRetries(cfg)
		}
		tr := startRouter(t, cfg)
		status, hdr, body := tr.post(t, "/generate", `{"text":"x","stream":true}`, nil)
		assert.Empty(t, hdr.Values("X-Failed-Only"), "retry %v", retry)
		if retry {
			require.Equal(t, http.StatusOK, status, body)
			assert.Equal(t, []string{"2"}, hdr.Values("X-Attempt"))
			assert.Equal(t, "text/event-stream", hdr.Get("Content-Type"))
		} else {
			require.Equal(t, http.StatusInternalServerError, status, body)
			assert.Empty(t, hdr.Values("X-Attempt"))
			assert.Contains(t, hdr.Get("Content-Type"), "application/json")
		}
		assert.NotEmpty(t, hdr.Get("X-Request-Id"))
		tr.requireLoadsZero(t)
	}
}

// Prefill legs that outlive their responses each carry their own request (the text and room
// its decode leg carried), and every leg's Done lands on its own decision (the loads return to
// zero).
func TestPDAttemptsKeepLegsApart(t *testing.T) {
	t.Parallel()
	const held, after = 8, 24
	release := make(chan struct{})
	var n atomic.Int32
	pw := newWorker(t, func(w http.ResponseWriter, r *http.Request, c call) {
		if n.Add(1) <= held { // the first prefills answer only after their responses went out
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		jsonReply(genReply)(w, r, c)
	})
	dw := newWorker(t, jsonReply(genReply))
	tr := startRouter(t, pdConfig([]*testWorker{pw}, []*testWorker{dw}, nil))
	post := func(i int) {
		status, _, out := tr.post(t, "/generate", fmt.Sprintf(`{"text":"prompt %d"}`, i), nil)
		assert.Equal(t, http.StatusOK, status, out)
	}
	done := make(chan struct{})
	for i := range held {
		go func() { post(i); done <- struct{}{} }()
	}
	for range held {
		<-done
	}
	waitFor(t, func() bool { return pw.callCount() == held })
	for i := held; i < held+after; i++ {
		post(i)
	}
	close(release)
	tr.requireLoadsZero(t)
	legs := func(tw *testWorker) map[string]string { // rid → text and room
		m := map[string]string{}
		for _, c := range tw.callsTo("/generate") {
			m[fmt.Sprint(c.body["rid"])] = fmt.Sprint(c.body["text"], " ", c.body["bootstrap_room"])
		}
		return m
	}
	p, d := legs(pw), legs(dw)
	require.Len(t, p, held+after)
	assert.Equal(t, d, p, "each prefill leg carries its own decode leg's text and room")
}
