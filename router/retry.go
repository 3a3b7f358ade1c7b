package router

import (
	"bytes"
	"math"
	"math/rand/v2"
	"time"
)

// RetryConfig parameterises retries (SPEC §1.6).
type RetryConfig struct {
	// MaxAttempts is the total number of attempts including the first (--retry-max-retries,
	// default 5; --disable-retries makes it 1).
	MaxAttempts int
	// InitialBackoff is the wait before the first retry (default 50 ms).
	InitialBackoff time.Duration
	// MaxBackoff caps the wait before jitter (default 30 s).
	MaxBackoff time.Duration
	// Multiplier grows the wait per attempt (default 1.5).
	Multiplier float64
	// Jitter scales the wait by a uniform factor in [1-Jitter, 1+Jitter] (default 0.2).
	Jitter float64
	// BudgetPercent and MinConcurrency are the retry budget (Envoy's budget_percent and
	// min_retry_concurrency): a request may start retrying only while fewer than
	// max(MinConcurrency, BudgetPercent% of the requests in flight) are retrying (defaults 100 —
	// no budget — and 3). BudgetPercent 0 or ≥ 100 is no budget.
	BudgetPercent  float64
	MinConcurrency int
}

// retryAllowed reports whether one more request may start retrying while retrying are, out of
// inFlight requests.
func (c RetryConfig) retryAllowed(retrying, inFlight int) bool {
	if c.BudgetPercent <= 0 || c.BudgetPercent >= 100 {
		return true
	}
	return retrying < max(c.MinConcurrency, int(c.BudgetPercent*float64(inFlight)/100))
}

// Backoff returns the wait before retry number attempt (0 = the first retry):
// min(initial·multiplier^attempt, max)·(1 + jitter·u) with u uniform in [-1, 1) drawn from rng.
// A nil rng applies no jitter.
func (c RetryConfig) Backoff(attempt int, rng *rand.Rand) time.Duration {
	base := float64(c.InitialBackoff) * math.Pow(c.Multiplier, float64(attempt))
	if base > float64(c.MaxBackoff) || math.IsInf(base, 0) || math.IsNaN(base) {
		base = float64(c.MaxBackoff)
	}
	if rng != nil && c.Jitter > 0 {
		base *= 1 + c.Jitter*(2*rng.Float64()-1)
	}
	if base < 0 {
		base = 0
	}
	return time.Duration(base)
}

// RetryableStatus reports whether an upstream HTTP status may be retried: 408, 429, 500, 502,
// 503 and 504 (a 500 only when its body does not say the request itself is invalid: see
// Retryable).
func RetryableStatus(status int) bool {
	switch status {
	case 408, 429, 500, 502, 503, 504:
		return true
	}
	return false
}

// invalidRequestPhrases are what a worker's 500 says when the request itself can never
// succeed, on any worker: SGLang's context-length and validation errors
// (python/sglang/srt/managers/tokenizer_manager.py: "is longer than the model's context
// length", "exceeds the maximum allowed length"; scheduler.py's abort of a request that does
// not fit: "exceeds the max_total_num_tokens") and fakeworker's engine ("more than the rank's
// capacity"). Matched case-insensitively.
var invalidRequestPhrases = []string{
	"context length",
	"maximum allowed length",
	"maximum context length",
	"max_total_num_tokens",
	"more than the rank's capacity",
	"validation error",
	"invalid request",
}

// InvalidRequestBody reports whether a worker's error body says the request is invalid
// (invalidRequestPhrases), so retrying it elsewhere cannot help.
func InvalidRequestBody(body []byte) bool {
	b := bytes.ToLower(body)
	for _, p := range invalidRequestPhrases {
		if bytes.Contains(b, []byte(p)) {
			return true
		}
	}
	return false
}

