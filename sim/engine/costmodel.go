package engine

import (
	"time"
)

// CostModel is a server's step-time and KV-transfer model asked directly, without simulating:
// what the router's predicted_latency policy predicts TTFT and TPOT with (it satisfies
// router.LatencyModel without importing it). It times work with the very functions the
// server's steps are timed with (the profile's prefill and decode steps, DP-attention split,
// CUDA-graph padding, speculative decoding, speedup), on one idle rank. It reads no clock and
// is safe for concurrent use (it never changes).
type CostModel struct{ s *Server }

// NewCostModel returns the cost model of a server configured as cfg (defaults filled in as New
// does), or an error naming cfg's invalid field.
func NewCostModel(cfg Config) (*CostModel, error) {
	cfg.KVEvents = nil
	s, err := New(cfg)
	if err != nil {
		return nil, err
	}
	return &CostModel{s: s}, nil
}

// Config returns the server configuration the model times (defaults filled in).
func (m *CostModel) Config() Config { return m.s.cfg }

// prefillStep is one prefill step of n new tokens after ctx tokens of context.
func (m *CostModel) prefillStep(n, ctx int) time.Duration {
	s := m.s
	newCtx := float64(n) * (float64(ctx) + float64(n)/2)
	if s.split() {
		return s.dur(s.cfg.Profile.AttnPrefillTime(n, newCtx) + s.cfg.Profile.SharedPrefillTime(n))
	}
	return s.dur(s.cfg.Profile.PrefillTime(n, newCtx))
}

// PrefillTime is the time to prefill uncached tokens after cached ones, chunk by chunk
// (ChunkedPrefillSize), alone on an idle rank, plus the profile's host overhead (tokenizer,
// HTTP); a Constant profile's TTFT.
func (m *CostModel) PrefillTime(uncached, cached int) time.Duration {
	s := m.s
	p := &s.cfg.Profile
	if p.Constant {
		return s.dur(p.TTFT)
	}
	d := s.dur(seconds(p.HostOverhead))
	chunk := max(s.cfg.ChunkedPrefillSize, 1)
	for done := 0; done < uncached; done += chunk {
		d += m.prefillStep(min(chunk, uncached-done), cached+done)
	}
	return d
}

// QueueTime is the time a prompt waits behind tokens queued uncached tokens of other prompts
// on a rank whose running decode batch takes step a step (0: none runs, as on a prefill
// server; a Constant profile queues nothing: every request runs at once): the queue as full
// chunks of fresh prompts, plus the rest of the step in flight. A rank with a queue or a
// running batch is stepping, and a prompt reaching it mid-step waits for that step to end,
// under the overlap scheduler (the default) for the batch formed at its start too; an idle
// rank (nothing queued or running) takes it at once, so a lone request's TTFT stays
// PrefillTime. With only a queue the step in flight is a prefill step of min(tokens, chunk)
// fresh tokens, half of it left on average, and the batch formed at its start is the queue's
// (its chunks). With a running batch (regular workers) the step in flight is a decode step,
// half of it left, and the batch formed at its start, which the prompt missed, is another
// decode step when nothing was queued then, so the prompt waits 1.5 steps besides the queue's
// chunks (half a step without the overlap scheduler). Under Poisson arrivals at 30, 60 and 85
// % of a llama3-8b-h100 rank's prefill capacity, the requests that found a queue waited on
// average 47, 109 and 154 ms longer than its chunks alone, and −5, 37 and 47 ms longer than
// QueueTime (TestCostModelQueueTimeUnderLoad); prompts reaching ranks decoding batches of 1–32
// requests at random phases are predicted within 0.42 ms on average, where PrefillTime alone
// misses by 8.8–11.1 ms (TestCostModelQueueTimeDecoding).
func (m *CostModel) QueueTime(tokens int, step time.Duration) time.Duration {
	s := m.s
	if tokens <= 0 && step <= 0 || s.cfg.Profile.Constant {
		return 0
	}
	chunk := max(s.cfg.ChunkedPrefillSize, 1)
	queue := time.Duration(float64(m.prefillStep(chunk, 0)) * float64(max(tokens, 0)) / float64(chunk))
	if step <= 0 {
		return m.prefillStep(min(tokens, chunk), 0)/2 + queue
	}
	if s.cfg.DisableOverlap {
		return step/2 + queue
	}
	return step + step/2 + queue
}

// TransferTime is a prompt of tokens' KV transfer on an idle link: T0 + PDOverhead +
// tokens·KVBytesPerToken / LinkBandwidth (0 for a Constant profile, whose TTFT holds it).
func (m *CostModel) TransferTime(tokens int) time.Duration {
	s := m.s
	p := &s.cfg.Profile
	if p.Constant {
		return 0
	}
	bw := s.cfg.LinkBandwidth
	sec := p.T0 + p.PDOverhead
	if bw > 0 {
		sec += float64(tokens) * p.KVBytesPerToken / bw
	}
	return s.dur(seconds(sec))
}

// DecodeStepTime is one decode step of batch requests whose contexts sum to context tokens (a
// Constant profile's ITL).
func (m *CostModel) DecodeStepTime(batch, context int) time.Duration {
	s := m.s
	if s.cfg.Profile.Constant {
		return s.dur(s.cfg.Profile.ITL)
	}
	d, n := s.decodeStepTime(max(batch, 1), context)
	if s.split() {
		d += s.dur(s.cfg.Profile.SharedTime(n))
	}
	return d
}

// MaxRunningRequests is a rank's max_running_requests.
func (m *CostModel) MaxRunningRequests() int { return m.s.cfg.MaxRunningRequests }

// MaxTotalTokens is a rank's KV capacity in tokens (max_total_num_tokens).
func (m *CostModel) MaxTotalTokens() int { return m.s.cfg.MaxTotalTokens }
