-- Launch gaps: idle time between kernels on a GPU, the method's measure of launch overhead.
--
-- Inputs:  kernels (start_ns, end_ns, global_pid, device_id, context_id, stream_id,
--          correlation_id, graph_node_id, and launch_end_ns, the return of the launch
--          call, only to tell starved gaps from prelaunched ones (below); without a CUDA
--          API trace they stay unattributed); cuda_graphs (rows of trace_level 'graph': one
--          GPU interval per graph launch whose kernels were not traced one by one).
-- Params:  $normal_ns  a gap above this is not "normal" (ns; the method says 5 us);
--          $p99_ns     a P99 gap above this signals a CPU-side bottleneck (ns; 20 us).
--
-- Definition (per process and GPU: PARTITION BY global_pid, device_id): kernels sorted by
-- (start_ns, end_ns); busy_until_ns is the running maximum of end_ns over all earlier
-- kernels; a kernel that starts after it follows one gap of start_ns - busy_until_ns.
-- A kernel that starts before busy_until_ns overlaps earlier work and follows no gap.
-- CUDA graph nodes (graph_node_id NOT NULL) and graph-level executions (cuda_graphs rows
-- with trace_level 'graph') stay in the sequence, since they keep the GPU busy, but the
-- gap before one is reported apart by `kind`:
--   kernel        before a kernel launched on its own: the main distribution;
--   graph_launch  before a graph-level execution, or before the first node of a graph
--                 launch (nodes of one launch share global_pid and correlation_id);
--   graph_node    before a later node of the same launch (intra-graph gap).
-- A main gap is "prelaunched" when the launch call of the kernel after it had returned
-- before the GPU went idle (launch_end_ns < busy_until_ns): the work was already submitted, so the CPU did not cause that gap
-- (another process or context on the GPU, a stream wait, a copy did). Otherwise it is
-- "starved": the kernel was submitted only after the GPU had run out of work.
-- Per stream (PARTITION BY global_pid, device_id, context_id, stream_id): gap =
-- start_ns - end_ns of the previous kernel on the stream, when positive, before non-graph
-- kernels.
--
-- The running maximum and the per-stream predecessor are one sorted pass in numpy
-- (analyses/launch_gaps.py, with analyses/intervals.py and analyses/_compiled.py): a
-- window function over one partition per GPU runs on one core, 5 s at ten million
-- kernels. The pass reads
--   sequence         the device sequence: every kernel and graph-level execution, unit
--                    0 kernel, 1 graph node, 2 graph-level execution, sorted by start_ns,
--                    then end_ns (NULL last); a NULL end extends no busy period
--                    (end_ns = $no_end); a NULL correlation id reads -1, a NULL
--                    launch_end_ns $no_end; in_stream: a kernel with a known context and
--                    stream (each stream's kernels come in this order too, so the same
--                    pass follows them; a second read sorted per stream cost 1.1 s at
--                    ten million kernels)
-- and writes the steps
--   gap_rows         from the sequence, the units that start after busy_until_ns (the
--                    furthest end among the earlier units): device_id, pid, global_pid,
--                    kind_id (0 kernel, 1 graph_launch, 2 graph_node: the pass tells the
--                    first node of a launch by the first start among the launch's graph
--                    kernels, graph_first), correlation_id, gap_ns = start_ns -
--                    busy_until_ns, start_ns, launch_end_ns (NULL if unknown)
--   stream_gaps      per stream, the own kernels that start after the end of the kernel
--                    before them: global_pid, device_id, context_id, stream_id, gap_ns
-- Rows with a NULL process, device or start are left out; a kernel with a NULL context or
-- stream counts on its GPU but in no stream.
-- Views over gap_rows (the queries below read them; projections and filters cost less
-- than writing ten million rows out again):
--   gaps       gap_rows with kind ('kernel', 'graph_launch', 'graph_node', as above):
--              device_id, pid, global_pid, kind, correlation_id, gap_ns (ns), start_ns
--              (ns, start of the kernel after the gap), launch_end_ns (NULL if unknown)
--   main_gaps  the main gaps (kind 'kernel') with launched_before_idle: true when
--              prelaunched, false when starved, NULL when the launch call is unknown
-- Outputs (ns unless named otherwise; shares in %):
--   summary       main gaps: count, p50/p90/p99/p999/max/mean/total, shares above the
--                 thresholds, cpu_bound (p99 > $p99_ns); kernels and graph_kernels counts;
--                 prelaunched_gaps, prelaunched_idle_pct (% of attributed idle time),
--                 starved_gaps, starved_p50_ns, starved_p99_ns
--   per_device    one row per (device, process): kernels, graph_kernels, gap percentiles
--   device_counts main gaps per device
--   graph         one row per graph gap kind: count and percentiles
--   per_stream    one row per (device, process, context, stream)
--   distribution  every main gap, in time order per device and process, with
--                 launched_before_idle
--   histogram     main gaps per log-spaced bin, empty bins included: 5 bins per decade
--                 of ns, bin b covers [10^(b/5), 10^((b+1)/5)) ns

