package router

import "fmt"

// Role is what a worker does in the cluster. The order of the constants is the target order's
// first key (SPEC §1.1): regular, then prefill, then decode.
type Role uint8

const (
	// Regular workers serve whole requests (no prefill/decode split).
	Regular Role = iota
	// Prefill workers compute the prompt's KV cache and hand it to a decode worker.
	Prefill
	// Decode workers receive the KV cache and generate the reply.
	Decode
	numRoles
)

var roleNames = [numRoles]string{"regular", "prefill", "decode"}

// String returns "regular", "prefill" or "decode".
func (r Role) String() string {
	if r < numRoles {
		return roleNames[r]
	}
	return fmt.Sprintf("role(%d)", r)
}

// ParseRole parses "regular", "prefill" or "decode".
func ParseRole(s string) (Role, error) {
	for i, n := range roleNames {
		if n == s {
			return Role(i), nil
		}
	}
	return 0, fmt.Errorf("router: unknown worker role %q (want regular, prefill or decode)", s)
}

// Outcome is how a leg ended, as the driver reports it to [Decision.Done].
type Outcome uint8

const (
	// Success: the leg completed (or ended with a client error the worker handled correctly);
	// it counts as a success for the circuit breaker.
	Success Outcome = iota
	// Failure: transport error, timeout or a server-side error status; it counts towards
	// opening the worker's circuit breaker.
	Failure
	// Cancelled: the leg was abandoned for a reason that says nothing about the worker (client
	// disconnect, the paired leg failed first); the breaker is not fed.
	Cancelled
)

// String returns "success", "failure" or "cancelled".
func (o Outcome) String() string {
	switch o {
	case Success:
		return "success"
	case Failure:
		return "failure"
	case Cancelled:
		return "cancelled"
	}
	return fmt.Sprintf("outcome(%d)", o)
}

// Reason says why a policy chose its target. Values are stable: they appear in decision logs
// and in the pdrouter_policy_decisions_total metric.
type Reason string

// Reasons reported by the policies.
const (
	ReasonCacheHit     Reason = "cache_hit"   // cache_aware: match rate above cache_threshold
	ReasonCacheMiss    Reason = "cache_miss"  // cache_aware: balanced, no good match → least loaded
	ReasonImbalance    Reason = "imbalance"   // cache_aware: loads imbalanced → least loaded
	ReasonWarmUp       Reason = "warm_up"     // cache_aware: a hit elsewhere went to a worker warming up below the mean load
	ReasonRandom       Reason = "random"      // random policy
	ReasonRoundRobin   Reason = "round_robin" // round_robin policy
	ReasonPowerOfTwo   Reason = "power_of_two"
	ReasonLeastLoad    Reason = "least_load"     // least_load policy
	ReasonOnlyTarget   Reason = "only_target"    // power_of_two with a single available target
	ReasonRoutingKey   Reason = "routing_key"    // consistent_hashing: the target the request's key hashes to
	ReasonKeySpilled   Reason = "key_spilled"    // consistent_hashing: the key's target was at the load bound; the next one on the ring
	ReasonNoRoutingKey Reason = "no_routing_key" // consistent_hashing, manual: a request without a key, to a random target
	ReasonKeyAssigned  Reason = "key_assigned"   // manual: a new key's first target (--assignment-mode)
	ReasonKeyMoved     Reason = "key_moved"      // manual: the key's target was not available; its previous one, or a new one
	// ReasonPredictedLatency: predicted_latency, the lowest predicted TTFT within the TPOT SLO.
	ReasonPredictedLatency Reason = "predicted_latency"
)
