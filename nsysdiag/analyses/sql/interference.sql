-- interference: which other GPU work ran during the slowest units, and how often it ran
-- during the median ones (names the "other GPU work" of the tail attribution).
--
-- Inputs (normalized views): kernels, memcpys, memsets, api_calls, processes; and the
-- table the Python side registers:
--   _interference_instances  the ranges analysis' instances (instance, start_ns, end_ns,
--                            duration_ns, pid, tid, device_id, cuda_covered)
-- Parameters: $slow_n (slowest units compared), $scope ('thread' or 'process': whose
-- launches are a unit's own, as in ranges).
-- Units: *_ns nanoseconds on the trace timeline; *_units counts of units.
--
-- Outputs:
--   units     the compared units: grp ('slow': the $slow_n slowest, 'median': the median
--             band, 45th-55th percentile, as ranges' attribution), instance, start_ns,
--             end_ns, device_id, pid, tid; over the units the CUDA trace covers
--   per_name  per process, stream and operation name (kernel name, 'memcpy KIND',
--             'memset'): pid, process_name, stream_id, kind, name, slow_units and
--             median_units (units during which it ran), slow_overlap_mean_ns and
--             median_overlap_mean_ns (its GPU time inside the windows, summed over the
--             group's units and divided by the group's size), delta_ns (their difference)
--   per_stream  the same per process, stream and own_stream (the program's own work
--             or not), names: its three operation (short) names with the most GPU time in
--             the slow units
--
-- Other work: an operation on the unit's device that overlaps the unit's window and is
-- not the unit's own. The program's own work (own_stream): launched before the unit began
-- by the unit's own thread (process, for scope 'process'), or by its process on a stream
-- the units' own work runs on (an autograd thread launching on the same stream, earlier
-- units' work still queued when the host runs ahead of the GPU): not anyone else's.
-- Own: launched by the unit's thread (scope 'thread'; its process for
-- 'process') with the launch call inside the window (ranges' rule for instances that do
-- not overlap). The launching thread's pid and tid are unpacked from its global id as the
-- views do (pid = (g >> 24) & 0xFFFFFF, tid = g & 0xFFFFFF).


-- @query units
-- @needs _interference_instances
WITH i AS (
    SELECT * FROM _interference_instances
    WHERE cuda_covered IS NOT FALSE AND device_id IS NOT NULL),
band AS (
    SELECT quantile_cont(duration_ns, 0.45) AS lo, quantile_cont(duration_ns, 0.55) AS hi
    FROM i),
ranked AS (SELECT *, row_number() OVER (ORDER BY duration_ns DESC, start_ns) AS slow_rank FROM i)
SELECT 'slow' AS grp, instance, start_ns, end_ns, device_id, pid, tid
FROM ranked WHERE slow_rank <= $slow_n
UNION ALL
SELECT 'median', instance, start_ns, end_ns, device_id, pid, tid
FROM ranked, band WHERE duration_ns BETWEEN band.lo AND band.hi
ORDER BY grp DESC, instance


-- @query if_other
-- @needs api_calls, kernels, memcpys, memsets, _interference_units
-- Step: every (compared unit, other operation) pair with the operation's GPU time inside
-- the unit's window, overlap_ns. The pairs (unit, operation) come from an inequality join on time alone (an interval
-- join; the device is compared after it, since one device would make an equality join
-- compare every operation with every unit).
WITH u AS (SELECT * FROM _interference_units),
copy_calls AS (
    SELECT a.global_pid, a.correlation_id, arg_min(a.global_tid, a.start_ns) AS launch_global_tid,
           min(a.start_ns) AS launch_start_ns, max(a.end_ns) AS launch_end_ns
    FROM api_calls a
    SEMI JOIN (SELECT global_pid, correlation_id FROM memcpys
               UNION ALL SELECT global_pid, correlation_id FROM memsets) m
      ON a.global_pid = m.global_pid AND a.correlation_id = m.correlation_id
    GROUP BY ALL),
ops AS (
    SELECT 'kernel' AS kind, name, coalesce(short_name, name) AS short, stream_id, device_id, global_pid, pid, start_ns, end_ns,
           launch_global_tid, launch_start_ns, launch_end_ns
    FROM kernels WHERE start_ns > 0
    UNION ALL
    SELECT 'copy', 'memcpy ' || coalesce(m.copy_kind, '?'), 'memcpy ' || coalesce(m.copy_kind, '?'),
           m.stream_id, m.device_id,
           m.global_pid, m.pid, m.start_ns, m.end_ns, c.launch_global_tid, c.launch_start_ns,
           c.launch_end_ns
    FROM memcpys m LEFT JOIN copy_calls c USING (global_pid, correlation_id)
    WHERE m.start_ns > 0
    UNION ALL
    SELECT 'memset', 'memset', 'memset', m.stream_id, m.device_id, m.global_pid, m.pid, m.start_ns,
           m.end_ns, c.launch_global_tid, c.launch_start_ns, c.launch_end_ns
    FROM memsets m LEFT JOIN copy_calls c USING (global_pid, correlation_id)
    WHERE m.start_ns > 0),
pairs AS MATERIALIZED (
    SELECT u.grp, u.instance, u.start_ns AS w_start, u.end_ns AS w_end, u.device_id AS w_device,
           u.pid AS w_pid, u.tid AS w_tid, o.*
    FROM u JOIN ops o ON o.start_ns < u.end_ns AND o.end_ns > u.start_ns),