-- @query sequence
SELECT global_pid, device_id, pid, coalesce(correlation_id, -1) AS correlation_id, unit,
       start_ns, end_ns AS sort_end, coalesce(end_ns, $no_end) AS end_ns,
       coalesce(launch_end_ns, $no_end) AS launch_end_ns,
       coalesce(context_id, 0) AS context_id, coalesce(stream_id, 0) AS stream_id,
       unit < 2 AND context_id IS NOT NULL AND stream_id IS NOT NULL AS in_stream
FROM (SELECT global_pid, pid, device_id, correlation_id, start_ns, end_ns, launch_end_ns,
             CASE WHEN graph_node_id IS NULL THEN 0 ELSE 1 END AS unit, context_id, stream_id
      FROM kernels
      UNION ALL
      SELECT global_pid, pid, device_id, correlation_id, gpu_start_ns, gpu_end_ns, NULL, 2,
             NULL, NULL
      FROM cuda_graphs
      WHERE trace_level = 'graph' AND gpu_start_ns IS NOT NULL)

-- @query graph_first
SELECT global_pid, correlation_id, min(start_ns) AS first_start_ns
FROM kernels
WHERE graph_node_id IS NOT NULL AND correlation_id IS NOT NULL AND start_ns IS NOT NULL
GROUP BY global_pid, correlation_id
ORDER BY global_pid, correlation_id

-- @query gaps
SELECT device_id, pid, global_pid,
       CASE kind_id WHEN 0 THEN 'kernel' WHEN 1 THEN 'graph_launch' ELSE 'graph_node' END
           AS kind,
       correlation_id, gap_ns, start_ns, launch_end_ns
FROM gap_rows

-- @query main_gaps
SELECT device_id, pid, global_pid, gap_ns, start_ns,
       launch_end_ns < start_ns - gap_ns AS launched_before_idle
FROM gap_rows
WHERE kind_id = 0

-- @query summary
-- One list-valued quantile per distribution: a single sorted copy of the gaps, not one
-- per percentile (each holistic aggregate holds its own copy of its input).
SELECT count, q[1] AS p50_ns, q[2] AS p90_ns, q[3] AS p99_ns, q[4] AS p999_ns,
       max_ns, mean_ns, total_ns, share_above_normal_pct, share_above_p99_threshold_pct,
       coalesce(q[3] > $p99_ns, false) AS cpu_bound, kernels, graph_kernels,
       prelaunched_gaps, prelaunched_idle_pct, starved_gaps,
       starved_q[1] AS starved_p50_ns, starved_q[2] AS starved_p99_ns
FROM (SELECT count(*) AS count, quantile_cont(gap_ns, [0.5, 0.9, 0.99, 0.999]) AS q,
             max(gap_ns) AS max_ns, avg(gap_ns) AS mean_ns,
             coalesce(sum(gap_ns), 0)::BIGINT AS total_ns,
             100.0 * count(*) FILTER (WHERE gap_ns > $normal_ns) / nullif(count(*), 0)
                 AS share_above_normal_pct,
             100.0 * count(*) FILTER (WHERE gap_ns > $p99_ns) / nullif(count(*), 0)
                 AS share_above_p99_threshold_pct,
             (SELECT count(*) FILTER (WHERE graph_node_id IS NULL) FROM kernels) AS kernels,
             (SELECT count(graph_node_id) FROM kernels) AS graph_kernels,
             count(*) FILTER (WHERE launched_before_idle) AS prelaunched_gaps,
             100.0 * coalesce(sum(gap_ns) FILTER (WHERE launched_before_idle), 0)
                 / sum(gap_ns) FILTER (WHERE launched_before_idle IS NOT NULL)
                 AS prelaunched_idle_pct,
             count(*) FILTER (WHERE NOT launched_before_idle) AS starved_gaps,
             quantile_cont(gap_ns, [0.5, 0.99]) FILTER (WHERE NOT launched_before_idle)
                 AS starved_q
      FROM main_gaps)

