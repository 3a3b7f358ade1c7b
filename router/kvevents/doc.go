// Package kvevents subscribes to SGLang's KV events: one ZeroMQ SUB per (worker, attention-DP
// rank), msgpack decoding of both event shapes (tagged arrays and, since sglang PR #37482,
// maps with a type field), sequence-gap detection with replay when a replay endpoint exists
// (otherwise the target is marked stale until its cache is rebuilt), and reconnection with
// backoff. Decoded batches feed router/kvindex; what to do with each batch's sequence number
// is kvindex.SeqTracker's decision (the simulator's feed asks the same tracker), the replay's
// I/O is this package's.
//
// Serve builds [Endpoint]s per worker with [Config.Endpoints] (from --kv-events-config) or
// [ServerInfo.Endpoints] (from /server_info), then calls [Subscriber.Add] when a worker is
// registered, [Subscriber.Remove] for each of its targets when it is gone, and
// [Subscriber.Status] for readiness. The subscriber's goroutines use the wall clock (through
// Options.Now) and real sockets; the decoder and endpoint helpers are pure.
package kvevents
