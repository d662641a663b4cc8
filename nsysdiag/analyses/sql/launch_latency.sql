-- Launch latency and the dispatch queue (check C1 of the method).
--
-- Inputs:  kernels (non-graph: graph_node_id IS NULL) with their launch call
--          (launch_start_ns, launch_end_ns: the view joins it), cuda_graphs (graph
--          launches).
-- Params:  $top  per_name keeps the $top kernel names with the most kernels; NULL keeps all.
--
-- Each kernel's launch call is the one with its (global_pid, correlation_id): correlation
-- ids are unique only within a process. Should several launch calls share one id (a
-- runtime call and the driver call inside it), they count as one call from the first entry
-- to the last return. A kernel with no launch call is "unmatched" (its API columns are
-- NULL).
--
-- Dispatch queue: a kernel is launched-but-not-started from its launch call's return
-- (api_end_ns) to its start (start_ns): +1 at api_end_ns, -1 at start_ns. A kernel that
-- starts before (or when) its call returns never queued and adds nothing. Depth is counted
-- per GPU (all processes) and per stream (global_pid, device_id, context_id, stream_id).
-- At equal times the -1s and +1s are netted, so a start and a launch at the same ns do
-- not make a transient depth. Graph launches are not in the queue.
--
-- A view of kernels (the queries below read it):
--   launches        one row per non-graph kernel with its launch call (ns):
--                     api_duration_ns              the launch call's own CPU time
--                     api_start_to_kernel_start_ns call entry -> kernel start
--                     api_end_to_kernel_start_ns   call return -> kernel start (queue
--                                                  time; negative when the kernel
--                                                  started first)
--                     queue_ns                     max(api_end_to_kernel_start_ns, 0)
--                   (the four are NULL for an unmatched kernel)
-- The depth series (query depth, a step) per GPU and per stream: the events of each
-- instant netted, the depth after an instant the running sum of the nets, the span to the
-- next instant counted at that depth. Each series counts time from its first +1 event to
-- its last -1 event. The query depth registers, for the queries below,
--   _depth_hist      level, series keys, depth, time_ns: time at each depth after an
--                    instant t with first <= t < last, until the next instant
--   _depth_at_launch depth, launches: device depth right after each matched launch
--                    call returned (counting its own kernel when that had not started
--                    yet), i.e. after the instant of each launch
--   _depth_changes   level, series keys, t_ns, depth: every instant whose events do not
--                    net to zero, with the depth after it
-- The queries depth ... _depth_changes and latency are the method. The accelerated pass
-- (launch_latency.accelerated: a compiled loop per series, compute/compiled.py
-- queue_depth, over the events of queue_devices, queue_launches and queue_streams, and the
-- kernel metrics of latency in numpy, with figures.py's equivalents of quantile_cont and
-- avg, the graph metrics from graph_latency) makes the same four tables;
-- nsysdiag/engine/accelerate.py chooses between the two by input size.
-- Kernels without a device id are left out of the queue.
-- Outputs:
--   summary          kernels, matched, unmatched, unmatched_pct (% of kernels), queued
--                    (started after the call returned), negative_queue (started before it
--                    returned), negative_queue_pct (% of matched), graph_launches,
--                    depth_at_launch_p50/p90/p99/max (device level), mean_depth
--                    (time-weighted over each GPU's span from its first to its last queue
--                    event, GPUs pooled), queue_nonempty_pct (% of that span with depth > 0)
--   latency          one row per metric (api_duration, api_start_to_kernel_start,
--                    api_end_to_kernel_start, queue, graph_api_duration,
--                    graph_launch_to_start): count, p50/p90/p99/max/mean (ns), NULLs skipped
--   per_kernel       one lean row per non-graph kernel
--   per_name         per kernel name: kernels, unmatched and latency percentiles (ns)
--   queue_depth      the depth series (every change)
--   queue_depth_hist time spent at each depth, per GPU and per stream: time_ns, time_pct
--   graph_launches   one row per CUDA graph launch call: api_duration_ns and
--                    launch_to_start_ns (api start -> first GPU work), gpu_duration_ns

