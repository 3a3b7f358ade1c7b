package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/pdrouter/pdrouter/router"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// OpenTelemetry tracing (--enable-trace). Each inference request gets a server span (its
// handler's time: body, admission, every attempt), continuing the client's W3C traceparent
// when it sent one; each upstream leg of each attempt (regular, or PD's prefill and decode)
// gets a client span under it, from its send to the end of its answer, and the worker is sent
// that span's traceparent (and the client's tracestate), in place of the client's. Spans go
// to the collector in batches over OTLP/HTTP; Server.Wait flushes them (traceFlushTimeout).
//
// Off (the default), Server.tr is nil: the request path checks it, and an attempt whether it
// has spans, and does nothing else. Nothing is added to the request's state either (pdShared
// keeps its size class; BenchmarkProxy's B/req): the request's span rides in its context, a
// regular leg's in a local variable, a PD attempt's behind one pointer (legSpans), and the
// attempt's number is read from the workers it avoids.

// traceFlushTimeout bounds the flush of the spans still batched when the server stops.
const traceFlushTimeout = 5 * time.Second

// defaultTraceService is the spans' service.name without --trace-service-name or
// $OTEL_SERVICE_NAME.
const defaultTraceService = "pdrouter"

// traceProp reads and writes W3C traceparent and tracestate headers.
var traceProp = propagation.TraceContext{}

// tracing is the server's tracer and the provider that batches and exports its spans.
type tracing struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
}

// newTracing returns the tracing cfg asks for: nil when --enable-trace is off. Nothing is
// dialled until the first batch is exported; export errors are logged to log (OTel's global
// error handler) and never fail a request.
func newTracing(cfg Config, log *slog.Logger) (*tracing, error) {
	if !cfg.EnableTrace {
		return nil, nil
	}
	opts, err := otlpOptions(cfg.OTLPTracesEndpoint)
	if err != nil {
		return nil, router.SettingErrorf("otlp_traces_endpoint", "--otlp-traces-endpoint %q: %v", cfg.OTLPTracesEndpoint, err)
	}
	exp, err := otlptracehttp.New(context.Background(), opts...)
	if err != nil {
		return nil, fmt.Errorf("--otlp-traces-endpoint: %w", err)
	}
	name := cfg.TraceServiceName
	if name == "" {
		name = os.Getenv("OTEL_SERVICE_NAME")
	}
	if name == "" {
		name = defaultTraceService
	}
	// $OTEL_RESOURCE_ATTRIBUTES adds to the resource; the service name is decided above.
	res, err := resource.New(context.Background(), resource.WithFromEnv(),
		resource.WithAttributes(attribute.String("service.name", name)))
	if err != nil {
		log.Warn("OTEL_RESOURCE_ATTRIBUTES ignored in part", "err", err.Error())
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("trace export failed", "endpoint", cfg.OTLPTracesEndpoint, "err", err.Error())
	}))
	if otlpPort(cfg.OTLPTracesEndpoint) == "4317" {
		log.Warn("--otlp-traces-endpoint names port 4317, OTLP/gRPC's: pdrouter exports OTLP/HTTP, which collectors take on 4318")
	}
	p := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.TraceSamplingRatio))))
	return &tracing{provider: p, tracer: p.Tracer("github.com/pdrouter/pdrouter/router/server")}, nil
}

// otlpOptions turns --otlp-traces-endpoint into the exporter's endpoint: host:port (smg's
// form) is plain HTTP to /v1/traces; an http:// or https:// URL is taken as it is, its path
// /v1/traces when it has none.
func otlpOptions(endpoint string) ([]otlptracehttp.Option, error) {
	if !strings.Contains(endpoint, "://") {
		host, port, err := net.SplitHostPort(endpoint)
		if err != nil || host == "" {
			return nil, fmt.Errorf("want host:port (e.g. otel-collector:4318) or an http(s):// URL")
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("port %q is not in [1,65535]", port)
		}
		return []otlptracehttp.Option{otlptracehttp.WithEndpoint(endpoint), otlptracehttp.WithURLPath("/v1/traces"), otlptracehttp.WithInsecure()}, nil
	}
	u, err := url.Parse(endpoint)
	switch {
	case err != nil:
		return nil, err
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("scheme %q is not http or https (pdrouter exports OTLP/HTTP)", u.Scheme)
	case u.Host == "":
		return nil, fmt.Errorf("no host")
	}
	path := u.Path
	if path == "" || path == "/" {
		path = "/v1/traces"
	}
	opts := []otlptracehttp.Option{otlptracehttp.WithEndpoint(u.Host), otlptracehttp.WithURLPath(path)}
	if u.Scheme == "http" {
		opts = append(opts, otlptracehttp.WithInsecure())
	}
	return opts, nil
}

// otlpPort returns the port --otlp-traces-endpoint names ("" when it names none).
func otlpPort(endpoint string) string {
	if u, err := url.Parse(endpoint); err == nil && u.Host != "" {
		return u.Port()
	}
	_, port, _ := net.SplitHostPort(endpoint)
	return port
}

