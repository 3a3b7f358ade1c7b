// Package router is pdrouter's routing core: workers and their targets, the registry, in-flight
// load counters, the selection policies (random, round_robin, power_of_two, cache_aware), PD pair
// selection, and the retry/backoff, circuit-breaker and health-threshold state machines. It is a
// pure library: no HTTP, no goroutines, no I/O.
//
// # Time and randomness
//
// The package never reads the wall clock and never uses the global random source. Time comes
// from the [Clock] given to [New] (serve passes the wall clock, the simulator its virtual clock)
// or as an explicit now argument; randomness comes from the *rand.Rand given to [New]. The same
// configuration, seed and sequence of calls at the same clock readings therefore give the same
// decisions, byte for byte — which is what lets `router sim` predict `router serve`.
//
// Nothing happens on its own: breaker timeouts are evaluated when a decision needs them, and
// tree eviction runs when the driver calls [Router.Tick] (serve from a ticker, the simulator at
// virtual instants).
//
// # Worker lifecycle
//
// The registry owns each worker's lifecycle: added ([Router.AddWorker]) → starting →
// healthy/unhealthy/breaker_open (health probes, request outcomes) → draining
// ([Router.RemoveWorker] with requests in flight) → gone (the last of them done, or removed
// idle). Every step is a [WorkerEvent] handed to [Router.OnWorkerEvent]; every view
// ([Router.Workers], [Router.Targets], [Router.Worker]) reads the one registry.
//
// # Concurrency
//
// A [Router] is safe for concurrent use. One mutex guards the registry, the policies and the
// state machines; target loads are atomics so that /get_loads can read them without the lock.
//
// # Shape of a request
//
//	d, err := r.Route(&router.Request{Text: text})    // picks target(s), increments their loads
//	...send the leg(s) to d.Prefill / d.Decode or d.Regular...
//	d.Done(router.Prefill, router.Success)            // once per leg: decrements, feeds the breaker
package router