-- @query launches
-- @needs kernels
-- @keep view
SELECT k.pid, k.global_pid, k.device_id, k.context_id, k.stream_id, k.correlation_id,
       k.name, k.short_name, k.start_ns, k.launch_start_ns AS api_start_ns,
       k.launch_end_ns AS api_end_ns, k.launch_end_ns - k.launch_start_ns AS api_duration_ns,
       k.start_ns - k.launch_start_ns AS api_start_to_kernel_start_ns,
       k.start_ns - k.launch_end_ns AS api_end_to_kernel_start_ns,
       CASE WHEN k.launch_end_ns IS NOT NULL THEN greatest(k.start_ns - k.launch_end_ns, 0) END
           AS queue_ns
FROM kernels k
WHERE k.graph_node_id IS NULL

-- @query depth
-- @needs launches
-- (a step) One row per instant of each series: level ('device': all processes on a GPU;
-- 'stream'), its keys, the instant t, net (the sum of the instant's +1 and -1 events), marks (the
-- matched launch calls that returned at it, device level), depth (after t), next_t (the
-- series' next instant), first_t and last_t (its first +1 and last -1).
WITH events AS (
    SELECT 'device' AS level, device_id, NULL::BIGINT AS global_pid,
           NULL::BIGINT AS context_id, NULL::BIGINT AS stream_id, api_end_ns AS t,
           CASE WHEN start_ns > api_end_ns THEN 1 ELSE 0 END AS step, 1 AS marks
    FROM launches WHERE api_end_ns IS NOT NULL AND device_id IS NOT NULL
    UNION ALL
    SELECT 'device', device_id, NULL, NULL, NULL, start_ns, -1, 0
    FROM launches WHERE start_ns > api_end_ns AND device_id IS NOT NULL
    UNION ALL
    SELECT 'stream', device_id, global_pid, context_id, stream_id, unnest([api_end_ns, start_ns]),
           unnest([1, -1]), 0
    FROM launches
    WHERE start_ns > api_end_ns AND device_id IS NOT NULL AND global_pid IS NOT NULL
      AND context_id IS NOT NULL AND stream_id IS NOT NULL),
instants AS (
    SELECT level, device_id, global_pid, context_id, stream_id, t, sum(step)::BIGINT AS net,
           sum(marks)::BIGINT AS marks, bool_or(step = 1) AS up, bool_or(step = -1) AS down
    FROM events GROUP BY ALL)
SELECT level, device_id, global_pid,
       CASE WHEN level = 'stream' THEN (global_pid >> 24) & 16777215 END AS pid,
       context_id, stream_id, t, net, marks,
       sum(net) OVER w::BIGINT AS depth, lead(t) OVER w AS next_t,
       min(t) FILTER (WHERE up) OVER s AS first_t, max(t) FILTER (WHERE down) OVER s AS last_t
FROM instants
WINDOW s AS (PARTITION BY level, device_id, global_pid, context_id, stream_id),
       w AS (s ORDER BY t ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)

-- @query _depth_hist
-- @needs depth
SELECT level, device_id, global_pid, pid, context_id, stream_id, depth,
       sum(next_t - t)::BIGINT AS time_ns
FROM depth
WHERE t >= first_t AND t < last_t
GROUP BY ALL
HAVING sum(next_t - t) <> 0
ORDER BY level, device_id, global_pid, context_id, stream_id, depth

-- @query _depth_at_launch
-- @needs depth
SELECT depth, sum(marks)::BIGINT AS launches
FROM depth
WHERE level = 'device' AND marks > 0
GROUP BY depth
ORDER BY depth

-- @query _depth_changes
-- @needs depth
SELECT level, device_id, global_pid, pid, context_id, stream_id, t AS t_ns, depth
FROM depth
WHERE net <> 0

-- @query queue_devices
-- @needs launches
SELECT device_id, count(*) AS launches
FROM launches
WHERE api_end_ns IS NOT NULL AND device_id IS NOT NULL
GROUP BY device_id
ORDER BY device_id

-- @query queue_launches
-- @needs launches
-- One GPU's matched launches: the call's return, and its kernel's start when the kernel
-- started after it (queued), else NULL
SELECT api_end_ns, CASE WHEN start_ns > api_end_ns THEN start_ns END AS queued_start_ns
FROM launches
WHERE device_id = $device AND api_end_ns IS NOT NULL

-- @query queue_streams
-- @needs launches
-- One GPU's queued launches with a known stream
SELECT global_pid, context_id, stream_id, api_end_ns, start_ns
FROM launches
WHERE device_id = $device AND start_ns > api_end_ns
  AND global_pid IS NOT NULL AND context_id IS NOT NULL AND stream_id IS NOT NULL

-- @query latency
-- @needs graph_latency, launches
-- One row per metric, NULLs skipped.
WITH l AS (
    SELECT 'api_duration' AS metric, count(api_duration_ns) AS count,
           quantile_cont(api_duration_ns, [0.5, 0.9, 0.99]) AS q, max(api_duration_ns) AS max_ns,
           avg(api_duration_ns) AS mean_ns, 1 AS pos FROM launches
    UNION ALL
    SELECT 'api_start_to_kernel_start', count(api_start_to_kernel_start_ns),
           quantile_cont(api_start_to_kernel_start_ns, [0.5, 0.9, 0.99]),
           max(api_start_to_kernel_start_ns), avg(api_start_to_kernel_start_ns), 2 FROM launches
    UNION ALL
    SELECT 'api_end_to_kernel_start', count(api_end_to_kernel_start_ns),
           quantile_cont(api_end_to_kernel_start_ns, [0.5, 0.9, 0.99]),
           max(api_end_to_kernel_start_ns), avg(api_end_to_kernel_start_ns), 3 FROM launches
    UNION ALL
    SELECT 'queue', count(queue_ns), quantile_cont(queue_ns, [0.5, 0.9, 0.99]), max(queue_ns),
           avg(queue_ns), 4 FROM launches
    UNION ALL
    SELECT metric, count, q, max_ns, mean_ns, pos FROM graph_latency)
SELECT metric, count, q[1] AS p50_ns, q[2] AS p90_ns, q[3] AS p99_ns, max_ns, mean_ns
FROM l WHERE count > 0
ORDER BY pos

-- @query graph_latency
-- @needs cuda_graphs
-- @keep view
-- (a view) The graph metrics of latency.
SELECT 'graph_api_duration' AS metric, count(api_end_ns - api_start_ns) AS count,
       quantile_cont(api_end_ns - api_start_ns, [0.5, 0.9, 0.99]) AS q,
       max(api_end_ns - api_start_ns) AS max_ns, avg(api_end_ns - api_start_ns) AS mean_ns,
       5 AS pos
FROM cuda_graphs WHERE api_start_ns IS NOT NULL
UNION ALL
SELECT 'graph_launch_to_start', count(launch_to_start_ns),
       quantile_cont(launch_to_start_ns, [0.5, 0.9, 0.99]), max(launch_to_start_ns),
       avg(launch_to_start_ns), 6
FROM cuda_graphs WHERE api_start_ns IS NOT NULL

-- @query summary
-- @needs cuda_graphs, _depth_at_launch, _depth_hist, launches
SELECT *
FROM (SELECT count(*) AS kernels, count(api_end_ns) AS matched,
             count(*) - count(api_end_ns) AS unmatched,
             100.0 * (count(*) - count(api_end_ns)) / nullif(count(*), 0) AS unmatched_pct,
             count(*) FILTER (WHERE start_ns > api_end_ns) AS queued,
             count(*) FILTER (WHERE start_ns < api_end_ns) AS negative_queue,
             100.0 * count(*) FILTER (WHERE start_ns < api_end_ns) / nullif(count(api_end_ns), 0)
                 AS negative_queue_pct
      FROM launches),
     (SELECT count(*) AS graph_launches FROM cuda_graphs WHERE api_start_ns IS NOT NULL),
     -- quantile_cont over the depths at launch, from their counts: rank x = p * (n - 1)
     -- lies between the depths at ranks floor(x) and floor(x) + 1 (0-based)
     (WITH h AS (
          SELECT depth, sum(launches) OVER (ORDER BY depth) AS cum,
                 sum(launches) OVER () AS n
          FROM _depth_at_launch),
      q AS (
          SELECT p, p * (n - 1) AS x, floor(p * (n - 1)) AS r
          FROM (SELECT unnest([0.5, 0.9, 0.99]::DOUBLE[]) AS p), (SELECT any_value(n) AS n FROM h)),
      v AS (
          SELECT q.p, q.x - q.r AS frac, min(h.depth) FILTER (WHERE h.cum > q.r) AS lo,
                 min(h.depth) FILTER (WHERE h.cum > q.r + 1) AS hi
          FROM q, h GROUP BY q.p, q.x, q.r)
      SELECT max(lo + frac * (coalesce(hi, lo) - lo)) FILTER (WHERE p = 0.5) AS depth_at_launch_p50,
             max(lo + frac * (coalesce(hi, lo) - lo)) FILTER (WHERE p = 0.9) AS depth_at_launch_p90,
             max(lo + frac * (coalesce(hi, lo) - lo)) FILTER (WHERE p = 0.99) AS depth_at_launch_p99,
             (SELECT max(depth) FROM _depth_at_launch) AS depth_at_launch_max
      FROM v),
     (SELECT sum(depth * time_ns) / nullif(sum(time_ns), 0) AS mean_depth,
             100.0 * coalesce(sum(time_ns) FILTER (WHERE depth > 0), 0) / nullif(sum(time_ns), 0)
                 AS queue_nonempty_pct
      FROM _depth_hist WHERE level = 'device')

-- @query per_kernel
-- @needs launches
SELECT pid, device_id, stream_id, correlation_id, short_name, start_ns, api_duration_ns,
       api_start_to_kernel_start_ns, api_end_to_kernel_start_ns
FROM launches
ORDER BY device_id, start_ns

-- @query per_name
-- @needs launches
SELECT name, short_name, kernels, unmatched,
       api_q[1] AS api_duration_p50_ns, api_q[2] AS api_duration_p99_ns,
       start_q[1] AS api_start_to_kernel_start_p50_ns,
       start_q[2] AS api_start_to_kernel_start_p99_ns,
       queue_q[1] AS queue_p50_ns, queue_q[2] AS queue_p99_ns
FROM (SELECT name, any_value(short_name) AS short_name, count(*) AS kernels,
             count(*) - count(api_end_ns) AS unmatched,
             -- one list-valued quantile per metric (see latency)
             quantile_cont(api_duration_ns, [0.5, 0.99]) AS api_q,
             quantile_cont(api_start_to_kernel_start_ns, [0.5, 0.99]) AS start_q,
             quantile_cont(queue_ns, [0.5, 0.99]) AS queue_q
      FROM launches
      GROUP BY name
      QUALIFY $top IS NULL OR row_number() OVER (ORDER BY count(*) DESC, name) <= $top)
ORDER BY kernels DESC, name

-- @query queue_depth
-- @needs _depth_changes
-- every change: the instants whose events do not net to zero
SELECT level, device_id, pid, context_id, stream_id, t_ns, depth
FROM _depth_changes
ORDER BY level, device_id, pid, context_id, stream_id, t_ns

-- @query queue_depth_hist
-- @needs _depth_hist
SELECT level, device_id, pid, context_id, stream_id, depth, time_ns,
       100.0 * time_ns / sum(time_ns) OVER (
           PARTITION BY level, device_id, global_pid, context_id, stream_id) AS time_pct
FROM _depth_hist
ORDER BY level, device_id, pid, context_id, stream_id, depth

-- @query graph_launches
-- @needs cuda_graphs
SELECT pid, correlation_id, device_id, stream_id, api_start_ns,
       api_end_ns - api_start_ns AS api_duration_ns, launch_to_start_ns, gpu_duration_ns,
       n_kernels
FROM cuda_graphs
WHERE api_start_ns IS NOT NULL
ORDER BY api_start_ns

-- @query graph_latency_rows
-- @needs graph_latency
-- The rows of latency that the accelerated pass takes from SQL.
SELECT metric, count, q[1] AS p50_ns, q[2] AS p90_ns, q[3] AS p99_ns, max_ns, mean_ns
FROM graph_latency WHERE count > 0
ORDER BY pos
