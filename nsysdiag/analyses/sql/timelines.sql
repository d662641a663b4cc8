-- Per-unit timelines: the CPU and GPU activity inside the window of one unit of latency
-- (a slow request or iteration, or a median one for contrast), as the HTML report draws it.
--
-- Inputs:  nvtx_ranges (name, start_ns, end_ns, pid, tid), api_calls (start_ns, end_ns,
--          name, category, pid, tid), kernels, memcpys, memsets (start_ns, end_ns, pid,
--          device_id, stream_id, bytes; kernels' short_name and name, memcpys' copy_kind).
-- Params:  $u     the unit's NVTX range name;      $n    how many of the slowest;
--          $p     the median latency (ns);          $pid  the unit's process id;
--          $s/$e  the window [start, end) in ns (range_thread: the range's start);
--          $tid   its thread id, NULL when unknown (then every thread of the process);
--          $lim   most rows returned per query (one more than drawn, to count the rest).
-- Outputs: rows ordered by start_ns; times in ns, bytes in bytes. The gpu_* queries give
--          the GPU work of the unit's process that overlaps the window, one per operation
--          view, with the same columns (start_ns, end_ns, kind, name, device_id,
--          stream_id, bytes): timelines.py unions those of the views captured, ordered by
--          start_ns, first $lim.

-- @query slowest_ranges
-- @needs nvtx_ranges
-- The $n longest closed instances of range $u (when the ranges analysis gave none).
SELECT start_ns, end_ns, pid, tid FROM nvtx_ranges
WHERE name = $u AND end_ns IS NOT NULL
ORDER BY end_ns - start_ns DESC, start_ns LIMIT $n

-- @query median_range
-- @needs nvtx_ranges
-- The instance of range $u whose duration is closest to the median $p.
SELECT start_ns, end_ns, pid, tid FROM nvtx_ranges
WHERE name = $u AND end_ns IS NOT NULL
ORDER BY abs((end_ns - start_ns) - $p), start_ns LIMIT 1

-- @query range_thread
-- @needs nvtx_ranges
-- The process and thread of the instance of range $u that starts at $s.
SELECT pid, tid FROM nvtx_ranges WHERE name = $u AND start_ns = $s LIMIT 1

-- @query nvtx
-- @needs nvtx_ranges
-- NVTX ranges of the unit's thread that overlap the window.
SELECT start_ns, end_ns, name, tid FROM nvtx_ranges
WHERE pid = $pid AND ($tid IS NULL OR tid = $tid)
  AND end_ns IS NOT NULL AND end_ns > $s AND start_ns < $e
ORDER BY start_ns LIMIT $lim

-- @query cpu
-- @needs api_calls
-- CUDA API calls of the unit's thread that overlap the window.
SELECT start_ns, end_ns, name, category, tid FROM api_calls
WHERE pid = $pid AND ($tid IS NULL OR tid = $tid) AND end_ns > $s AND start_ns < $e
ORDER BY start_ns LIMIT $lim

-- @query gpu_kernels
-- @needs kernels
SELECT start_ns, end_ns, 'kernel' AS kind, coalesce(nullif(short_name, ''), name) AS name,
       device_id, stream_id, NULL::BIGINT AS bytes
FROM kernels WHERE pid = $pid AND end_ns > $s AND start_ns < $e

-- @query gpu_memcpys
-- @needs memcpys
SELECT start_ns, end_ns, 'memcpy', copy_kind, device_id, stream_id, bytes
FROM memcpys WHERE pid = $pid AND end_ns > $s AND start_ns < $e

-- @query gpu_memsets
-- @needs memsets
SELECT start_ns, end_ns, 'memset', 'memset', device_id, stream_id, bytes
FROM memsets WHERE pid = $pid AND end_ns > $s AND start_ns < $e
