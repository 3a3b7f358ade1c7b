package server

import (
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/pdrouter/pdrouter/router"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is a collector's OTLP/HTTP traces receiver in the test process: it decodes
// each ExportTraceServiceRequest with the protocol's own messages and keeps its spans.
type otlpReceiver struct {
	srv      *httptest.Server
	mu       sync.Mutex
	exports  int
	spans    []*tracepb.Span
	services []string // each resource's service.name
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	o := &otlpReceiver{}
	o.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, err := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if err == nil && (r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf") {
			err = fmt.Errorf("%s %s %s: not an OTLP/HTTP protobuf export", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
		}
		if err == nil {
			err = proto.Unmarshal(raw, &req)
		}
		if err != nil {
			t.Errorf("OTLP receiver: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		o.mu.Lock()
		o.exports++
		for _, rs := range req.ResourceSpans {
			o.services = append(o.services, attr(rs.GetResource().GetAttributes(), "service.name").GetStringValue())
			for _, ss := range rs.ScopeSpans {
				o.spans = append(o.spans, ss.Spans...)
			}
		}
		o.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(o.srv.Close)
	return o
}

// endpoint is the receiver in --otlp-traces-endpoint's host:port form.
func (o *otlpReceiver) endpoint() string { return strings.TrimPrefix(o.srv.URL, "http://") }

// received returns the exports and spans received so far.
func (o *otlpReceiver) received() (int, []*tracepb.Span) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.exports, append([]*tracepb.Span(nil), o.spans...)
}

// attr returns the value of key among attrs (nil when absent).
func attr(attrs []*commonpb.KeyValue, key string) *commonpb.AnyValue {
	for _, kv := range attrs {
		if kv.Key == key {
			return kv.Value
		}
	}
	return nil
}

// spanNamed returns the spans named name.
func spansNamed(spans []*tracepb.Span, name string) []*tracepb.Span {
	var out []*tracepb.Span
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// traceparentOf parses a W3C traceparent into its trace id, span id and flags (hex).
func traceparentOf(t *testing.T, h string) (traceID, spanID, flags string) {
	t.Helper()
	parts := strings.Split(h, "-")
	require.Len(t, parts, 4, "traceparent %q", h)
	require.Equal(t, "00", parts[0])
	return parts[1], parts[2], parts[3]
}

// stop stops the router as serve does at shutdown (Server.Wait), which flushes the spans.
func (tr *testRouter) stop() {
	tr.srv.Close()
	tr.cancel()
	tr.s.Wait()
}

func tracedPD(t *testing.T, o *otlpReceiver, pw, dw *testWorker) *testRouter {
	cfg := pdConfig([]*testWorker{pw}, []*testWorker{dw}, nil)
	cfg.DPAware = true
	cfg.EnableTrace, cfg.OTLPTracesEndpoint = true, o.endpoint()
	return startRouter(t, cfg)
}

// A PD request under --enable-trace: the receiver gets the router's server span and, under
// it with the same trace id, a prefill and a decode leg naming their worker, rank and decision;
// each worker saw its leg's traceparent. The spans arrive at shutdown: the batch is flushed
// then (the batcher's own delay is seconds longer than the test).
func TestTracingPDLegs(t *testing.T) {
	t.Parallel()
	o := newOTLPReceiver(t)
	pw, dw := newWorker(t, jsonReply(genReply)), newWorker(t, jsonReply(genReply))
	pw.dpSize, dw.dpSize = 2, 2
	tr := tracedPD(t, o, pw, dw)
	status, _, out := tr.post(t, "/generate", `{"text":"hello","sampling_params":{"max_new_tokens":4}}`, map[string]string{"X-Request-Id": "req-1"})
	require.Equal(t, http.StatusOK, status, out)
	tr.requireLoadsZero(t) // both legs over: their spans ended
	tr.stop()

	_, spans := o.received()
	require.Len(t, spans, 3, "server span and two legs")
	srv := spansNamed(spans, "POST /generate")
	pre, dec := spansNamed(spans, "prefill"), spansNamed(spans, "decode")
	require.Len(t, srv, 1)
	require.Len(t, pre, 1)
	require.Len(t, dec, 1)
	root := srv[0]
	assert.Equal(t, tracepb.Span_SPAN_KIND_SERVER, root.Kind)
	assert.Empty(t, root.ParentSpanId, "no traceparent came in: a new trace")
	assert.Equal(t, int64(200), attr(root.Attributes, "http.response.status_code").GetIntValue())
	assert.Equal(t, "req-1", attr(root.Attributes, "pdrouter.request_id").GetStringValue())
	for _, leg := range []struct {
		span *tracepb.Span
		w    *testWorker
		role string
	}{{pre[0], pw, "prefill"}, {dec[0], dw, "decode"}} {
		s := leg.span
		assert.Equal(t, root.TraceId, s.TraceId, "%s: one trace", leg.role)
		assert.Equal(t, root.SpanId, s.ParentSpanId, "%s: child of the router's span", leg.role)
		assert.Equal(t, tracepb.Span_SPAN_KIND_CLIENT, s.Kind)
		assert.Equal(t, leg.w.URL(), attr(s.Attributes, "pdrouter.worker").GetStringValue())
		assert.NotNil(t, attr(s.Attributes, "pdrouter.dp_rank"), "%s: --dp-aware leg names its rank", leg.role)
		assert.NotEmpty(t, attr(s.Attributes, "pdrouter.decision.reason").GetStringValue())
		assert.NotNil(t, attr(s.Attributes, "pdrouter.cached_tokens.predicted"))
		assert.Equal(t, int64(0), attr(s.Attributes, "pdrouter.attempt").GetIntValue())
		assert.Equal(t, int64(200), attr(s.Attributes, "http.response.status_code").GetIntValue())
		assert.Equal(t, "success", attr(s.Attributes, "pdrouter.outcome").GetStringValue())
		calls := leg.w.callsTo("/generate")
		require.Len(t, calls, 1)
		tid, sid, flags := traceparentOf(t, calls[0].header.Get("Traceparent"))
		assert.Equal(t, hex.EncodeToString(root.TraceId), tid, "%s worker saw the trace", leg.role)
		assert.Equal(t, hex.EncodeToString(s.SpanId), sid, "%s worker's parent is its leg's span", leg.role)
		assert.Equal(t, "01", flags)
	}
	assert.Equal(t, []string{defaultTraceService}, o.services)
}

// A client's traceparent is continued: the router's span is its child in its trace, and its
// tracestate goes on to the workers; an unsampled one is honoured (nothing exported, the
// workers still get the trace, unsampled).
func TestTracingContinuesClientTrace(t *testing.T) {
	t.Parallel()
	const tid, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	o := newOTLPReceiver(t)
	pw, dw := newWorker(t, jsonReply(genReply)), newWorker(t, jsonReply(genReply))
	tr := tracedPD(t, o, pw, dw)
	for _, flags := range []string{"01", "00"} {
		status, _, out := tr.post(t, "/generate", `{"text":"hello"}`, map[string]string{
			"Traceparent": "00-" + tid + "-" + parent + "-" + flags, "Tracestate": "vendor=x"})
		require.Equal(t, http.StatusOK, status, out)
	}
	tr.requireLoadsZero(t)
	tr.stop()

	_, spans := o.received()
	require.Len(t, spans, 3, "the sampled request's spans only")
	root := spansNamed(spans, "POST /generate")
	require.Len(t, root, 1)
	assert.Equal(t, tid, hex.EncodeToString(root[0].TraceId))
	assert.Equal(t, parent, hex.EncodeToString(root[0].ParentSpanId))
	assert.Equal(t, "vendor=x", root[0].TraceState)
	for _, w := range []*testWorker{pw, dw} {
		calls := w.callsTo("/generate")
		require.Len(t, calls, 2)
		var flags []string // in any order: a prefill leg may arrive after the next request's
		for _, c := range calls {
			got, sid, f := traceparentOf(t, c.header.Get("Traceparent"))
			assert.Equal(t, tid, got)
			assert.NotEqual(t, parent, sid, "the worker's parent is the router's leg, not the client")
			assert.Equal(t, "vendor=x", c.header.Get("Tracestate"))
			flags = append(flags, f)
		}
		assert.ElementsMatch(t, []string{"01", "00"}, flags, "each request's sampled flag")
	}
}

// Regular mode: a failed attempt and its retry are two regular legs under one server span,
// numbered, the failed one an error with the worker's status.
func TestTracingRegularRetry(t *testing.T) {
	t.Parallel()
	o := newOTLPReceiver(t)
	bad, good := newWorker(t, statusReply(http.StatusServiceUnavailable, "busy")), newWorker(t, jsonReply(genReply))
	cfg := DefaultConfig()
	cfg.WorkerURLs = []string{bad.URL(), good.URL()}
	cfg.Policy = router.PolicyRoundRobin
	cfg.RetryInitialBackoffMs, cfg.RetryMaxBackoffMs = 1, 1
	cfg.EnableTrace, cfg.OTLPTracesEndpoint = true, "http://"+o.endpoint()+"/v1/traces"
	tr := startRouter(t, cfg)
	status, _, out := tr.post(t, "/generate", `{"text":"hello"}`, nil)
	require.Equal(t, http.StatusOK, status, out)
	tr.stop()

	_, spans := o.received()
	legs := spansNamed(spans, "regular")
	require.Len(t, legs, 2)
	root := spansNamed(spans, "POST /generate")
	require.Len(t, root, 1)
	assert.Equal(t, int64(1), attr(root[0].Attributes, "pdrouter.failed_attempts").GetIntValue())
	byAttempt := map[int64]*tracepb.Span{}
	for _, l := range legs {
		assert.Equal(t, root[0].SpanId, l.ParentSpanId)
		byAttempt[attr(l.Attributes, "pdrouter.attempt").GetIntValue()] = l
	}
	require.Contains(t, byAttempt, int64(0))
	require.Contains(t, byAttempt, int64(1))
	first, retry := byAttempt[0], byAttempt[1]
	assert.Equal(t, bad.URL(), attr(first.Attributes, "pdrouter.worker").GetStringValue())
	assert.Equal(t, int64(503), attr(first.Attributes, "http.response.status_code").GetIntValue())
	assert.Equal(t, tracepb.Status_STATUS_CODE_ERROR, first.GetStatus().GetCode())
	assert.Equal(t, good.URL(), attr(retry.Attributes, "pdrouter.worker").GetStringValue())
	assert.Equal(t, "success", attr(retry.Attributes, "pdrouter.outcome").GetStringValue())
	assert.NotEqual(t, tracepb.Status_STATUS_CODE_ERROR, retry.GetStatus().GetCode())
}

// Off (the default), the receiver hears nothing, even with its endpoint configured, and the
// workers get the client's traceparent as it came (or none).
func TestTracingOffSendsNothing(t *testing.T) {
	t.Parallel()
	o := newOTLPReceiver(t)
	pw, dw := newWorker(t, jsonReply(genReply)), newWorker(t, jsonReply(genReply))
	cfg := pdConfig([]*testWorker{pw}, []*testWorker{dw}, nil)
	cfg.OTLPTracesEndpoint = o.endpoint()
	tr := startRouter(t, cfg)
	require.Nil(t, tr.s.tr)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	status, _, out := tr.post(t, "/generate", `{"text":"hello"}`, map[string]string{"Traceparent": tp})
	require.Equal(t, http.StatusOK, status, out)
	status, _, out = tr.post(t, "/generate", `{"text":"hello"}`, nil)
	require.Equal(t, http.StatusOK, status, out)
	tr.requireLoadsZero(t)
	tr.stop()
	exports, spans := o.received()
	assert.Zero(t, exports)
	assert.Empty(t, spans)
	for _, w := range []*testWorker{pw, dw} {
		calls := w.callsTo("/generate")
		require.Len(t, calls, 2)
		// In any order: a prefill leg may arrive after the next request's.
		assert.ElementsMatch(t, []string{tp, ""}, []string{calls[0].header.Get("Traceparent"), calls[1].header.Get("Traceparent")})
	}
}

// The tracing settings are checked when tracing is on, naming the flag at fault.
func TestTracingValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		endpoint string
		ratio    float64
		err      string
	}{
		{"localhost:4318", 1, ""},
		{"collector.observability:4318", 0.1, ""},
		{"https://tempo.example:4318", 0, ""},
		{"http://127.0.0.1:4318/otlp/v1/traces", 1, ""},
		{"localhost", 1, "--otlp-traces-endpoint"},
		{":4318", 1, "--otlp-traces-endpoint"},
		{"localhost:0", 1, "--otlp-traces-endpoint"},
		{"grpc://localhost:4317", 1, "--otlp-traces-endpoint"},
		{"localhost:4318", 1.5, "--trace-sampling-ratio"},
		{"localhost:4318", -0.1, "--trace-sampling-ratio"},
	} {
		cfg := DefaultConfig()
		cfg.OTLPTracesEndpoint, cfg.TraceSamplingRatio = c.endpoint, c.ratio
		require.NoError(t, cfg.Validate(), "tracing off: not checked")
		cfg.EnableTrace = true
		err := cfg.Validate()
		if c.err == "" {
			assert.NoError(t, err, c.endpoint)
			continue
		}
		require.Error(t, err, "%s %g", c.endpoint, c.ratio)
		assert.Contains(t, err.Error(), c.err)
	}
}
