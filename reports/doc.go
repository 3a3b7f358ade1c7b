// Package reports owns the results of a load run: the per-request record both producers write
// (router bench live, router sim in virtual time), the per-level summary, and the two files of
// SPEC §6, results.json and requests.jsonl, with their JSON Schemas. It aggregates records into
// levels and renders results for people.
//
// The producers (bench, sim) import this package; it imports nothing else from the repository, so
// a simulated run and a live run are the same Go values and one report compares them.
//
// Flow:
//
//	records ([]Record, one per request) ──Aggregate(LevelInfo, …)──▶ Level
//	Results{Meta, Levels} ──WriteDir──▶ DIR/results.json + DIR/requests.jsonl
//	ReadResults / ReadRecords ──▶ Render(w, FormatTable, …)
//
// Metric definitions follow sglang bench_serving so numbers compare (SPEC §5): TTFT, ITL gaps,
// E2E and queue times are milliseconds measured by the producer; TPOT is (E2E − TTFT) /
// (output_tokens − 1), defined only for two or more output tokens; percentiles use numpy's
// default "linear" rule (see [Percentile]). Errored requests are counted but never enter the
// latency statistics. An empty set of samples summarises to zeros, never NaN, so results.json
// is always valid JSON.
//
// Determinism: nothing here reads the clock or a random source; results.json is indented, keeps
// the field order of SPEC §6 and sorts map keys, so the same values give the same bytes. The
// only wall-clock value is Meta.Started, which the bench sets and the simulator leaves empty.
//
// All functions are safe for concurrent use on distinct values; RecordWriter is safe for
// concurrent use by many goroutines.
package reports
