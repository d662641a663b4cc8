-- Launch gaps: idle time between kernels on a GPU, the method's measure of launch overhead.
--
-- Inputs:  kernels (start_ns, end_ns, global_pid, device_id, context_id, stream_id,
--          correlation_id, graph_node_id).
-- Params:  $normal_ns  a gap above this is not "normal" (ns; the method says 5 us);
--          $p99_ns     a P99 gap above this signals a CPU-side bottleneck (ns; 20 us).
--
-- Definition (per process and GPU: PARTITION BY global_pid, device_id): kernels sorted by
-- (start_ns, end_ns); busy_until_ns is the running maximum of end_ns over all earlier
-- kernels; a kernel that starts after it follows one gap of start_ns - busy_until_ns.
-- A kernel that starts before busy_until_ns overlaps earlier work and follows no gap.
-- CUDA graph nodes (graph_node_id NOT NULL) stay in the sequence, since they keep the GPU
-- busy, but the gap before one is reported apart by `kind`:
--   kernel        before a kernel launched on its own: the main distribution;
--   graph_launch  before the first node of a graph launch (same global_pid, correlation_id);
--   graph_node    before a later node of the same launch (intra-graph gap).
-- Per stream (PARTITION BY global_pid, device_id, context_id, stream_id): gap =
-- start_ns - end_ns of the previous kernel on the stream, when positive, before non-graph
-- kernels.
--
-- Steps (every query below runs with them in front as CTEs):
--   sequence   every kernel with busy_until_ns and kind
--   gaps       device_id, pid, global_pid, kind, correlation_id, gap_ns (ns),
--              start_ns (ns, start of the kernel after the gap)
--   gap_bins   main gaps with their log-spaced bin: 5 bins per decade of ns,
--              bin b covers [10^(b/5), 10^((b+1)/5)) ns
-- Outputs (ns unless named otherwise; shares in %):
--   summary       main gaps: count, p50/p90/p99/p999/max/mean/total, shares above the
--                 thresholds, cpu_bound (p99 > $p99_ns); kernels and graph_kernels counts
--   per_device    one row per (device, process): kernels, graph_kernels, gap percentiles
--   device_counts main gaps per device
--   graph         one row per graph gap kind: count and percentiles
--   per_stream    one row per (device, process, context, stream)
--   distribution  every main gap, in time order per device and process
--   histogram     main gaps per log-spaced bin, empty bins included