// Retryable is the one rule, for serve and sim alike, of which failed attempts may succeed
// if tried again (on another worker when one is available): none once the response has
// started; transport errors (no response: refused, reset, timed out); 408, 429, 502, 503 and
// 504; and 500 unless the worker's body says the request itself is invalid
// (InvalidRequestBody: a prompt beyond the context length fails on every worker). Any other
// status — a 4xx is the client's request — is final.
func Retryable(a Attempt) bool {
	switch {
	case a.Started:
		return false
	case a.Transport:
		return true
	case a.Status == 500:
		return !InvalidRequestBody(a.Body)
	}
	return RetryableStatus(a.Status)
}

// LegOutcome is what a failed leg tells its worker's circuit breaker, the one rule serve and
// sim share: a 4xx answer is the request's fault and says the worker is well (Success);
// anything else — a transport error, a 5xx — counts against the worker (Failure).
func LegOutcome(a Attempt) Outcome {
	if !a.Transport && a.Status >= 400 && a.Status < 500 {
		return Success
	}
	return Failure
}

// Attempt describes how one attempt failed, for [Retrier.Next].
type Attempt struct {
	// Status is the upstream HTTP status, 0 for a transport error.
	Status int
	// Transport is true when no response was received (connection refused, reset, timeout).
	Transport bool
	// Started is true once any response byte reached the client: no retry is possible then.
	Started bool
	// Body is a bounded prefix of the worker's error body, when it answered one.
	Body []byte
}

// Retrier is one request's retries: its attempts and its place in the router's retry budget.
// Get it from [Router.NewRetrier] when the request arrives and call Done when it ends; it is
// owned by the request's goroutine, and counts and draws jitter under the router's lock.
type Retrier struct {
	r          *Router
	cfg        RetryConfig
	attempts   int  // attempts made so far
	retrying   bool // it holds one of the budget's retrying places
	overBudget bool // the last Next refused for the budget alone
	done       bool
}

// Next records a failed attempt and reports whether to try again and after how long. It
// returns false when the failure is not retryable, the response already started, the
// MaxAttempts attempts are spent, or the request would start retrying while the router's
// retry budget is full (OverBudget then says so).
func (rt *Retrier) Next(a Attempt) (wait time.Duration, retry bool) {
	rt.attempts++
	rt.overBudget = false
	if rt.attempts >= rt.cfg.MaxAttempts || !Retryable(a) {
		return 0, false
	}
	r := rt.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if !rt.retrying {
		if !rt.cfg.retryAllowed(r.retrying, r.inFlight) {
			rt.overBudget = true
			return 0, false
		}
		rt.retrying = true
		r.retrying++
	}
	return rt.cfg.Backoff(rt.attempts-1, r.rng), true
}

// OverBudget reports whether the last Next refused a retry only because the retry budget was
// full (--retry-budget-percent, --retry-min-concurrency).
func (rt *Retrier) OverBudget() bool { return rt.overBudget }

// Done ends the request's part in the retry budget; calls after the first do nothing.
func (rt *Retrier) Done() {
	if rt.done {
		return
	}
	rt.done = true
	r := rt.r
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inFlight--
	if rt.retrying {
		r.retrying--
	}
}

