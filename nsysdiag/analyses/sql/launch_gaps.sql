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
-- Outputs (ns unless named otherwise; shares in %; "main gaps": the gaps of kind kernel;
-- percentiles are quantile_cont's, linear between the two nearest ranks):
--   summary       main gaps: count, p50/p90/p99/p999/max/mean/total, shares above the
--                 thresholds, cpu_bound (p99 > $p99_ns); kernels and graph_kernels counts;
--                 prelaunched_gaps, prelaunched_idle_pct (% of attributed idle time),
--                 starved_gaps, starved_p50_ns, starved_p99_ns
--   per_device    one row per (device, process) that ran kernels: kernels, graph_kernels,
--                 main gap count, percentiles (50, 90, 99, 99.9), max, mean, total, share
--                 above $normal_ns; ordered by device, pid
--   gaps_per_device (in the summary) main gaps per device
--   graph         one row per graph gap kind that occurs: count, p50/p90/p99, max, mean
--   per_stream    one row per (device, process, context, stream) that ran kernels:
--                 non-graph kernels, stream gaps, p50/p90/p99, max, mean, share above
--                 $normal_ns
--   distribution  every main gap (device_id, pid, gap_ns, start_ns, launched_before_idle),
--                 ordered by device, pid, start
--   histogram     main gaps per log-spaced bin, empty bins included: 5 bins per decade
--                 of ns, bin b = floor(log10(gap_ns) * 5 + 1e-9) covers
--                 [10^(b/5), 10^((b+1)/5)) ns; share_pct of the main gaps

-- The queries gaps ... histogram below are the method. The accelerated pass
-- (launch_gaps.accelerated: a sorted pass in numpy, compute/intervals.py and
-- compute/compiled.py, with figures.py's equivalents of quantile_cont, avg and sum)
-- computes the same tables from the queries sequence, graph_first and stream_counts at the
-- end of this file; nsysdiag/engine/accelerate.py chooses between the two by input size,
-- and tests/test_accelerated.py compares them table for table.

-- @query gaps
-- @needs cuda_graphs, kernels
-- (a step) Every gap of the device sequences: the units that start after busy_until_ns,
-- the running maximum of end_ns over the earlier units of their process and GPU. A NULL
-- end extends no busy period (max ignores it); rows with a NULL process, device or start
-- are left out. kind as defined above; launched_before_idle: the launch call returned
-- before the GPU went idle (NULL when unknown, and for graph gaps).
WITH sequence AS (
    SELECT global_pid, device_id, correlation_id, unit, start_ns, end_ns, launch_end_ns,
           max(end_ns) OVER (PARTITION BY global_pid, device_id ORDER BY start_ns, end_ns
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS busy_until_ns
    FROM (SELECT global_pid, device_id, correlation_id, start_ns, end_ns, launch_end_ns,
                 CASE WHEN graph_node_id IS NULL THEN 'kernel' ELSE 'graph_node' END AS unit
          FROM kernels
          UNION ALL
          SELECT global_pid, device_id, correlation_id, gpu_start_ns, gpu_end_ns, NULL,
                 'graph'
          FROM cuda_graphs
          WHERE trace_level = 'graph' AND gpu_start_ns IS NOT NULL)
    WHERE global_pid IS NOT NULL AND device_id IS NOT NULL AND start_ns IS NOT NULL),
first_nodes AS (
    SELECT global_pid, correlation_id, min(start_ns) AS first_start_ns
    FROM kernels
    WHERE graph_node_id IS NOT NULL AND correlation_id IS NOT NULL
    GROUP BY global_pid, correlation_id)
SELECT s.global_pid, s.device_id, (s.global_pid >> 24) & 16777215 AS pid,
       CASE WHEN s.unit = 'kernel' THEN 'kernel'
            WHEN s.unit = 'graph' OR s.start_ns = f.first_start_ns THEN 'graph_launch'
            ELSE 'graph_node' END AS kind,
       s.start_ns - s.busy_until_ns AS gap_ns, s.start_ns,
       s.launch_end_ns < s.busy_until_ns AS launched_before_idle
FROM sequence s
LEFT JOIN first_nodes f
  ON s.unit = 'graph_node' AND f.global_pid = s.global_pid
 AND f.correlation_id = s.correlation_id
WHERE s.start_ns > s.busy_until_ns

-- @query stream_gaps
-- @needs kernels
-- (a step) Per stream, the gap before each kernel launched on its own: start_ns minus the
-- end of the kernel before it on the stream (lag; graph nodes count as predecessors),
-- when positive. Kernels with a NULL context or stream are in no stream.
SELECT global_pid, device_id, context_id, stream_id, start_ns - previous_end_ns AS gap_ns
FROM (SELECT global_pid, device_id, context_id, stream_id, graph_node_id, start_ns,
             lag(end_ns) OVER (PARTITION BY global_pid, device_id, context_id, stream_id
                               ORDER BY start_ns, end_ns) AS previous_end_ns
      FROM kernels
      WHERE global_pid IS NOT NULL AND device_id IS NOT NULL AND start_ns IS NOT NULL
        AND context_id IS NOT NULL AND stream_id IS NOT NULL)
WHERE graph_node_id IS NULL AND start_ns > previous_end_ns

-- @query summary
-- @needs gaps, stream_counts
SELECT count, q[1] AS p50_ns, q[2] AS p90_ns, q[3] AS p99_ns, q[4] AS p999_ns,
       max_ns, mean_ns, total_ns, share_above_normal_pct, share_above_p99_threshold_pct,
       coalesce(q[3] > $p99_ns, false) AS cpu_bound, kernels, graph_kernels,
       prelaunched_gaps, prelaunched_idle_pct, starved_gaps,
       starved_q[1] AS starved_p50_ns, starved_q[2] AS starved_p99_ns,
       $normal_ns::BIGINT AS normal_threshold_ns, $p99_ns::BIGINT AS p99_threshold_ns
FROM (SELECT count(*) AS count, quantile_cont(gap_ns, [0.5, 0.9, 0.99, 0.999]) AS q,
             max(gap_ns) AS max_ns, avg(gap_ns) AS mean_ns,
             coalesce(sum(gap_ns), 0)::BIGINT AS total_ns,
             100.0 * count(*) FILTER (WHERE gap_ns > $normal_ns) / nullif(count(*), 0)
                 AS share_above_normal_pct,
             100.0 * count(*) FILTER (WHERE gap_ns > $p99_ns) / nullif(count(*), 0)
                 AS share_above_p99_threshold_pct,
             count(*) FILTER (WHERE launched_before_idle) AS prelaunched_gaps,
             100.0 * coalesce(sum(gap_ns) FILTER (WHERE launched_before_idle), 0)
                 / nullif(sum(gap_ns) FILTER (WHERE launched_before_idle IS NOT NULL), 0)
                 AS prelaunched_idle_pct,
             count(*) FILTER (WHERE NOT launched_before_idle) AS starved_gaps,
             quantile_cont(gap_ns, [0.5, 0.99]) FILTER (WHERE NOT launched_before_idle)
                 AS starved_q
      FROM gaps WHERE kind = 'kernel'),
     (SELECT coalesce(sum(kernels), 0)::BIGINT AS kernels,
             coalesce(sum(graph_kernels), 0)::BIGINT AS graph_kernels
      FROM stream_counts)

-- @query per_device
-- @needs gaps, stream_counts
SELECT k.device_id, k.pid, k.kernels, k.graph_kernels, coalesce(g.gaps, 0) AS gaps,
       g.q[1] AS p50_ns, g.q[2] AS p90_ns, g.q[3] AS p99_ns, g.q[4] AS p999_ns, g.max_ns,
       g.mean_ns, coalesce(g.total_ns, 0) AS total_ns, g.share_above_normal_pct
FROM (SELECT global_pid, device_id, any_value(pid) AS pid, sum(kernels)::BIGINT AS kernels,
             sum(graph_kernels)::BIGINT AS graph_kernels
      FROM stream_counts GROUP BY global_pid, device_id) k
LEFT JOIN (SELECT global_pid, device_id, count(*) AS gaps,
                  quantile_cont(gap_ns, [0.5, 0.9, 0.99, 0.999]) AS q, max(gap_ns) AS max_ns,
                  avg(gap_ns) AS mean_ns, sum(gap_ns)::BIGINT AS total_ns,
                  100.0 * count(*) FILTER (WHERE gap_ns > $normal_ns) / count(*)
                      AS share_above_normal_pct
           FROM gaps WHERE kind = 'kernel' GROUP BY global_pid, device_id) g
  ON g.global_pid = k.global_pid AND g.device_id = k.device_id
ORDER BY k.device_id, k.pid, k.global_pid

-- @query device_counts
-- @needs gaps, stream_counts
-- Main gaps per GPU, every GPU that ran kernels (gaps_per_device in the summary)
SELECT d.device_id, count(g.gap_ns) AS gaps
FROM (SELECT DISTINCT device_id FROM stream_counts) d
LEFT JOIN (SELECT device_id, gap_ns FROM gaps WHERE kind = 'kernel') g
  ON g.device_id = d.device_id
GROUP BY d.device_id
ORDER BY d.device_id

-- @query graph
-- @needs gaps
SELECT kind, count, q[1] AS p50_ns, q[2] AS p90_ns, q[3] AS p99_ns, max_ns, mean_ns
FROM (SELECT kind, count(*) AS count, quantile_cont(gap_ns, [0.5, 0.9, 0.99]) AS q,
             max(gap_ns) AS max_ns, avg(gap_ns) AS mean_ns
      FROM gaps
      WHERE kind <> 'kernel'
      GROUP BY kind)
ORDER BY kind

-- @query per_stream
-- @needs stream_counts, stream_gaps
SELECT k.device_id, k.pid, k.context_id, k.stream_id, k.kernels, coalesce(g.gaps, 0) AS gaps,
       g.q[1] AS p50_ns, g.q[2] AS p90_ns, g.q[3] AS p99_ns, g.max_ns, g.mean_ns,
       g.share_above_normal_pct
FROM stream_counts k
LEFT JOIN (SELECT global_pid, device_id, context_id, stream_id, count(*) AS gaps,
                  quantile_cont(gap_ns, [0.5, 0.9, 0.99]) AS q, max(gap_ns) AS max_ns,
                  avg(gap_ns) AS mean_ns,
                  100.0 * count(*) FILTER (WHERE gap_ns > $normal_ns) / count(*)
                      AS share_above_normal_pct
           FROM stream_gaps GROUP BY ALL) g
  ON g.global_pid = k.global_pid AND g.device_id = k.device_id
 AND g.context_id = k.context_id AND g.stream_id = k.stream_id
ORDER BY k.device_id, k.pid, k.context_id, k.stream_id, k.global_pid

-- @query distribution
-- @needs gaps
SELECT device_id, pid, gap_ns, start_ns, launched_before_idle
FROM gaps
WHERE kind = 'kernel'
ORDER BY device_id, pid, start_ns

-- @query histogram
-- @needs gaps
WITH gap_bins AS (SELECT floor(log10(gap_ns) * 5 + 1e-9)::BIGINT AS bin
                  FROM gaps WHERE kind = 'kernel')
SELECT b.bin, pow(10, b.bin / 5) AS bin_lo_ns, pow(10, (b.bin + 1) / 5) AS bin_hi_ns,
       coalesce(c.gaps, 0) AS gaps,
       100.0 * coalesce(c.gaps, 0) / sum(coalesce(c.gaps, 0)) OVER () AS share_pct
FROM (SELECT unnest(range(min(bin), max(bin) + 1)) AS bin FROM gap_bins) b
LEFT JOIN (SELECT bin, count(*) AS gaps FROM gap_bins GROUP BY bin) c USING (bin)
ORDER BY b.bin

-- The accelerated pass reads these three.

-- @query sequence
-- @needs cuda_graphs, kernels
-- The device sequence as the pass reads it, sorted by start_ns then end_ns (NULL last):
-- every kernel and graph-level execution, unit 0 kernel, 1 graph node, 2 graph-level
-- execution; a NULL end reads $no_end (below every timestamp: it extends no busy period),
-- a NULL correlation id -1, a NULL launch_end_ns $no_end; in_stream: a kernel with a
-- known context and stream (each stream's kernels come in this order too, so the same
-- pass follows them).
SELECT global_pid, device_id, coalesce(correlation_id, -1) AS correlation_id, unit,
       start_ns, end_ns AS sort_end, coalesce(end_ns, $no_end) AS end_ns,
       coalesce(launch_end_ns, $no_end) AS launch_end_ns,
       coalesce(context_id, 0) AS context_id, coalesce(stream_id, 0) AS stream_id,
       unit < 2 AND context_id IS NOT NULL AND stream_id IS NOT NULL AS in_stream
FROM (SELECT global_pid, device_id, correlation_id, start_ns, end_ns, launch_end_ns,
             CASE WHEN graph_node_id IS NULL THEN 0 ELSE 1 END AS unit, context_id, stream_id
      FROM kernels
      UNION ALL
      SELECT global_pid, device_id, correlation_id, gpu_start_ns, gpu_end_ns, NULL, 2,
             NULL, NULL
      FROM cuda_graphs
      WHERE trace_level = 'graph' AND gpu_start_ns IS NOT NULL)

-- @query sequence_rows
-- @needs cuda_graphs, kernels
-- The rows of sequence (room for its gaps), and of them the graph-level executions
SELECT (SELECT count(*) FROM kernels) + g AS n, g AS graph_rows
FROM (SELECT count(*) AS g FROM cuda_graphs WHERE trace_level = 'graph')

-- @query graph_first
-- @needs kernels
SELECT global_pid, correlation_id, min(start_ns) AS first_start_ns
FROM kernels
WHERE graph_node_id IS NOT NULL AND correlation_id IS NOT NULL AND start_ns IS NOT NULL
GROUP BY global_pid, correlation_id
ORDER BY global_pid, correlation_id

-- @query stream_counts
-- @needs kernels
-- @keep view
-- Kernels per stream: every row of kernels, graph nodes apart (per device and process
-- they are added up from these).
SELECT global_pid, device_id, context_id, stream_id, any_value(pid) AS pid,
       count(*) FILTER (WHERE graph_node_id IS NULL) AS kernels,
       count(graph_node_id) AS graph_kernels
FROM kernels
GROUP BY ALL
