package server

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/router/wire"
)

// The SLO headers predicted_latency reads, as llm-d's inference scheduler and SGLang's router
// spell them: llm-d's x-slo-ttft-ms and x-slo-tpot-ms (milliseconds), SGLang's
// x-sgl-ttft-slo-ms (milliseconds) and x-sgl-tps-slo (output tokens per second: a TPOT of its
// inverse). llm-d's name wins when a request carries both.
const (
	headerSLOTTFT    = "X-Slo-Ttft-Ms"
	headerSLOTPOT    = "X-Slo-Tpot-Ms"
	headerSGLTTFTSLO = "X-Sgl-Ttft-Slo-Ms"
	headerSGLTPSSLO  = "X-Sgl-Tps-Slo"
)

// initLatency wires predicted_latency: the engine models of the roles it routes (an error
// naming --latency-profile when one is missing), the predicted-against-observed metrics and
// decision-log lines.
func (s *Server) initLatency(models map[router.Role]router.LatencyModel, reg prometheus.Registerer) error {
	roles := []router.Role{router.Regular}
	if s.r.PD() {
		roles = []router.Role{router.Prefill, router.Decode}
	}
	for _, role := range roles {
		if s.r.Policy(role).Name() != router.PolicyPredictedLatency {
			continue
		}
		s.latency = true
		m := models[role]
		if m == nil {
			return router.SettingErrorf("latency_profile", "--policy predicted_latency needs the %s workers' engine model: give --latency-profile (a preset as router fakeworker profiles lists, or a profile file)", role)
		}
		if err := s.r.UseLatencyModel(role, m); err != nil {
			return err
		}
	}
	if !s.latency {
		return nil
	}
	lm := &latencyMetrics{r: s.r,
		ratio: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "pdrouter_latency_prediction_ratio",
			Help:    "predicted_latency: observed ÷ predicted TTFT and TPOT of each streamed request (router-timed), by kind (ttft, tpot): 1 is a perfect prediction.",
			Buckets: []float64{.25, .5, .67, .8, .9, 1, 1.1, 1.25, 1.5, 2, 4}}, []string{"kind"})}
	lm.ttft, lm.tpot = lm.ratio.WithLabelValues("ttft"), lm.ratio.WithLabelValues("tpot")
	reg.MustRegister(lm.ratio, lm)
	s.r.OnObserved(func(d *router.Decision, p router.Prediction) {
		if p.TTFT > 0 && p.ObservedTTFT > 0 {
			lm.ttft.Observe(float64(p.ObservedTTFT) / float64(p.TTFT))
		}
		if p.TPOT > 0 && p.ObservedTPOT > 0 {
			lm.tpot.Observe(float64(p.ObservedTPOT) / float64(p.TPOT))
		}
		if s.dlog == nil {
			return
		}
		line := wire.ObservedLine{ID: d.LogID(), Prefill: router.RedactURL(p.Prefill.Name()), Decode: router.RedactURL(p.Decode.Name()),
			Predicted: predictedFigures(p), Observed: wire.Figures(p.ObservedTTFT, p.ObservedTPOT, 0, 0)}
		s.dmu.Lock()
		defer s.dmu.Unlock()
		s.dbuf = wire.AppendObservedLine(s.dbuf[:0], &line)
		if _, err := s.dlog.Write(s.dbuf); err != nil {
			s.log.Error("decision log write failed", "err", err)
		}
	})
	return nil
}

// predictedFigures are p's predicted figures for the decision log.
func predictedFigures(p router.Prediction) wire.LatencyFigures {
	return wire.Figures(p.TTFT, p.TPOT, p.CorrectionTTFT, p.CorrectionTPOT)
}

// latencyMetrics are predicted_latency's: the ratio of each observation to its prediction, and
// each target's corrections at scrape time.
type latencyMetrics struct {
	r          *router.Router
	ratio      *prometheus.HistogramVec
	ttft, tpot prometheus.Observer
}

var descLatencyCorrection = prometheus.NewDesc("pdrouter_latency_correction",
	"predicted_latency: the target's online correction of the engine model's prediction, by kind (ttft, tpot): its recent observed ÷ predicted ratio (1: the model is right).",
	[]string{"target", "role", "kind"}, nil)

func (m *latencyMetrics) Describe(ch chan<- *prometheus.Desc) { ch <- descLatencyCorrection }

func (m *latencyMetrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.r.LatencyCorrections() {
		name := router.RedactURL(c.Name)
		ch <- prometheus.MustNewConstMetric(descLatencyCorrection, prometheus.GaugeValue, c.TTFT, name, c.Role.String(), "ttft")
		ch <- prometheus.MustNewConstMetric(descLatencyCorrection, prometheus.GaugeValue, c.TPOT, name, c.Role.String(), "tpot")
	}
}

// requestSLOs sets q's SLOs from the request's headers (see headerSLOTTFT); a header that is
// not a positive number is the client's error.
func requestSLOs(h http.Header, q *router.Request) error {
	ttft, err := sloHeader(h, headerSLOTTFT, headerSGLTTFTSLO)
	if err != nil {
		return err
	}
	tpot, err := sloHeader(h, headerSLOTPOT, "")
	if err != nil {
		return err
	}
	if v := h.Get(headerSGLTPSSLO); tpot == 0 && v != "" {
		tps, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || !(tps > 0) || math.IsInf(tps, 0) {
			return fmt.Errorf("header %s: %q is not a positive number of tokens per second", strings.ToLower(headerSGLTPSSLO), v)
		}
		tpot = time.Duration(float64(time.Second) / tps)
	}
	q.TTFTSLO, q.TPOTSLO = ttft, tpot
	return nil
}

// sloHeader reads a millisecond SLO from the first of the headers present (0: none).
func sloHeader(h http.Header, names ...string) (time.Duration, error) {
	for _, name := range names {
		if name == "" {
			continue
		}
		v := h.Get(name)
		if v == "" {
			continue
		}
		msv, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || !(msv > 0) || math.IsInf(msv, 0) || msv > 1e9 {
			return 0, fmt.Errorf("header %s: %q is not a positive number of milliseconds", strings.ToLower(name), v)
		}
		return time.Duration(msv * float64(time.Millisecond)), nil
	}
	return 0, nil
}
