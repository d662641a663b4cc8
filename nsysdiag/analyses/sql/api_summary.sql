-- Where the host's CUDA time went: every traced CUDA runtime and driver API call, per call
-- name (what nsys stats' cuda_api_sum lists).
--
-- Inputs:  api_calls (one row per traced CUDA API call: global_tid, name, start_ns, end_ns,
--          duration_ns, return_value).
-- A call's time is its duration on the calling thread; calls of several threads add up,
-- so a name's total can exceed the capture's length. A call failed when it returned
-- another value than 0 (cudaSuccess); NULL (not recorded) counts as no failure.
-- Outputs (ns):
--   per_name  one row per call name, most time first (ties by name): name, calls,
--             total_ns, share_pct (of every call's time), median_ns, max_ns, threads,
--             failed
--   summary   every call: calls, total_ns, names, threads, failed

-- @query per_name
-- @needs api_calls
SELECT name, count(*) AS calls, sum(duration_ns)::BIGINT AS total_ns,
       100.0 * sum(duration_ns) / nullif(sum(sum(duration_ns)) OVER (), 0) AS share_pct,
       quantile_cont(duration_ns, 0.5) AS median_ns, max(duration_ns)::BIGINT AS max_ns,
       count(DISTINCT global_tid) AS threads,
       count(*) FILTER (WHERE return_value <> 0) AS failed
FROM api_calls
GROUP BY name
ORDER BY total_ns DESC, name

-- @query summary
-- @needs api_calls
SELECT count(*) AS calls, coalesce(sum(duration_ns), 0)::BIGINT AS total_ns,
       count(DISTINCT name) AS names, count(DISTINCT global_tid) AS threads,
       count(*) FILTER (WHERE return_value <> 0) AS failed
FROM api_calls
