-- Overlap: does copy work hide behind compute on each GPU, and do streams run concurrently?
--
-- Inputs:  kernels, memcpys, memsets, cuda_graphs (graph-level launches stand for the
--          kernels nsys does not record one by one), api_calls (synchronous copy APIs).
-- Units:   ns; *_pct in percent.
--
-- Busy time is the measure of a union of intervals, found with the running maximum of end
-- times (gaps-and-islands): sorted by start, each interval adds the part of it beyond the
-- furthest end seen so far, greatest(0, end - greatest(start, running_max_end)).
-- Kernel concurrency: concurrent_kernel_ns is the time with >= 2 kernels in flight (an
-- interval is in flight on [start, end)), max_concurrent_kernels the peak.
-- The query busy is the method; the accelerated pass (overlap.accelerated: a sorted pass
-- in numpy, compute/intervals.py, which also hands each device's union on to ranges)
-- computes the same table; nsysdiag/engine/accelerate.py chooses between the two by
-- input size.
-- A stream is (global_pid, stream_id).
--
-- devices: one row per device (device_id NULL: all devices together).
-- streams: per device and stream: kernels, graph launches, copies, their busy time sums.
-- (Both add up op_streams, one pass over the operations instead of one each.)
-- copy_apis: the API call behind each memcpy (joined on global_pid + correlation_id):
--   copies, bytes and copy time per API name; synchronous = a memcpy API without 'Async'.

-- @query ops
-- @needs kernels, other_ops
-- @keep view
-- A view: every operation of each device with a valid interval, of class 'kernel'
-- (kernels and graph-level launches) or 'copy' (memcpys and memsets). The accelerated
-- pass reads the kernels as the view stores them (start order) and merges the other
-- operations (other_ops, sorted: a few) in; should a kernel come out of order, it reads
-- ops sorted instead.
SELECT device_id, 'kernel' AS cls, global_pid, stream_id, start_ns, end_ns
FROM kernels WHERE end_ns >= start_ns
UNION ALL
SELECT * FROM other_ops

-- @query other_ops
-- @needs cuda_graphs, memcpys, memsets
-- @keep view
SELECT device_id, 'kernel' AS cls, global_pid, stream_id, gpu_start_ns AS start_ns,
       gpu_end_ns AS end_ns
FROM cuda_graphs WHERE trace_level = 'graph' AND gpu_end_ns >= gpu_start_ns
UNION ALL
SELECT device_id, 'copy', global_pid, stream_id, start_ns, end_ns
FROM memcpys WHERE end_ns >= start_ns
UNION ALL
SELECT device_id, 'copy', global_pid, stream_id, start_ns, end_ns
FROM memsets WHERE end_ns >= start_ns

-- @query op_streams
-- @needs cuda_graphs, kernels, memcpys, memsets
-- Per device and stream, every operation (kernels, graph-level launches, copies and
-- memsets, also those without a valid interval): what `streams` shows, and the counts of
-- the operations with a valid interval (end_ns >= start_ns: those of `ops`) that `devices`
-- adds up; one pass over the operations for both (registered as _overlap_streams).
-- src: 0 kernel, 1 graph-level launch, 2 copy or memset (integers: the eleven filters
-- over every operation compare integers, not strings); pid follows from global_pid (the views' pid), not grouped on.
WITH all_ops AS (
    SELECT device_id, global_pid, stream_id, 0 AS src, duration_ns, start_ns, end_ns
    FROM kernels
    UNION ALL
    SELECT device_id, global_pid, stream_id, 1, gpu_duration_ns, gpu_start_ns, gpu_end_ns
    FROM cuda_graphs WHERE trace_level = 'graph'
    UNION ALL
    SELECT device_id, global_pid, stream_id, 2, duration_ns, start_ns, end_ns FROM memcpys
    UNION ALL
    SELECT device_id, global_pid, stream_id, 2, duration_ns, start_ns, end_ns FROM memsets)
SELECT device_id, (global_pid >> 24) & 16777215 AS pid, global_pid, stream_id,
       count(*) FILTER (WHERE src = 0) AS kernels,
       count(*) FILTER (WHERE src = 1) AS graph_launches,
       count(*) FILTER (WHERE src = 2) AS copies,
       coalesce(sum(duration_ns) FILTER (WHERE src < 2), 0)::BIGINT AS kernel_time_ns,
       coalesce(sum(duration_ns) FILTER (WHERE src = 2), 0)::BIGINT AS copy_time_ns,
       min(start_ns) AS first_ns, max(end_ns) AS last_ns,
       count(*) FILTER (WHERE src < 2 AND end_ns >= start_ns) AS valid_kernels,
       count(*) FILTER (WHERE src = 2 AND end_ns >= start_ns) AS valid_copies,
       min(start_ns) FILTER (WHERE end_ns >= start_ns) AS valid_first_ns,
       max(end_ns) FILTER (WHERE end_ns >= start_ns) AS valid_last_ns
FROM all_ops
GROUP BY device_id, global_pid, stream_id

-- @query busy
-- @needs ops
-- Per device: kernel_ns, copy_ns, any_ns (the unions of its kernels, its copies, both),
-- concurrent_ns (the union of the pieces [start, least(end, running max end)) of its
-- kernels: a point inside two kernels lies in the piece of the later-starting one) and
-- max_in_flight (the peak of the kernels started at or before an instant less those
-- ended by then); registered as _overlap_busy for `devices`.
WITH o AS (
    SELECT device_id, cls = 'kernel' AS kernel, start_ns, end_ns FROM ops
    WHERE device_id IS NOT NULL),
before AS (
    SELECT device_id, kernel, start_ns, end_ns,
           max(end_ns) OVER (PARTITION BY device_id ORDER BY start_ns, end_ns
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS any_before,
           max(end_ns) OVER (PARTITION BY device_id, kernel ORDER BY start_ns, end_ns
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS own_before
    FROM o),
twice AS (  -- the pieces of the kernels covered by an earlier kernel
    SELECT device_id, start_ns, piece_end_ns,
           max(piece_end_ns) OVER (PARTITION BY device_id ORDER BY start_ns, piece_end_ns
                                   ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
               AS piece_before
    FROM (SELECT device_id, start_ns, least(end_ns, coalesce(own_before, start_ns))
                     AS piece_end_ns
          FROM before WHERE kernel)),
in_flight AS (
    SELECT device_id, sum(step) OVER (PARTITION BY device_id ORDER BY t
                                      RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
               AS kernels
    FROM (SELECT device_id, start_ns AS t, 1 AS step FROM o WHERE kernel
          UNION ALL
          SELECT device_id, end_ns, -1 FROM o WHERE kernel)),
unions AS (
    SELECT device_id,
           coalesce(sum(greatest(0, end_ns - greatest(start_ns, coalesce(own_before, start_ns))))
                    FILTER (WHERE kernel), 0)::BIGINT AS kernel_ns,
           coalesce(sum(greatest(0, end_ns - greatest(start_ns, coalesce(own_before, start_ns))))
                    FILTER (WHERE NOT kernel), 0)::BIGINT AS copy_ns,
           sum(greatest(0, end_ns - greatest(start_ns, coalesce(any_before, start_ns))))::BIGINT
               AS any_ns
    FROM before GROUP BY device_id)
SELECT u.device_id, u.kernel_ns, u.copy_ns, u.any_ns,
       coalesce(t.concurrent_ns, 0)::BIGINT AS concurrent_ns,
       greatest(coalesce(f.max_in_flight, 0), 0)::BIGINT AS max_in_flight
FROM unions u
LEFT JOIN (SELECT device_id,
                  sum(greatest(0, piece_end_ns
                                  - greatest(start_ns, coalesce(piece_before, start_ns))))
                      AS concurrent_ns
           FROM twice GROUP BY device_id) t ON t.device_id = u.device_id
LEFT JOIN (SELECT device_id, max(kernels) AS max_in_flight FROM in_flight GROUP BY device_id) f
  ON f.device_id = u.device_id
ORDER BY u.device_id

-- @query devices
-- @needs _overlap_busy, _overlap_streams
WITH busy AS (SELECT * FROM _overlap_busy),
counts AS (
    SELECT device_id, min(valid_first_ns) AS first_ns, max(valid_last_ns) AS last_ns,
           sum(valid_kernels)::BIGINT AS kernels, sum(valid_copies)::BIGINT AS copies,
           count(*) FILTER (WHERE valid_kernels + valid_copies > 0) AS streams,
           count(*) FILTER (WHERE valid_kernels > 0) AS kernel_streams,
           count(*) FILTER (WHERE valid_copies > 0) AS copy_streams
    FROM _overlap_streams GROUP BY device_id),
per AS (
    SELECT c.device_id, c.first_ns, c.last_ns, c.kernels, c.copies, c.streams,
           c.kernel_streams, c.copy_streams,
           b.kernel_ns AS kernel_busy_ns, b.copy_ns AS copy_busy_ns,
           b.kernel_ns + b.copy_ns - b.any_ns AS both_busy_ns,
           b.concurrent_ns AS concurrent_kernel_ns, b.max_in_flight AS max_concurrent_kernels
    FROM counts c JOIN busy b USING (device_id)),
total AS (
    SELECT device_id, first_ns, last_ns, kernels, copies, streams, kernel_streams, copy_streams,
           kernel_busy_ns, copy_busy_ns, both_busy_ns, concurrent_kernel_ns,
           max_concurrent_kernels
    FROM per
    UNION ALL
    SELECT NULL, min(first_ns), max(last_ns), sum(kernels)::BIGINT, sum(copies)::BIGINT,
           sum(streams)::BIGINT, sum(kernel_streams)::BIGINT, sum(copy_streams)::BIGINT,
           sum(kernel_busy_ns)::BIGINT, sum(copy_busy_ns)::BIGINT, sum(both_busy_ns)::BIGINT,
           sum(concurrent_kernel_ns)::BIGINT, max(max_concurrent_kernels)
    FROM per)
SELECT device_id, last_ns - first_ns AS wall_span_ns, kernel_busy_ns, copy_busy_ns,
       both_busy_ns, copy_busy_ns - both_busy_ns AS exposed_copy_ns,
       100.0 * both_busy_ns / nullif(copy_busy_ns, 0) AS overlap_pct,
       100.0 * kernel_busy_ns / nullif(last_ns - first_ns, 0) AS kernel_busy_pct,
       100.0 * copy_busy_ns / nullif(last_ns - first_ns, 0) AS copy_busy_pct,
       kernels, copies, streams, kernel_streams, copy_streams, concurrent_kernel_ns,
       100.0 * concurrent_kernel_ns / nullif(kernel_busy_ns, 0) AS kernel_concurrency_pct,
       max_concurrent_kernels
FROM total
ORDER BY device_id NULLS LAST

-- @query streams
-- @needs _overlap_streams
SELECT device_id, pid, global_pid, stream_id, kernels, graph_launches, copies,
       kernel_time_ns, copy_time_ns, first_ns, last_ns
FROM _overlap_streams
ORDER BY device_id, kernel_time_ns + copy_time_ns DESC, pid, stream_id

-- @query copy_apis
-- @needs api_calls, memcpys
WITH api AS (
    SELECT global_pid, correlation_id,
           arg_min(name, CASE api WHEN 'runtime' THEN 0 ELSE 1 END) AS api_name,
           arg_min(category, CASE api WHEN 'runtime' THEN 0 ELSE 1 END) AS category
    FROM api_calls a
    -- on the correlation id alone: the calls of other processes with a copy's id make
    -- groups that the join below leaves out, and no process id is computed for every call
    SEMI JOIN memcpys m ON m.correlation_id = a.correlation_id
    GROUP BY global_pid, correlation_id),
m AS (
    SELECT m.bytes, m.duration_ns, a.api_name,
           coalesce(a.category = 'memcpy' AND NOT contains(a.api_name, 'Async'), false) AS synchronous
    FROM memcpys m
    LEFT JOIN api a ON a.global_pid = m.global_pid AND a.correlation_id = m.correlation_id)
SELECT coalesce(api_name, '(no API record)') AS api_name, synchronous, count(*) AS copies,
       sum(bytes)::BIGINT AS total_bytes, sum(duration_ns)::BIGINT AS copy_time_ns,
       100.0 * sum(duration_ns) / nullif(sum(sum(duration_ns)) OVER (), 0) AS copy_time_pct
FROM m
GROUP BY api_name, synchronous
ORDER BY copy_time_ns DESC, api_name
