-- workload: do the slowest units do more GPU work, or the same work slower?
--
-- Inputs: the table the Python side registers:
--   _workload_instances  the ranges analysis' instances (instance, start_ns, end_ns,
--                        duration_ns, pid, tid, n_kernels, own_kernel_total_ns,
--                        own_copy_total_ns, cuda_covered)
-- Parameters: $slow_n (slowest units compared); $scope ('thread' or 'process': whose API
-- calls belong to a unit, as in ranges).
-- Units: *_ns nanoseconds; *_kernels counts of kernels (means over units).
--
-- Outputs:
--   compare   the $slow_n slowest units against the median band (45th-55th percentile, as
--             ranges' attribution), over the units the CUDA trace covers: slow_n, median_n,
--             slow_duration_ns, median_duration_ns, slow_kernels, median_kernels (own
--             kernels per unit, means), slow_kernel_ns, median_kernel_ns (own kernel time
--             per unit, means), slow_per_kernel_ns, median_per_kernel_ns (own kernel time
--             over own kernels: the group's mean kernel duration), slow_copy_bytes,
--             median_copy_bytes (bytes per unit, means, of the HtoD and DtoH copies whose
--             launching call lies inside the unit on its thread or process, as ranges' own
--             work), slow_copy_ns, median_copy_ns (own copy and memset time per unit, means),
--             slow_collective_ns, median_collective_ns (time per unit, means, of the NCCL
--             kernels of the unit's process within the unit's span: collectives, whose
--             kernels wait on the GPU until every rank has arrived)
--   relation  over every covered unit: units, r_kernels (Pearson correlation of latency
--             with own kernels per unit), slope_ns_per_kernel (least-squares latency growth
--             per extra kernel), intercept_ns, r_kernel_ns (correlation with own kernel
--             time), slope_kernel_ns (latency growth per ns of own kernel time)
--   bins      the covered units in five bins of own kernels per unit (quintiles): bin,
--             units, min_kernels, max_kernels, mean_kernels, p50_ns (median latency),
--             mean_per_kernel_ns
--   sizes     every covered unit with the work it did on each side: instance, start_ns,
--             duration_ns,
--             htod_bytes, dtoh_bytes (bytes of the HtoD / DtoH copies whose launching
--             call lies inside the unit on its thread or process), n_kernels, kernel_ns
--             (own kernel time), launch_calls (kernel and graph launch calls inside it),
--             host_ns (its time outside CUDA calls; NULL without the column), oneoff (it
--             holds a one-off call, as ranges marks it; NULL without the column), counted
--             (not warm-up: the Python side keeps these and learns the warm-up's sizes from
--             the rest). A call goes
--             to the most recently started unit of its key when that one contains it, as
--             in ranges; a runtime call and the driver call with its id count once.
--   size_bins the units of _workload_size_values (measure, instance, x, duration_ns: one
--             row per unit and size measure) in bins of consecutive sizes, each holding at
--             least $min_units units, equal sizes always in one bin (a bin of fewer, after
--             one size that filled several, joins the bin before it): measure, bin, units,
--             x_median (the bin's median size), p50_ns (its median latency). Medians, so a
--             few stalled units cannot move a bin; the monotone fit over the bins is Python's
--             (scipy.optimize.isotonic_regression).


-- @query compare
-- @needs api_calls, kernels, memcpys, _workload_instances
WITH i AS (SELECT * FROM _workload_instances WHERE cuda_covered IS NOT FALSE),
band AS (
    SELECT quantile_cont(duration_ns, 0.45) AS lo, quantile_cont(duration_ns, 0.55) AS hi
    FROM i),
ranked AS (SELECT *, row_number() OVER (ORDER BY duration_ns DESC, start_ns) AS slow_rank FROM i),
g AS (
    SELECT 'slow' AS grp, * FROM ranked WHERE slow_rank <= $slow_n
    UNION ALL
    SELECT 'median', r.* FROM ranked r, band WHERE r.duration_ns BETWEEN band.lo AND band.hi),
nccl AS (
    SELECT pid, start_ns, end_ns FROM kernels
    WHERE (name ILIKE 'nccl%' OR short_name ILIKE 'nccl%')
      AND start_ns IS NOT NULL AND end_ns IS NOT NULL),
unit_collective AS (
    SELECT u.grp, u.instance,
           sum(least(n.end_ns, u.end_ns) - greatest(n.start_ns, u.start_ns)) AS collective_ns
    FROM g u JOIN nccl n
      ON n.pid = u.pid AND n.start_ns < u.end_ns AND n.end_ns > u.start_ns
    GROUP BY ALL),
moved AS (
    SELECT a.pid, a.tid, a.start_ns AS call_ns, m.bytes
    FROM memcpys m JOIN api_calls a USING (global_pid, correlation_id)
    WHERE m.copy_kind IN ('HtoD', 'DtoH')),
-- a unit's bytes: those of the copies called on its thread (or process, $scope) from its
-- start to its end, as the running total of their bytes at the last call at or before
-- its end less that at the last call before its start (ASOF joins: no comparison of each
-- unit with each copy)
keyed AS (
    SELECT pid, CASE WHEN $scope = 'process' THEN 0 ELSE tid END AS who, call_ns,
           sum(bytes) AS bytes
    FROM moved
    WHERE pid IS NOT NULL AND call_ns IS NOT NULL AND ($scope = 'process' OR tid IS NOT NULL)
    GROUP BY ALL),
running AS (
    SELECT pid, who, call_ns,
           sum(bytes) OVER (PARTITION BY pid, who ORDER BY call_ns ROWS UNBOUNDED PRECEDING)
               AS upto, count(bytes) OVER (PARTITION BY pid, who ORDER BY call_ns
                                           ROWS UNBOUNDED PRECEDING) AS counted
    FROM keyed),
g_keyed AS (
    SELECT grp, instance, pid, CASE WHEN $scope = 'process' THEN 0 ELSE tid END AS who,
           start_ns, end_ns
    FROM g WHERE pid IS NOT NULL AND start_ns IS NOT NULL AND end_ns IS NOT NULL
      AND ($scope = 'process' OR tid IS NOT NULL)),
unit_bytes AS (
    SELECT u.grp, u.instance,
           CASE WHEN e.counted > coalesce(b.counted, 0)
                THEN e.upto - coalesce(b.upto, 0) END AS copy_bytes
    FROM g_keyed u
    ASOF JOIN running e ON e.pid = u.pid AND e.who = u.who AND u.end_ns >= e.call_ns
    ASOF LEFT JOIN running b ON b.pid = u.pid AND b.who = u.who AND u.start_ns > b.call_ns
    WHERE u.end_ns >= u.start_ns)
SELECT count(*) FILTER (WHERE grp = 'slow') AS slow_n,
       count(*) FILTER (WHERE grp = 'median') AS median_n,
       avg(duration_ns) FILTER (WHERE grp = 'slow') AS slow_duration_ns,
       avg(duration_ns) FILTER (WHERE grp = 'median') AS median_duration_ns,
       avg(n_kernels) FILTER (WHERE grp = 'slow') AS slow_kernels,
       avg(n_kernels) FILTER (WHERE grp = 'median') AS median_kernels,
       avg(own_kernel_total_ns) FILTER (WHERE grp = 'slow') AS slow_kernel_ns,
       avg(own_kernel_total_ns) FILTER (WHERE grp = 'median') AS median_kernel_ns,
       sum(own_kernel_total_ns) FILTER (WHERE grp = 'slow')
           / nullif(sum(n_kernels) FILTER (WHERE grp = 'slow'), 0) AS slow_per_kernel_ns,
       sum(own_kernel_total_ns) FILTER (WHERE grp = 'median')
           / nullif(sum(n_kernels) FILTER (WHERE grp = 'median'), 0) AS median_per_kernel_ns,
       avg(coalesce(copy_bytes, 0)) FILTER (WHERE grp = 'slow') AS slow_copy_bytes,
       avg(coalesce(copy_bytes, 0)) FILTER (WHERE grp = 'median') AS median_copy_bytes,
       avg(own_copy_total_ns) FILTER (WHERE grp = 'slow') AS slow_copy_ns,
       avg(own_copy_total_ns) FILTER (WHERE grp = 'median') AS median_copy_ns,
       avg(coalesce(collective_ns, 0)) FILTER (WHERE grp = 'slow') AS slow_collective_ns,
       avg(coalesce(collective_ns, 0)) FILTER (WHERE grp = 'median') AS median_collective_ns
FROM g LEFT JOIN unit_bytes USING (grp, instance)
       LEFT JOIN unit_collective USING (grp, instance)


-- @query relation
-- @needs _workload_instances
-- (a correlation or slope over units that all launch the same work is undefined: NULL,
-- not NaN)
SELECT count(*) AS units,
       nullif(corr(duration_ns, n_kernels), 'NaN') AS r_kernels,
       nullif(regr_slope(duration_ns, n_kernels), 'NaN') AS slope_ns_per_kernel,
       nullif(regr_intercept(duration_ns, n_kernels), 'NaN') AS intercept_ns,
       nullif(corr(duration_ns, own_kernel_total_ns), 'NaN') AS r_kernel_ns,
       nullif(regr_slope(duration_ns, own_kernel_total_ns), 'NaN') AS slope_kernel_ns
FROM _workload_instances WHERE cuda_covered IS NOT FALSE


-- @query bins
-- @needs _workload_instances
SELECT bin, count(*) AS units, min(n_kernels) AS min_kernels, max(n_kernels) AS max_kernels,
       avg(n_kernels) AS mean_kernels, quantile_cont(duration_ns, 0.5) AS p50_ns,
       sum(own_kernel_total_ns) / nullif(sum(n_kernels), 0) AS mean_per_kernel_ns
FROM (SELECT *, ntile(5) OVER (ORDER BY n_kernels, duration_ns) AS bin
      FROM _workload_instances WHERE cuda_covered IS NOT FALSE)
GROUP BY bin ORDER BY bin


-- @query sizes
-- @needs api_calls, memcpys, _workload_instances
WITH u AS (
    SELECT instance, duration_ns, start_ns, end_ns, pid,
           CASE WHEN $scope = 'process' THEN 0 ELSE tid END AS k, n_kernels,
           own_kernel_total_ns AS kernel_ns, host_ns, oneoff, counted
    FROM _workload_instances WHERE cuda_covered IS NOT FALSE),
calls AS (
    SELECT global_pid, correlation_id, any_value(pid) AS pid,
           any_value(CASE WHEN $scope = 'process' THEN 0 ELSE tid END) AS k,
           min(start_ns) AS call_ns, bool_or(category IN ('launch', 'graph_launch')) AS launch
    FROM api_calls WHERE category IN ('launch', 'graph_launch', 'memcpy')
    GROUP BY global_pid, correlation_id),
placed AS (
    SELECT u.instance, c.global_pid, c.correlation_id, c.launch
    FROM calls c ASOF JOIN u ON c.pid = u.pid AND c.k = u.k AND c.call_ns >= u.start_ns
    WHERE c.call_ns <= u.end_ns),
moved AS (
    SELECT p.instance,
           sum(m.bytes) FILTER (WHERE m.copy_kind = 'HtoD') AS htod_bytes,
           sum(m.bytes) FILTER (WHERE m.copy_kind = 'DtoH') AS dtoh_bytes
    FROM placed p JOIN memcpys m USING (global_pid, correlation_id)
    GROUP BY p.instance),
launched AS (
    SELECT instance, count(*) AS launch_calls FROM placed WHERE launch GROUP BY instance),
-- (the accelerated pass computes moved and launched itself, as _workload_unit_work, and
-- gives it to the query sizes_of below)
unit_work AS (
    SELECT instance, htod_bytes, dtoh_bytes, launch_calls
    FROM moved FULL JOIN launched USING (instance))
SELECT u.instance, u.start_ns, u.duration_ns,
       coalesce(w.htod_bytes, 0)::DOUBLE AS htod_bytes,
       coalesce(w.dtoh_bytes, 0)::DOUBLE AS dtoh_bytes, u.n_kernels, u.kernel_ns,
       coalesce(w.launch_calls, 0) AS launch_calls, u.host_ns, u.oneoff, u.counted
FROM u LEFT JOIN unit_work w USING (instance)
ORDER BY u.instance


-- @query size_calls
-- @needs api_calls, memcpys, _workload_keys
-- The accelerated pass of `sizes` reads its `calls`, one row per (process, correlation
-- id), with the bytes each way of the copies with that id (`moved` before it is summed per
-- unit) and the code of the call's key (process and thread, or process) among the units'
-- keys, _workload_keys (pid, k, code): calls of no unit's key cannot be placed and are
-- left out. It places each call in the most recently started unit of its key, as `placed`,
-- by a search among the units' starts, and sums per unit.
WITH calls AS (
    SELECT global_pid, correlation_id, any_value(pid) AS pid,
           any_value(CASE WHEN $scope = 'process' THEN 0 ELSE tid END) AS k,
           min(start_ns) AS call_ns, bool_or(category IN ('launch', 'graph_launch')) AS launch
    FROM api_calls WHERE category IN ('launch', 'graph_launch', 'memcpy')
    GROUP BY global_pid, correlation_id),
copied AS (
    SELECT global_pid, correlation_id,
           sum(bytes) FILTER (WHERE copy_kind = 'HtoD') AS htod_bytes,
           sum(bytes) FILTER (WHERE copy_kind = 'DtoH') AS dtoh_bytes
    FROM memcpys GROUP BY global_pid, correlation_id)
SELECT w.code, c.call_ns, c.launch, m.htod_bytes, m.dtoh_bytes
FROM calls c JOIN _workload_keys w ON w.pid = c.pid AND w.k = c.k
LEFT JOIN copied m USING (global_pid, correlation_id)
WHERE c.call_ns IS NOT NULL


-- @query size_call_rows
-- @needs api_calls
-- (where the pass groups the calls itself, in numpy: they come stored in start order, so in
-- correlation order in each process) the rows `calls` groups, with the copies' bytes of
-- each (process, correlation id) apart in size_copies
SELECT global_tid, correlation_id, start_ns, category IN ('launch', 'graph_launch') AS launch
FROM api_calls WHERE category IN ('launch', 'graph_launch', 'memcpy')

-- @query size_copies
-- @needs memcpys
SELECT global_pid, correlation_id,
       sum(bytes) FILTER (WHERE copy_kind = 'HtoD') AS htod_bytes,
       sum(bytes) FILTER (WHERE copy_kind = 'DtoH') AS dtoh_bytes
FROM memcpys WHERE global_pid IS NOT NULL AND correlation_id IS NOT NULL
GROUP BY global_pid, correlation_id


-- @query sizes_of
-- @needs _workload_instances, _workload_unit_work
-- `sizes` from the units' work the accelerated pass summed (_workload_unit_work)
WITH u AS (
    SELECT instance, duration_ns, start_ns, n_kernels, own_kernel_total_ns AS kernel_ns,
           host_ns, oneoff, counted
    FROM _workload_instances WHERE cuda_covered IS NOT FALSE)
SELECT u.instance, u.start_ns, u.duration_ns,
       coalesce(w.htod_bytes, 0)::DOUBLE AS htod_bytes,
       coalesce(w.dtoh_bytes, 0)::DOUBLE AS dtoh_bytes, u.n_kernels, u.kernel_ns,
       coalesce(w.launch_calls, 0) AS launch_calls, u.host_ns, u.oneoff, u.counted
FROM u LEFT JOIN _workload_unit_work w USING (instance)
ORDER BY u.instance


-- @query size_bins
-- @needs _workload_size_values
WITH v AS (SELECT measure, x, count(*) AS units FROM _workload_size_values GROUP BY ALL),
first AS (  -- a size's bin: where its first unit falls, counting units in size order
    SELECT *, (sum(units) OVER (PARTITION BY measure ORDER BY x) - units) // $min_units AS b
    FROM v),
filled AS (
    SELECT measure, b, sum(units) AS units FROM first GROUP BY ALL),
grouped AS (  -- a bin short of $min_units joins the full bin before it (the first: the next)
    SELECT measure, b,
           greatest(1, sum((units >= $min_units)::INT) OVER (PARTITION BY measure ORDER BY b)
               )::INT AS bin
    FROM filled)
SELECT s.measure, g.bin, count(*) AS units, median(s.x) AS x_median,
       median(s.duration_ns) AS p50_ns
FROM _workload_size_values s JOIN first f USING (measure, x) JOIN grouped g USING (measure, b)
GROUP BY ALL ORDER BY s.measure, g.bin