// peerWaitPhrases are what a PD leg's error says when its worker gave up waiting for the other
// worker of the pair, or found it gone, by the role that says it (matched case-insensitively).
// Such a failure is the symptom, on this leg, of the other side's fault: the worker that
// reports it was fine. They are SGLang's own reasons (python/sglang/srt/disaggregation, read at
// sgl-project/sglang main of 2026-07-20, commit 8905cbd, through a mirror), which SGLang wraps
// in "Prefill bootstrap/transfer failed for request …" or "Decode handshake/transfer failed
// for request …" with " with exception KVTransferError(bootstrap_room=N): <reason>" and
// answers with status 500; fakeworker's engine gives the same reasons. The wrappers only name
// the reporting leg. Left out, as they cannot tell who is at fault: "Failed to get kvcache
// from prefill instance" (decode; the prefill pushed the failure, so it was alive), "unknown
// reason from another rank", "Aborted by AbortReq." and NIXL's "KVSender/KVReceiver
// Exception" — those stay the reporting leg's.
var peerWaitPhrases = [numRoles][]string{
	// Reported by a prefill worker, the decode at fault:
	Prefill: {
		// Its decode side never registered the room (hung, dead, never sent its KV indices):
		// CommonKVSender's bootstrap timeout, common/conn.py:1119-1136.
		"in kvpoll.bootstrapping",
		// The wrapper of a failure during the bootstrap (before any KV moved): a bootstrap
		// timeout or the decode's abort of the room; prefill.py:920-945.
		"prefill bootstrap failed",
		// The decode's transfer session is gone: mooncake/conn.py:1331-1334 (fakeworker says
		// it when the decode's bootstrap registration drops).
		"decode instance could be dead",
		// The RDMA write to the decode failed: mooncake/conn.py:1419-1423.
		"failed to send kv chunk of",
		// NIXL: the decode aborted the room (its own timeout or abort): nixl/conn.py:2364-2367.
		"aborted by decode-side abort notification",
	},
	// Reported by a decode worker, the prefill at fault:
	Decode: {
		// The KV never came: the receiver's waiting timeout, common/conn.py:1363-1386.
		"in kvpoll.waitingforinput",
		// The prefill's bootstrap server unreachable or without the rank:
		// mooncake/conn.py:1953-1956, common/conn.py:1251-1254.
		"could not fetch prefill parallel info",
		"could not fetch bootstrap info for",
		// The prefill's bootstrap server stopped answering its heartbeat ("Lost connection
		// with prefill instance", "Losing connection …" before 2026-06): common/conn.py:965-969.
		"connection with prefill instance",
		// The prefill dropped from the table after the handshake: common/conn.py:1184-1187.
		"is healthy before, but now it is down",
		// PD retraction's re-bootstrap /generate to the prefill failed: common/conn.py:377-438.
		"pd retract rebootstrap",
	},
}

// WaitedForPeer reports whether a failed PD leg of role says, in its error body, that its
// worker gave up waiting for the pair's other worker (peerWaitPhrases).
func WaitedForPeer(role Role, body []byte) bool {
	if role >= numRoles || len(body) == 0 {
		return false
	}
	b := bytes.ToLower(body)
	for _, p := range peerWaitPhrases[role] {
		if bytes.Contains(b, []byte(p)) {
			return true
		}
	}
	return false
}

// PDFailure is what the router saw when one leg of a PD attempt failed first (the other had
// not failed yet): the basis of [PDBlame].
type PDFailure struct {
	// Role is the leg that failed: Prefill or Decode.
	Role Role
	// Attempt is how it failed (status, transport error, error body).
	Attempt Attempt
	// PeerOpen is true when the other leg had neither answered nor failed: its worker was
	// still silent on this request.
	PeerOpen bool
}

// PDBlame is the one rule, for serve and sim alike, of which breaker a PD leg's failure is
// charged to. The two workers of a pair depend on each other during the bootstrap and the KV
// transfer, so the worker that reports a failure is not always the one at fault:
//   - a leg that gave up waiting for its peer (WaitedForPeer: a prefill's bootstrap timeout, a
//     decode's KV wait) while the peer was still silent is the peer's failure: the peer is
//     charged, the reporter not (a hung decode worker must not open every prefill breaker);
//   - the same while the peer had already answered cannot be told (the hand-off between two
//     workers that each did their part failed): neither is charged;
//   - any other failure is the reporting leg's own (LegOutcome), and the peer, cancelled
//     because of it, is not charged.
//
// It returns the outcomes for the failed leg's breaker and for the peer's.
func PDBlame(f PDFailure) (failed, peer Outcome) {
	if !f.Attempt.Transport && WaitedForPeer(f.Role, f.Attempt.Body) {
		if f.PeerOpen {
			return Cancelled, Failure
		}
		return Cancelled, Cancelled
	}
	return LegOutcome(f.Attempt), Cancelled
}