keyed AS (
    SELECT *, coalesce(((launch_global_tid >> 24) & 16777215) = w_pid
                       AND ($scope = 'process' OR (launch_global_tid & 16777215) = w_tid),
                       false) AS same_key
    FROM pairs WHERE device_id = w_device),
own AS (SELECT * FROM keyed
        WHERE same_key AND launch_start_ns >= w_start AND launch_end_ns <= w_end),
own_streams AS (SELECT DISTINCT pid, stream_id FROM own),
other AS (
    SELECT grp, instance, kind, name, short, k.stream_id, k.pid, global_pid,
           least(end_ns, w_end) - greatest(start_ns, w_start) AS overlap_ns,
           (same_key AND coalesce(launch_start_ns < w_start, false))
               OR s.stream_id IS NOT NULL AS own_stream
    FROM keyed k LEFT JOIN own_streams s ON s.pid = k.pid AND s.stream_id = k.stream_id
    WHERE NOT (same_key AND launch_start_ns >= w_start AND launch_end_ns <= w_end))
SELECT * FROM other


-- @query per_name
-- @needs processes, _interference_units, if_other
WITH u AS (SELECT * FROM _interference_units),
other AS (SELECT * FROM if_other),
sizes AS (
    SELECT count(*) FILTER (WHERE grp = 'slow') AS slow_n,
           count(*) FILTER (WHERE grp = 'median') AS median_n FROM u),
per AS (
    SELECT pid, any_value(global_pid) AS global_pid, stream_id, kind, name,
           count(DISTINCT instance) FILTER (WHERE grp = 'slow') AS slow_units,
           count(DISTINCT instance) FILTER (WHERE grp = 'median') AS median_units,
           coalesce(sum(overlap_ns) FILTER (WHERE grp = 'slow'), 0) AS slow_sum,
           coalesce(sum(overlap_ns) FILTER (WHERE grp = 'median'), 0) AS median_sum
    FROM other GROUP BY pid, stream_id, kind, name)
SELECT p.pid, pr.name AS process_name, p.stream_id, p.kind, p.name, p.slow_units,
       p.median_units, s.slow_n, s.median_n,
       p.slow_sum / nullif(s.slow_n, 0) AS slow_overlap_mean_ns,
       p.median_sum / nullif(s.median_n, 0) AS median_overlap_mean_ns,
       coalesce(p.slow_sum / nullif(s.slow_n, 0), 0)
           - coalesce(p.median_sum / nullif(s.median_n, 0), 0) AS delta_ns
FROM per p CROSS JOIN sizes s
LEFT JOIN (SELECT global_pid, any_value(name) AS name FROM processes GROUP BY global_pid) pr
  ON pr.global_pid = p.global_pid
ORDER BY delta_ns DESC, p.pid, p.stream_id, p.name


-- @query per_stream
-- @needs processes, _interference_units, if_other
-- per_name per process and stream (a stream ran in a unit when any of its operations
-- did); names: its three operation names with the most GPU time in the slow units,
-- '; '-separated.
WITH u AS (SELECT * FROM _interference_units),
other AS (SELECT * FROM if_other),
sizes AS (
    SELECT count(*) FILTER (WHERE grp = 'slow') AS slow_n,
           count(*) FILTER (WHERE grp = 'median') AS median_n FROM u),
per AS (
    SELECT pid, any_value(global_pid) AS global_pid, stream_id, own_stream,
           count(DISTINCT instance) FILTER (WHERE grp = 'slow') AS slow_units,
           count(DISTINCT instance) FILTER (WHERE grp = 'median') AS median_units,
           coalesce(sum(overlap_ns) FILTER (WHERE grp = 'slow'), 0) AS slow_sum,
           coalesce(sum(overlap_ns) FILTER (WHERE grp = 'median'), 0) AS median_sum
    FROM other GROUP BY pid, stream_id, own_stream),
names AS (
    SELECT pid, stream_id, own_stream, string_agg(short, '; ' ORDER BY t DESC, short) AS names
    FROM (SELECT pid, stream_id, own_stream, short, t,
                 row_number() OVER (PARTITION BY pid, stream_id, own_stream
                                    ORDER BY t DESC, short) AS k
          FROM (SELECT pid, stream_id, own_stream, short,
                       sum(overlap_ns) FILTER (WHERE grp = 'slow') AS t
                FROM other GROUP BY ALL)
          WHERE t > 0)
    WHERE k <= 3 GROUP BY pid, stream_id, own_stream)
SELECT p.pid, pr.name AS process_name, p.stream_id, p.own_stream, coalesce(n.names, '-') AS names,
       p.slow_units, p.median_units, s.slow_n, s.median_n,
       p.slow_sum / nullif(s.slow_n, 0) AS slow_overlap_mean_ns,
       p.median_sum / nullif(s.median_n, 0) AS median_overlap_mean_ns,
       coalesce(p.slow_sum / nullif(s.slow_n, 0), 0)
           - coalesce(p.median_sum / nullif(s.median_n, 0), 0) AS delta_ns
FROM per p CROSS JOIN sizes s
LEFT JOIN names n ON n.pid IS NOT DISTINCT FROM p.pid AND n.stream_id IS NOT DISTINCT FROM p.stream_id
    AND n.own_stream = p.own_stream
LEFT JOIN (SELECT global_pid, any_value(name) AS name FROM processes GROUP BY global_pid) pr
  ON pr.global_pid = p.global_pid
ORDER BY delta_ns DESC, p.pid, p.stream_id, p.own_stream
