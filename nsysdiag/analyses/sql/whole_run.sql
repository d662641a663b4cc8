-- whole_run: where the whole run's time went, for a trace with or without a repeated unit.
--
-- Inputs (normalized views): kernels, memcpys, memsets, api_calls. The GPU's busy time
-- comes from the overlap analysis (its per-device unions); these queries add the host's
-- waits and the top kernels and copies.
-- Parameters: $device (the device the breakdown is for), $top (rows of the top tables).
-- Units: *_ns nanoseconds on the trace timeline, *_bytes bytes, *_pct percent.
--
-- Outputs:
--   host         host_sync_ns: time inside synchronization calls (api_calls category
--                sync), host_copy_call_ns: time inside copy and memset calls (a synchronous
--                copy's call lasts as long as its wait), summed over every thread (a
--                call nested in another of its thread is counted once, in the outer one)
--   top_kernels  the $top kernel names with the most GPU time on $device: name, instances,
--                total_ns, time_pct (of the device's kernel time)
--   top_copies   copies and memsets on $device per direction: kind, instances, bytes,
--                total_ns, time_pct (of the device's copy time)


-- @query host
-- @needs api_calls
WITH calls AS (
    SELECT category, start_ns, end_ns,
           max(end_ns) OVER (PARTITION BY global_tid ORDER BY start_ns, end_ns DESC
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS covered
    FROM api_calls WHERE category IN ('sync', 'memcpy', 'memset'))
SELECT coalesce(sum(end_ns - start_ns) FILTER (WHERE category = 'sync'), 0)::BIGINT
           AS host_sync_ns,
       coalesce(sum(end_ns - start_ns) FILTER (WHERE category <> 'sync'), 0)::BIGINT
           AS host_copy_call_ns
FROM calls WHERE covered IS NULL OR start_ns >= covered;


-- @query top_kernels
-- @needs kernels
SELECT coalesce(short_name, name) AS name, count(*) AS instances,
       sum(end_ns - start_ns)::BIGINT AS total_ns,
       100.0 * sum(end_ns - start_ns) / sum(sum(end_ns - start_ns)) OVER () AS time_pct
FROM kernels
WHERE device_id = $device AND start_ns > 0
GROUP BY 1
ORDER BY total_ns DESC, name
LIMIT $top;


-- @query top_copies
-- @needs memcpys, memsets
WITH ops AS (
    SELECT copy_kind AS kind, bytes, start_ns, end_ns FROM memcpys
    WHERE device_id = $device AND start_ns > 0
    UNION ALL
    SELECT 'memset', bytes, start_ns, end_ns FROM memsets
    WHERE device_id = $device AND start_ns > 0)
SELECT kind, count(*) AS instances, coalesce(sum(bytes), 0)::BIGINT AS bytes,
       sum(end_ns - start_ns)::BIGINT AS total_ns,
       100.0 * sum(end_ns - start_ns) / nullif(sum(sum(end_ns - start_ns)) OVER (), 0)
           AS time_pct
FROM ops
GROUP BY kind
ORDER BY total_ns DESC, kind
LIMIT $top;
