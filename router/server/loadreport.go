package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/pdrouter/pdrouter/router"
)

// rankLoad is one DP rank's engine load as a worker reported it.
type rankLoad struct {
	rank int
	load router.EngineLoad
}

// errNoRanks is a report that lists no rank yet (SGLang answers an empty list while its
// schedulers start): not an error of the worker, nothing to route on either.
var errNoRanks = errors.New("the report lists no DP rank yet")

// parseV1Loads reads SGLang's GET /v1/loads JSON answer (python/sglang/srt/entrypoints/
// v1_loads.py: {"timestamp", "version", "loads": [{"dp_rank", "num_running_reqs",
// "num_waiting_reqs", "num_waiting_uncached_tokens", "num_used_tokens", "num_total_tokens",
// "max_total_num_tokens", "max_running_requests", "token_usage", "gen_throughput",
// "cache_hit_rate", "utilization", …optional sections}]}). Unknown fields are ignored; a field
// of the wrong type, a negative count or a missing loads list is an error.
func parseV1Loads(body []byte) ([]rankLoad, error) {
	var doc struct {
		Loads *[]struct {
			DPRank                   *float64 `json:"dp_rank"`
			NumRunningReqs           float64  `json:"num_running_reqs"`
			NumWaitingReqs           float64  `json:"num_waiting_reqs"`
			NumWaitingUncachedTokens *float64 `json:"num_waiting_uncached_tokens"`
			NumUsedTokens            float64  `json:"num_used_tokens"`
			MaxTotalNumTokens        float64  `json:"max_total_num_tokens"`
			MaxRunningRequests       float64  `json:"max_running_requests"`
			TokenUsage               float64  `json:"token_usage"`
			GenThroughput            float64  `json:"gen_throughput"`
		} `json:"loads"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("not SGLang's /v1/loads JSON: %w", err)
	}
	if doc.Loads == nil {
		return nil, errors.New(`not SGLang's /v1/loads JSON: no "loads" list`)
	}
	if len(*doc.Loads) == 0 {
		return nil, errNoRanks
	}
	out := make([]rankLoad, 0, len(*doc.Loads))
	for i, e := range *doc.Loads {
		rank := i
		if e.DPRank != nil {
			rank = int(*e.DPRank)
		}
		uncached := -1.0
		if e.NumWaitingUncachedTokens != nil {
			uncached = *e.NumWaitingUncachedTokens
		}
		l, err := engineLoad(rank, e.NumRunningReqs, e.NumWaitingReqs, uncached, e.NumUsedTokens, e.MaxTotalNumTokens,
			e.MaxRunningRequests, e.TokenUsage, e.GenThroughput)
		if err != nil {
			return nil, err
		}
		out = append(out, rankLoad{rank: rank, load: l})
	}
	return out, nil
}

// engineLoad checks one rank's values (counts: whole and ≥ 0 within int range; uncached -1:
// not reported; token usage and throughput finite and ≥ 0) and builds its EngineLoad.
func engineLoad(rank int, running, waiting, uncached, used, maxTotal, maxRunning, usage, throughput float64) (router.EngineLoad, error) {
	if rank < 0 || rank > 1<<16 {
		return router.EngineLoad{}, fmt.Errorf("dp_rank %d is out of range", rank)
	}
	counts := []struct {
		name string
		v    float64
	}{{"num_running_reqs", running}, {"num_waiting_reqs", waiting}, {"num_used_tokens", used},
		{"max_total_num_tokens", maxTotal}, {"max_running_requests", maxRunning}}
	for _, c := range counts {
		if !(c.v >= 0 && c.v < 1<<40) {
			return router.EngineLoad{}, fmt.Errorf("dp_rank %d: %s %v is not a count", rank, c.name, c.v)
		}
	}
	if !(uncached == -1 || uncached >= 0 && uncached < 1<<40) {
		return router.EngineLoad{}, fmt.Errorf("dp_rank %d: num_waiting_uncached_tokens %v is not a count", rank, uncached)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"token_usage", usage}, {"gen_throughput", throughput}} {
		if !(f.v >= 0 && !math.IsInf(f.v, 1)) {
			return router.EngineLoad{}, fmt.Errorf("dp_rank %d: %s %v is not a non-negative number", rank, f.name, f.v)
		}
	}
	return router.EngineLoad{RunningReqs: int(running), WaitingReqs: int(waiting), WaitingUncachedTokens: int(uncached),
		UsedTokens: int(used), MaxTotalTokens: int(maxTotal), TokenUsage: usage, GenThroughput: throughput,
		MaxRunningRequests: int(maxRunning)}, nil
}

// loadGauges are the Prometheus gauges of SGLang's /metrics a load report is read from (older
// SGLang, without /v1/loads), by the name after its "sglang:" or "sglang_" prefix.
var loadGauges = []string{"num_running_reqs", "num_queue_reqs", "num_waiting_reqs", "num_waiting_uncached_tokens",
	"num_used_tokens", "max_total_num_tokens", "max_running_requests", "token_usage", "gen_throughput"}

// parseLoadGauges reads a load report from SGLang's Prometheus text (/metrics, or
// /v1/loads?format=prometheus): per dp_rank label (none: rank 0), the gauges of loadGauges
// (num_queue_reqs standing for num_waiting_reqs). Ranks without num_running_reqs are not
// reported; no such gauge at all is an error. Series of several tp ranks of one dp rank add.
func parseLoadGauges(body []byte) ([]rankLoad, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("not Prometheus text: %w", err)
	}
	vals := map[int]map[string]float64{}
	for name, fam := range families {
		key := ""
		for _, prefix := range []string{"sglang:", "sglang_"} {
			if len(name) > len(prefix) && name[:len(prefix)] == prefix {
				key = name[len(prefix):]
			}
		}
		if !isLoadGauge(key) {
			continue
		}
		for _, m := range fam.GetMetric() {
			v, ok := gaugeValue(m)
			if !ok {
				continue
			}
			rank := 0
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "dp_rank" {
					r, err := strconv.Atoi(lp.GetValue())
					if err != nil {
						return nil, fmt.Errorf("%s: dp_rank %q is not a number", name, lp.GetValue())
					}
					rank = r
				}
			}
			if vals[rank] == nil {
				vals[rank] = map[string]float64{}
			}
			vals[rank][key] += v
		}
	}
	ranks := make([]int, 0, len(vals))
	for r, v := range vals {
		if _, ok := v["num_running_reqs"]; ok {
			ranks = append(ranks, r)
		}
	}
	if len(ranks) == 0 {
		return nil, errors.New("no sglang num_running_reqs gauge")
	}
	sort.Ints(ranks)
	out := make([]rankLoad, 0, len(ranks))
	for _, r := range ranks {
		v := vals[r]
		waiting, ok := v["num_waiting_reqs"]
		if !ok {
			waiting = v["num_queue_reqs"]
		}
		uncached, ok := v["num_waiting_uncached_tokens"]
		if !ok {
			uncached = -1
		}
		l, err := engineLoad(r, v["num_running_reqs"], waiting, uncached, v["num_used_tokens"], v["max_total_num_tokens"],
			v["max_running_requests"], v["token_usage"], v["gen_throughput"])
		if err != nil {
			return nil, err
		}
		out = append(out, rankLoad{rank: r, load: l})
	}
	return out, nil
}

func isLoadGauge(key string) bool {
	for _, g := range loadGauges {
		if g == key {
			return true
		}
	}
	return false
}

// gaugeValue returns a gauge's (or an untyped sample's) value.
func gaugeValue(m *dto.Metric) (float64, bool) {
	switch {
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue(), true
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue(), true
	}
	return 0, false
}