-- @query per_device
SELECT k.device_id, k.pid, k.kernels, k.graph_kernels, coalesce(g.gaps, 0) AS gaps,
       g.q[1] AS p50_ns, g.q[2] AS p90_ns, g.q[3] AS p99_ns, g.q[4] AS p999_ns, g.max_ns, g.mean_ns,
       coalesce(g.total_ns, 0) AS total_ns, g.share_above_normal_pct
FROM (SELECT global_pid, device_id, any_value(pid) AS pid,
             count(*) FILTER (WHERE graph_node_id IS NULL) AS kernels,
             count(graph_node_id) AS graph_kernels
      FROM kernels GROUP BY global_pid, device_id) k
LEFT JOIN (SELECT global_pid, device_id, count(*) AS gaps,
                  quantile_cont(gap_ns, [0.5, 0.9, 0.99, 0.999]) AS q, max(gap_ns) AS max_ns,
                  avg(gap_ns) AS mean_ns, sum(gap_ns)::BIGINT AS total_ns,
                  100.0 * count(*) FILTER (WHERE gap_ns > $normal_ns) / count(*)
                      AS share_above_normal_pct
           FROM main_gaps GROUP BY global_pid, device_id) g
  USING (global_pid, device_id)
ORDER BY k.device_id, k.pid

-- @query device_counts
SELECT device_id, count(gap_ns) AS gaps
FROM (SELECT DISTINCT device_id FROM kernels)
LEFT JOIN (SELECT device_id, gap_ns FROM main_gaps) USING (device_id)
GROUP BY device_id
ORDER BY device_id

-- @query graph
SELECT kind, count, q[1] AS p50_ns, q[2] AS p90_ns, q[3] AS p99_ns, max_ns, mean_ns
FROM (SELECT kind, count(*) AS count, quantile_cont(gap_ns, [0.5, 0.9, 0.99]) AS q,
             max(gap_ns) AS max_ns, avg(gap_ns) AS mean_ns
      FROM gaps
      WHERE kind <> 'kernel'
      GROUP BY kind)
ORDER BY kind

-- @query per_stream
SELECT k.device_id, k.pid, k.context_id, k.stream_id, k.kernels, coalesce(g.gaps, 0) AS gaps,
       g.q[1] AS p50_ns, g.q[2] AS p90_ns, g.q[3] AS p99_ns, g.max_ns, g.mean_ns, g.share_above_normal_pct
FROM (SELECT global_pid, device_id, context_id, stream_id, any_value(pid) AS pid,
             count(*) FILTER (WHERE graph_node_id IS NULL) AS kernels
      FROM kernels GROUP BY ALL) k
LEFT JOIN (SELECT global_pid, device_id, context_id, stream_id, count(*) AS gaps,
                  quantile_cont(gap_ns, [0.5, 0.9, 0.99]) AS q, max(gap_ns) AS max_ns,
                  avg(gap_ns) AS mean_ns,
                  100.0 * count(*) FILTER (WHERE gap_ns > $normal_ns) / count(*)
                      AS share_above_normal_pct
           FROM stream_gaps GROUP BY ALL) g
  USING (global_pid, device_id, context_id, stream_id)
ORDER BY k.device_id, k.pid, k.context_id, k.stream_id

-- @query distribution
SELECT device_id, pid, gap_ns, start_ns, launched_before_idle
FROM main_gaps
ORDER BY device_id, pid, start_ns

-- @query histogram
WITH gap_bins AS (SELECT floor(log10(gap_ns) * 5 + 1e-9)::BIGINT AS bin FROM main_gaps)
SELECT b.bin, pow(10, b.bin / 5) AS bin_lo_ns, pow(10, (b.bin + 1) / 5) AS bin_hi_ns,
       coalesce(c.gaps, 0) AS gaps,
       100.0 * coalesce(c.gaps, 0) / sum(coalesce(c.gaps, 0)) OVER () AS share_pct
FROM (SELECT unnest(range(min(bin), max(bin) + 1)) AS bin FROM gap_bins) b
LEFT JOIN (SELECT bin, count(*) AS gaps FROM gap_bins GROUP BY bin) c USING (bin)
ORDER BY b.bin
