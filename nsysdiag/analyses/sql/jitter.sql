-- Kernel duration jitter (check D1 of the method): does the same kernel sometimes run slower?
--
-- "The same kernel" is a name *and* a launch configuration (grid and block): one name run
-- at two grids does twice the work at one of them, which is not jitter.
--
-- Inputs:  jitter_kernels (name, duration_ns): one of the two queries below, named as a
--          temporary view: kernels keyed by name and launch configuration when the export
--          records it (kernel_configs), by name alone when it does not.
-- Params:  $top   how many kernel names, by total GPU time, to examine.
--          $slow  a launch counts as slow when duration > $slow x the kernel's median.
-- Outputs: per_kernel: name, instances, total_ns, p50_ns, p90_ns, p99_ns, max_ns,
--          p99_over_p50 (ratio), slow_pct (% of launches slower than $slow x median),
--          cv (stddev / mean, dimensionless).
-- (The concurrency table comes from the overlap analysis: see jitter.py.)

-- @query by_config
SELECT k.name || coalesce(' <<<(' || c.grid_x || ',' || c.grid_y || ',' || c.grid_z || '),('
                          || c.block_x || ',' || c.block_y || ',' || c.block_z || ')>>>', '')
           AS name,
       k.duration_ns
FROM kernels k LEFT JOIN kernel_configs c
  ON c.global_pid = k.global_pid AND c.correlation_id = k.correlation_id
     AND c.start_ns = k.start_ns
WHERE k.duration_ns > 0

-- @query by_name
SELECT name, duration_ns FROM kernels WHERE duration_ns > 0

-- @query per_kernel
-- The figures of every name repeated 20 times come from one pass, and the $top with the
-- most GPU time are kept (choosing them first would cost a second pass and a join).
WITH k AS (SELECT name, duration_ns FROM jitter_kernels),
stats AS (
    SELECT name, instances, total_ns, q[1] AS p50_ns, q[2] AS p90_ns, q[3] AS p99_ns, max_ns, cv
    FROM (SELECT name, count(*) AS instances, sum(duration_ns)::BIGINT AS total_ns,
                 -- one list-valued quantile: one copy of the durations, not one per percentile
                 quantile_cont(duration_ns, [0.5, 0.9, 0.99]) AS q, max(duration_ns) AS max_ns,
                 stddev_samp(duration_ns) / nullif(avg(duration_ns), 0) AS cv
          FROM k GROUP BY name HAVING count(*) >= 20)
    ORDER BY total_ns DESC LIMIT $top),
slow AS (
    SELECT s.name, count(*) AS n_slow
    FROM stats s JOIN k ON k.name = s.name AND k.duration_ns > $slow * s.p50_ns
    GROUP BY s.name)
SELECT s.name, s.instances, s.total_ns, s.p50_ns, s.p90_ns, s.p99_ns, s.max_ns,
       s.p99_ns / nullif(s.p50_ns, 0) AS p99_over_p50,
       100.0 * coalesce(slow.n_slow, 0) / s.instances AS slow_pct, s.cv
FROM stats s LEFT JOIN slow USING (name)
ORDER BY s.total_ns DESC
