-- GPU time per kernel name: the figures of `nsys stats --report cuda_gpu_kern_sum`.
--
-- Inputs:  kernels (every kernel execution, CUDA graph nodes included).
-- Params:  $top  keep the $top names with the most total GPU time; NULL keeps all.
-- Outputs: per_name: one row per demangled kernel name, by total time (largest first):
--            name        demangled kernel name (kernels.name)
--            short_name  base name, for display
--            instances   executions
--            total_ns    sum of durations, ns
--            avg_ns      mean duration, ns
--            median_ns   median duration (linear interpolation between the middle two), ns
--            min_ns      shortest, ns
--            max_ns      longest, ns
--            stddev_ns   sample standard deviation (n - 1), ns; NULL for one instance
--            time_pct    total_ns as a share of all kernels' total, % (NULL when that is 0)
--          totals: kernels, names, total_ns (ns), graph_kernels (graph-node kernels).

-- @query per_name
-- @needs kernels
SELECT name, any_value(short_name) AS short_name, count(*) AS instances,
       sum(duration_ns)::BIGINT AS total_ns, avg(duration_ns) AS avg_ns,
       quantile_cont(duration_ns, 0.5) AS median_ns, min(duration_ns) AS min_ns,
       max(duration_ns) AS max_ns, stddev_samp(duration_ns) AS stddev_ns,
       100.0 * sum(duration_ns) / nullif(sum(sum(duration_ns)) OVER (), 0) AS time_pct
FROM kernels
GROUP BY name
QUALIFY $top IS NULL OR row_number() OVER (ORDER BY sum(duration_ns) DESC, name) <= $top
ORDER BY total_ns DESC, name

-- @query totals
-- @needs kernels
SELECT count(*) AS kernels, count(DISTINCT name) AS names,
       coalesce(sum(duration_ns), 0)::BIGINT AS total_ns, count(graph_node_id) AS graph_kernels
FROM kernels
