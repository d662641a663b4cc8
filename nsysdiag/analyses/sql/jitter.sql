-- Kernel duration jitter (check D1 of the method): does the same kernel sometimes run slower?
--
-- "The same kernel" is a name *and* a launch configuration (grid and block): one name run
-- at two grids does twice the work at one of them, which is not jitter.
--
-- Inputs:  jitter_kernels (name, grid_x, grid_y, grid_z, block_x, block_y, block_z,
--          duration_ns): one of the queries below, named as a temporary view: each kernel
--          with its launch configuration when the export records it (kernel_configs), with
--          NULL configurations when it does not.
-- Params:  $top   how many kernel names, by total GPU time, to examine.
--          $slow  a launch counts as slow when duration > $slow x the kernel's median.
-- Outputs: per_kernel: name, instances, total_ns, p50_ns, p90_ns, p99_ns, max_ns,
--          p99_over_p50 (ratio), slow_pct (% of launches slower than $slow x median),
--          cv (stddev / mean, dimensionless).
-- (The concurrency table comes from the overlap analysis: see jitter.py.)

-- @query by_shape
-- @needs _kernels_stored
-- A kernel's configuration is the grid and block packed in the kernels view's own file
-- (views/definitions.py: KERNELS.hidden, x << 32 | y << 16 | z), read in the same pass as
-- its name: no second view beside it. Used when `shapes_pack` holds; the sizes are those
-- of the configuration view's row made from the same row of the export's kernel table,
-- NULL all six where one is missing.
SELECT name, grid >> 32 AS grid_x, (grid >> 16) & 65535 AS grid_y, grid & 65535 AS grid_z,
       block >> 32 AS block_x, (block >> 16) & 65535 AS block_y, block & 65535 AS block_z,
       duration_ns
FROM _kernels_stored
WHERE duration_ns > 0

-- @query shapes_pack
-- @needs _kernels_stored
-- Every kernel's grid and block packed (none outside CUDA's limits: -1)
SELECT count(*) FILTER (WHERE grid = -1 OR block = -1) = 0 FROM _kernels_stored

-- @query by_position
-- @needs kernel_configs, kernels
-- A kernel's configuration is the kernel_configs row made from the same row of the
-- export's kernel table. Both views read that table and write its rows in its order
-- (ViewSpec.in_export_order), so it is the row at the same position: a positional join,
-- one pass over both, used when `aligned` holds.
SELECT k.name, c.grid_x, c.grid_y, c.grid_z, c.block_x, c.block_y, c.block_z, k.duration_ns
FROM kernels k POSITIONAL JOIN kernel_configs c
WHERE k.duration_ns > 0

-- @query aligned
-- @needs kernel_configs, kernels
-- Every row of the two views carries the same key (process, correlation id, start), and
-- both have as many rows (a missing row is NULL on its side).
SELECT count(*) = 0
FROM kernels k POSITIONAL JOIN kernel_configs c
WHERE k.global_pid IS DISTINCT FROM c.global_pid
   OR k.correlation_id IS DISTINCT FROM c.correlation_id
   OR k.start_ns IS DISTINCT FROM c.start_ns

-- @query by_config
-- @needs kernel_configs, kernels
-- Where the two views are not aligned (`aligned` false: not expected, a safeguard): the
-- kernel_configs row with the kernel's process, correlation id and start. Where every key
-- is set and unique, these are the rows of by_position.
SELECT k.name, c.grid_x, c.grid_y, c.grid_z, c.block_x, c.block_y, c.block_z, k.duration_ns
FROM kernels k LEFT JOIN kernel_configs c
  ON c.global_pid = k.global_pid AND c.correlation_id = k.correlation_id
     AND c.start_ns = k.start_ns
WHERE k.duration_ns > 0

-- @query by_name
-- @needs kernels
SELECT name, NULL::BIGINT AS grid_x, NULL::BIGINT AS grid_y, NULL::BIGINT AS grid_z,
       NULL::BIGINT AS block_x, NULL::BIGINT AS block_y, NULL::BIGINT AS block_z, duration_ns
FROM kernels WHERE duration_ns > 0

-- @query per_kernel
-- @needs jitter_kernels
-- The figures of every (name, configuration) repeated 20 times come from one pass, and
-- the $top with the most GPU time are kept (choosing them first would cost a second pass
-- and a join). Kernels are grouped by the name and the six integers, and the label
-- (name <<<(grid),(block)>>>) is made for the kept groups only: one string per kernel
-- would copy every kernel's name. The kernels are read once: each group's durations are
-- kept as a list beside its quantiles (8 bytes a kernel), and the slow launches of the
-- kept groups are counted in their lists. A second pass over the kernels would repeat
-- their configurations' reading (from the kernels' file, or a positional join on one core).
-- NCCL kernels are left out: a collective's kernel waits on the GPU until every rank has
-- arrived, so its duration varies with the other ranks, not with its own execution.
WITH k AS (
    SELECT name, duration_ns,
           CASE WHEN complete THEN grid_x END AS grid_x,
           CASE WHEN complete THEN grid_y END AS grid_y,
           CASE WHEN complete THEN grid_z END AS grid_z,
           CASE WHEN complete THEN block_x END AS block_x,
           CASE WHEN complete THEN block_y END AS block_y,
           CASE WHEN complete THEN block_z END AS block_z
    FROM (SELECT *, grid_x IS NOT NULL AND grid_y IS NOT NULL AND grid_z IS NOT NULL
                    AND block_x IS NOT NULL AND block_y IS NOT NULL AND block_z IS NOT NULL
                    AS complete
          FROM jitter_kernels
          WHERE name NOT ILIKE 'nccl%')),
stats AS (
    SELECT *
    FROM (SELECT name, grid_x, grid_y, grid_z, block_x, block_y, block_z, instances,
                 total_ns, q[1] AS p50_ns, q[2] AS p90_ns, q[3] AS p99_ns, max_ns, cv,
                 durations
          FROM (SELECT name, grid_x, grid_y, grid_z, block_x, block_y, block_z,
                       count(*) AS instances, sum(duration_ns)::BIGINT AS total_ns,
                       -- one list-valued quantile: one copy of the durations, not one per
                       -- percentile
                       quantile_cont(duration_ns, [0.5, 0.9, 0.99]) AS q,
                       max(duration_ns) AS max_ns, list(duration_ns) AS durations,
                       stddev_samp(duration_ns) / nullif(avg(duration_ns), 0) AS cv
                FROM k GROUP BY ALL HAVING count(*) >= 20)
          ORDER BY total_ns DESC LIMIT $top))
SELECT s.name || coalesce(' <<<(' || s.grid_x || ',' || s.grid_y || ',' || s.grid_z || '),('
                          || s.block_x || ',' || s.block_y || ',' || s.block_z || ')>>>', '')
           AS name,
       s.instances, s.total_ns, s.p50_ns, s.p90_ns, s.p99_ns, s.max_ns,
       s.p99_ns / nullif(s.p50_ns, 0) AS p99_over_p50,
       100.0 * len(list_filter(s.durations, lambda d: d > $slow * s.p50_ns)) / s.instances
           AS slow_pct, s.cv
FROM stats s
ORDER BY s.total_ns DESC
