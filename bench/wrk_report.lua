-- wrk reports one summary line: requests answered, every kind of failure, latency percentiles.
-- Used by bench/server_load.sh: wrk -s bench/wrk_report.lua ...
done = function(summary, latency, requests)
  local e = summary.errors
  local function ms(p) return latency:percentile(p) / 1000.0 end
  io.write(string.format(
    "answered=%d non2xx=%d connect_err=%d read_err=%d write_err=%d timeouts=%d " ..
    "p50_ms=%.1f p90_ms=%.1f p99_ms=%.1f max_ms=%.1f req_per_s=%.0f\n",
    summary.requests, e.status, e.connect, e.read, e.write, e.timeout,
    ms(50), ms(90), ms(99), latency.max / 1000.0, summary.requests / (summary.duration / 1e6)))
end