// validateTrace checks the tracing settings (only when tracing is on: the endpoint's default
// is then in use).
func (c Config) validateTrace() error {
	if !c.EnableTrace {
		return nil
	}
	if _, err := otlpOptions(c.OTLPTracesEndpoint); err != nil {
		return router.SettingErrorf("otlp_traces_endpoint", "--otlp-traces-endpoint %q: %v", c.OTLPTracesEndpoint, err)
	}
	if !(c.TraceSamplingRatio >= 0 && c.TraceSamplingRatio <= 1) {
		return router.SettingErrorf("trace_sampling_ratio", "--trace-sampling-ratio %g is outside [0,1]", c.TraceSamplingRatio)
	}
	return nil
}

// shutdown exports the spans still batched, within traceFlushTimeout, and stops the exporter.
func (t *tracing) shutdown(log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), traceFlushTimeout)
	defer cancel()
	if err := t.provider.Shutdown(ctx); err != nil {
		log.Warn("trace flush on shutdown failed", "err", err.Error())
	}
}

// legSpans are the spans of a PD attempt's two legs.
type legSpans struct{ prefill, decode trace.Span }

// startRequest starts the server span of x's request, the child of the client's traceparent
// when it sent one, and returns the request with the span in its context (x.req too).
func (t *tracing) startRequest(x *exchange) *http.Request {
	req, route := x.req, x.route.String()
	ctx := traceProp.Extract(req.Context(), propagation.HeaderCarrier(req.Header))
	ctx, _ = t.tracer.Start(ctx, req.Method+" "+route, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.request.method", req.Method), attribute.String("http.route", route)))
	x.req = req.WithContext(ctx)
	return x.req
}

// endRequest ends x's server span with the status answered, the request's id and how many
// attempts failed (each retried while retries remained).
func (t *tracing) endRequest(x *exchange) {
	span := trace.SpanFromContext(x.req.Context())
	if sw, ok := x.w.(*statusWriter); ok {
		code := sw.status
		if code == 0 {
			code = http.StatusOK
		}
		if sw.streamErr != 0 { // the head said 200; the stream failed after it
			code = sw.streamErr
		}
		span.SetAttributes(attribute.Int("http.response.status_code", code))
		if code >= 500 {
			span.SetStatus(codes.Error, http.StatusText(code))
		}
	}
	span.SetAttributes(attribute.String("pdrouter.request_id", x.id), attribute.Int("pdrouter.failed_attempts", x.failedAttempts()))
	span.End()
}

// startLeg starts and returns the client span of r, one upstream leg of x's current attempt,
// role's part of d, and makes r.hdr the forwarded headers with the span's traceparent in place
// of the client's. The attempt's number (0, then 1 per retry) is how many workers the
// request avoids: each failed attempt adds its own (Server.route).
func (t *tracing) startLeg(x *exchange, r *upstreamRequest, d *router.Decision, role router.Role) trace.Span {
	attrs := []attribute.KeyValue{
		attribute.String("pdrouter.role", r.role),
		attribute.String("pdrouter.worker", router.RedactURL(r.worker)),
		attribute.String("url.path", r.path),
		attribute.Int("pdrouter.attempt", x.failedAttempts()),
	}
	if l, ok := d.Leg(role); ok {
		attrs = append(attrs, attribute.String("pdrouter.decision.reason", string(l.Reason)),
			attribute.Float64("pdrouter.decision.match_rate", l.MatchRate),
			attribute.Int("pdrouter.cached_tokens.predicted", l.PredictedCachedTokens),
			attribute.Bool("pdrouter.decision.kv_index", l.KVIndex))
		if l.Signal != "" {
			attrs = append(attrs, attribute.String("pdrouter.decision.load_signal", string(l.Signal)))
		}
		if rank, ok := l.Target.Rank(); ok {
			attrs = append(attrs, attribute.Int("pdrouter.dp_rank", rank))
		}
	}
	ctx, span := t.tracer.Start(x.req.Context(), r.role,
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	h := make(http.Header, len(r.hdr)+2)
	for k, v := range r.hdr {
		if k != "Traceparent" && k != "Tracestate" { // the client's: Inject writes ours (its tracestate kept)
			h[k] = v
		}
	}
	traceProp.Inject(ctx, propagation.HeaderCarrier(h))
	r.hdr = h
	return span
}

// traceSent records on a leg's span how its send went (send's results): the worker's status,
// or the error.
func traceSent(span trace.Span, resp *http.Response, ue *upstreamError) {
	if ue != nil && ue.Status == 0 {
		span.SetStatus(codes.Error, ue.Error())
		return
	}
	var status int
	if ue != nil {
		status = ue.Status
	} else {
		status = resp.StatusCode
	}
	span.SetAttributes(attribute.Int("http.response.status_code", status))
	if status >= 500 {
		span.SetStatus(codes.Error, http.StatusText(status))
	}
}

// endLeg ends a leg's span (nil: tracing is off) with its outcome (the breaker's view:
// success, failure, cancelled) and, when it failed after its send, err.
func endLeg(span trace.Span, o router.Outcome, err error) {
	if span == nil {
		return
	}
	span.SetAttributes(attribute.String("pdrouter.outcome", o.String()))
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	} else if o == router.Failure {
		span.SetStatus(codes.Error, "leg failed")
	}
	span.End()
}
