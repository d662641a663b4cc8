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
-- (analyses/launch_gaps.py, with analyses/intervals.py and analyses/_compiled.py), since
-- a window function over one partition per GPU runs on one core. The pass reads
--   sequence         the device sequence: every kernel and graph-level execution, unit
--                    0 kernel, 1 graph node, 2 graph-level execution, sorted by start_ns,
--                    then end_ns (NULL last); a NULL end extends no busy period
--                    (end_ns = $no_end); a NULL correlation id reads -1, a NULL
--                    launch_end_ns $no_end; in_stream: a kernel with a known context and
--                    stream (each stream's kernels come in this order too, so the same
--                    pass follows them instead of a second read sorted per stream)
-- and keeps in memory
--   the gaps         from the sequence, the units that start after busy_until_ns (the
--                    furthest end among the earlier units): the sequence (global_pid,
--                    device_id, pid), kind (kernel, graph_launch, graph_node: the pass
--                    tells the first node of a launch by the first start among the
--                    launch's graph kernels, graph_first), gap_ns = start_ns -
--                    busy_until_ns, start_ns, launched_before_idle (a main gap is
--                    prelaunched when launch_end_ns < busy_until_ns; NULL when the launch
--                    call is unknown)
--   stream gaps      per stream, the own kernels that start after the end of the kernel
--                    before them: global_pid, device_id, context_id, stream_id, gap_ns
-- Rows with a NULL process, device or start are left out; a kernel with a NULL context or
-- stream counts on its GPU but in no stream.
-- The figures of the gaps are taken in numpy (analyses/figures.py, equal to DuckDB's
-- quantile_cont, avg, sum), instead of writing the gaps out for six queries to read
-- back; the kernel counts come from stream_counts.
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

-- @query sequence
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
-- The rows of sequence (room for its gaps), and of them the graph-level executions
SELECT (SELECT count(*) FROM kernels) + g AS n, g AS graph_rows
FROM (SELECT count(*) AS g FROM cuda_graphs WHERE trace_level = 'graph')

-- @query graph_first
SELECT global_pid, correlation_id, min(start_ns) AS first_start_ns
FROM kernels
WHERE graph_node_id IS NOT NULL AND correlation_id IS NOT NULL AND start_ns IS NOT NULL
GROUP BY global_pid, correlation_id
ORDER BY global_pid, correlation_id

-- @query stream_counts
-- Kernels per stream: every row of kernels, graph nodes apart (per device and process
-- they are added up from these).
SELECT global_pid, device_id, context_id, stream_id, any_value(pid) AS pid,
       count(*) FILTER (WHERE graph_node_id IS NULL) AS kernels,
       count(graph_node_id) AS graph_kernels
FROM kernels
GROUP BY ALL
