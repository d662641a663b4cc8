-- Host synchronization waits: the time host threads spent blocked in CUDA calls that wait
-- for the GPU.
--
-- Inputs:  api_calls (CUDA runtime and driver calls: thread, name, category, start, end).
-- A wait is a call that returns only when GPU work has completed:
--   kind 'sync'    category sync whose name contains 'Synchronize' (cudaDeviceSynchronize,
--                  cudaStreamSynchronize, cudaEventSynchronize, cuCtxSynchronize, ...);
--                  not cudaStreamWaitEvent or the queries, which do not block the host;
--   kind 'memcpy'  category memcpy without 'Async' in its name (cudaMemcpy, cudaMemcpy2D,
--                  cuMemcpyDtoH, ...): a synchronous copy returns when it is done.
-- A wait nested in an earlier wait of the same thread (the driver call a runtime call
-- makes) is the same wait: only the outermost calls count, under the outer call's name.
-- A call is outermost when it starts at or after the furthest end of the earlier waits of
-- its thread (sorted by start, the longer first on a tie).
-- Percentiles are quantile_cont's (linear between the two nearest ranks).
-- Outputs (ns; shares in %):
--   per_call    one row per call name, most wait time first (ties by name): kind, waits,
--               threads (that made the call), total_ns, mean_ns, p50_ns, p99_ns, max_ns,
--               share_pct (of all waits' time)
--   per_thread  one row per thread and call name, by pid, tid, then most wait time: pid,
--               tid, name, kind, waits, total_ns, p50_ns, p99_ns, max_ns
--   summary     all waits: waits, threads, total_ns, p50_ns, p99_ns, max_ns; sync_waits
--               and memcpy_waits (waits of each kind)

-- @query waits
-- @needs api_calls
-- @keep view
-- (a view) The outermost waits of each thread.
WITH calls AS (
    SELECT pid, tid, global_tid, name, start_ns, end_ns, duration_ns,
           CASE WHEN category = 'sync' THEN 'sync' ELSE 'memcpy' END AS kind,
           max(end_ns) OVER (PARTITION BY global_tid ORDER BY start_ns, end_ns DESC
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS covered_ns
    FROM api_calls
    WHERE (category = 'sync' AND name LIKE '%Synchronize%'
           OR category = 'memcpy' AND name NOT LIKE '%Async%')
      AND global_tid IS NOT NULL AND start_ns IS NOT NULL AND end_ns >= start_ns)
SELECT pid, tid, global_tid, name, kind, start_ns, end_ns, duration_ns
FROM calls
WHERE covered_ns IS NULL OR start_ns >= covered_ns

-- @query per_call
-- @needs waits
SELECT name, any_value(kind) AS kind, count(*) AS waits, count(DISTINCT global_tid) AS threads,
       sum(duration_ns)::BIGINT AS total_ns, avg(duration_ns) AS mean_ns,
       quantile_cont(duration_ns, 0.5) AS p50_ns, quantile_cont(duration_ns, 0.99) AS p99_ns,
       max(duration_ns) AS max_ns,
       100.0 * sum(duration_ns) / nullif(sum(sum(duration_ns)) OVER (), 0) AS share_pct
FROM waits
GROUP BY name
ORDER BY total_ns DESC, name

-- @query per_thread
-- @needs waits
SELECT any_value(pid) AS pid, any_value(tid) AS tid, name, any_value(kind) AS kind,
       count(*) AS waits, sum(duration_ns)::BIGINT AS total_ns,
       quantile_cont(duration_ns, 0.5) AS p50_ns, quantile_cont(duration_ns, 0.99) AS p99_ns,
       max(duration_ns) AS max_ns
FROM waits
GROUP BY global_tid, name
ORDER BY pid, tid, total_ns DESC, name

-- @query summary
-- @needs waits
SELECT count(*) AS waits, count(DISTINCT global_tid) AS threads,
       coalesce(sum(duration_ns), 0)::BIGINT AS total_ns,
       quantile_cont(duration_ns, 0.5) AS p50_ns, quantile_cont(duration_ns, 0.99) AS p99_ns,
       max(duration_ns) AS max_ns,
       count(*) FILTER (WHERE kind = 'sync') AS sync_waits,
       count(*) FILTER (WHERE kind = 'memcpy') AS memcpy_waits
FROM waits
