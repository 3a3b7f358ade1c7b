-- wrk script for the fakeworker throughput benchmark: streaming chat requests of 16 output
-- tokens with a usage chunk. Usage:
--   router fakeworker --port 30000 --profile instant &
--   wrk -t1 -c64 -d10s -s fakeworker/testdata/wrk/stream.lua http://127.0.0.1:30000
wrk.method = "POST"
wrk.path = "/v1/chat/completions"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"m","messages":[{"role":"user","content":"benchmark the fake worker please"}],"max_tokens":16,"stream":true,"stream_options":{"include_usage":true}}'

-- No response() hook: it would copy every body into Lua and slow the load generator down.
-- Check a body by hand with: curl -sN -d "$(wrk body)" …
function done(summary, latency, requests)
  io.write(string.format("requests/s: %.0f  errors: %d (non-2xx %d)\n",
    summary.requests / (summary.duration / 1e6),
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    summary.errors.status))
end