-- @query sequence
SELECT global_pid, pid, device_id, correlation_id, start_ns,
       max(end_ns) OVER (PARTITION BY global_pid, device_id ORDER BY start_ns, end_ns
                         ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS busy_until_ns,
       CASE WHEN graph_node_id IS NULL THEN 'kernel'
            WHEN row_number() OVER (PARTITION BY global_pid, correlation_id, graph_node_id IS NULL
                                    ORDER BY start_ns, end_ns) = 1 THEN 'graph_launch'
            ELSE 'graph_node' END AS kind
FROM kernels

-- @query gaps
SELECT device_id, pid, global_pid, kind, correlation_id, start_ns - busy_until_ns AS gap_ns,
       start_ns
FROM sequence
WHERE start_ns > busy_until_ns

-- @query gap_bins
SELECT gap_ns, floor(log10(gap_ns) * 5 + 1e-9)::BIGINT AS bin
FROM gaps
WHERE kind = 'kernel'

-- @query summary
SELECT count(*) AS count,
       quantile_cont(gap_ns, 0.5) AS p50_ns, quantile_cont(gap_ns, 0.9) AS p90_ns,
       quantile_cont(gap_ns, 0.99) AS p99_ns, quantile_cont(gap_ns, 0.999) AS p999_ns,
       max(gap_ns) AS max_ns, avg(gap_ns) AS mean_ns,
       coalesce(sum(gap_ns), 0)::BIGINT AS total_ns,
       100.0 * count(*) FILTER (WHERE gap_ns > $normal_ns) / nullif(count(*), 0)
           AS share_above_normal_pct,
       100.0 * count(*) FILTER (WHERE gap_ns > $p99_ns) / nullif(count(*), 0)
           AS share_above_p99_threshold_pct,
       coalesce(quantile_cont(gap_ns, 0.99) > $p99_ns, false) AS cpu_bound,
       (SELECT count(*) FILTER (WHERE kind = 'kernel') FROM sequence) AS kernels,
       (SELECT count(*) FILTER (WHERE kind <> 'kernel') FROM sequence) AS graph_kernels
FROM gaps
WHERE kind = 'kernel'

-- @query per_device
SELECT k.device_id, k.pid, k.kernels, k.graph_kernels, coalesce(g.gaps, 0) AS gaps,
       g.p50_ns, g.p90_ns, g.p99_ns, g.p999_ns, g.max_ns, g.mean_ns,
       coalesce(g.total_ns, 0) AS total_ns, g.share_above_normal_pct
FROM (SELECT global_pid, device_id, any_value(pid) AS pid,
             count(*) FILTER (WHERE kind = 'kernel') AS kernels,
             count(*) FILTER (WHERE kind <> 'kernel') AS graph_kernels
      FROM sequence GROUP BY global_pid, device_id) k
LEFT JOIN (SELECT global_pid, device_id, count(*) AS gaps,
                  quantile_cont(gap_ns, 0.5) AS p50_ns, quantile_cont(gap_ns, 0.9) AS p90_ns,
                  quantile_cont(gap_ns, 0.99) AS p99_ns, quantile_cont(gap_ns, 0.999) AS p999_ns,
                  max(gap_ns) AS max_ns, avg(gap_ns) AS mean_ns, sum(gap_ns)::BIGINT AS total_ns,
                  100.0 * count(*) FILTER (WHERE gap_ns > $normal_ns) / count(*)
                      AS share_above_normal_pct
           FROM gaps WHERE kind = 'kernel' GROUP BY global_pid, device_id) g
  USING (global_pid, device_id)
ORDER BY k.device_id, k.pid

-- @query device_counts
SELECT device_id, count(gap_ns) AS gaps
FROM (SELECT DISTINCT device_id FROM sequence)
LEFT JOIN (SELECT device_id, gap_ns FROM gaps WHERE kind = 'kernel') USING (device_id)
GROUP BY device_id
ORDER BY device_id

-- @query graph
SELECT kind, count(*) AS count,
       quantile_cont(gap_ns, 0.5) AS p50_ns, quantile_cont(gap_ns, 0.9) AS p90_ns,
       quantile_cont(gap_ns, 0.99) AS p99_ns, max(gap_ns) AS max_ns, avg(gap_ns) AS mean_ns
FROM gaps
WHERE kind <> 'kernel'
GROUP BY kind
ORDER BY kind

-- @query per_stream
SELECT device_id, any_value(pid) AS pid, context_id, stream_id,
       count(*) FILTER (WHERE graph_node_id IS NULL) AS kernels, count(gap_ns) AS gaps,
       quantile_cont(gap_ns, 0.5) AS p50_ns, quantile_cont(gap_ns, 0.9) AS p90_ns,
       quantile_cont(gap_ns, 0.99) AS p99_ns, max(gap_ns) AS max_ns, avg(gap_ns) AS mean_ns,
       100.0 * count(*) FILTER (WHERE gap_ns > $normal_ns) / nullif(count(gap_ns), 0)
           AS share_above_normal_pct
FROM (SELECT *, CASE WHEN graph_node_id IS NULL AND start_ns > previous_end_ns
                    THEN start_ns - previous_end_ns END AS gap_ns
      FROM (SELECT device_id, pid, global_pid, context_id, stream_id, graph_node_id, start_ns,
                   lag(end_ns) OVER (PARTITION BY global_pid, device_id, context_id, stream_id
                                     ORDER BY start_ns, end_ns) AS previous_end_ns
            FROM kernels))
GROUP BY device_id, global_pid, context_id, stream_id
ORDER BY device_id, pid, context_id, stream_id

-- @query distribution
SELECT device_id, pid, gap_ns, start_ns
FROM gaps
WHERE kind = 'kernel'
ORDER BY device_id, pid, start_ns

-- @query histogram
SELECT b.bin, pow(10, b.bin / 5) AS bin_lo_ns, pow(10, (b.bin + 1) / 5) AS bin_hi_ns,
       coalesce(c.gaps, 0) AS gaps,
       100.0 * coalesce(c.gaps, 0) / sum(coalesce(c.gaps, 0)) OVER () AS share_pct
FROM (SELECT unnest(range(min(bin), max(bin) + 1)) AS bin FROM gap_bins) b
LEFT JOIN (SELECT bin, count(*) AS gaps FROM gap_bins GROUP BY bin) c USING (bin)
ORDER BY b.bin
