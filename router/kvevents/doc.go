// Package kvevents subscribes to SGLang's KV events: one ZeroMQ SUB per (worker, attention-DP
// rank), msgpack decoding of both event shapes (tagged arrays and, since sglang PR #37482,
// maps with a type field), sequence-gap detection with replay when a replay endpoint exists
// (otherwise the target is marked stale until its cache is rebuilt), and reconnection with
// backoff. Decoded batches feed router/kvindex.
package kvevents
