-- ranges: request / iteration ranges, their decomposition, and what grew in the tail.
--
-- Inputs (normalized views): nvtx_ranges, api_calls, kernels, memcpys, memsets, cuda_graphs;
-- and the tables the Python side registers between steps:
--   unit_families      the numbered families of range names (output of unit_families)
--   unit_probes        the probes of the unit choice (output of unit_probes)
--   unit_probe_calls   their GPU-launching calls (output of unit_probe_calls)
--   _ranges_units      the unit instances (output of units_nvtx or units_sync)
--   rg_cpu             per instance the four CPU API components (sweep over rg_cpu_intervals
--                      at rg_cpu_probes)
--   rg_busy            per instance with a device: busy_ns (the union of
--                      rg_busy_intervals inside its window), pending_ns (the length of
--                      its merged pending pieces of own work) and pending_busy_ns (the
--                      union inside those stretches)
--   _ranges_instances  the decomposed instances (output of instances)
-- Parameters: $name (range name, or DOMAIN:NAME), $min_instances, $min_median_ns, $pattern,
-- $scope ('thread' or 'process'), $tail_pct (percent), $limit, $blocking (regular
-- expression of the API names that block the host: ranges.BLOCKING_WAITS).
-- Units: every *_ns column is nanoseconds on the trace timeline; *_frac / share_* are 0..1.
--
-- Outputs:
--   names        closed NVTX range names by instance count (for messages)
--   unit_families  range names that differ only in a counter (token_0_processing, ...):
--                one repeated range, named with '#' for each number (token_#_processing)
--   unit_probes  evenly spaced instances of each repeated range name (the unit choice's probes)
--   unit_probe_calls  per probe, the calls inside it that put work on the GPU
--   candidates   range names repeated at least $min_instances times with the evidence
--                of the unit choice (whether each encloses GPU work, its median, whether
--                it is an operator range, its nesting among qualifying names)
--   units_nvtx   closed ranges named $name: instance, name, domain, style, start_ns,
--                end_ns, duration_ns, pid, tid, global_pid, global_tid, end_tid
--   units_sync   the same columns for intervals between blocking host waits
--   launch_sequence  the GPU work the busiest launching thread submits, in order (the
--                launch-cycle unit's input)
--   blocking_ends  the blocking host waits of a thread: when each began and returned
--   sync_work    the GPU work each sync interval holds (how many operations, which)
--   units_named  the closed ranges of several names (a group unit's input)
--   units_warmup the one-off calls (module loading, handle creation, ...) per instance
--   instances    one row per unit instance with its CPU and GPU decomposition
--   summary      latency percentiles, tail and median-band sizes
--   attribution  per component: mean in the tail and the median band, difference, share of
--                its family's growth, the family's growth and shrinking
--   slowest      the $limit slowest instances
--   totals       NVIDIA's `nsys stats --report nvtx_sum`, per range name and style


-- @query names
-- @needs nvtx_ranges
SELECT name, count(*) AS n
FROM nvtx_ranges
WHERE end_ns IS NOT NULL
GROUP BY name
ORDER BY n DESC, name
LIMIT 5;


-- @query unit_families
-- @needs nvtx_ranges
-- Numbered families of range names: names that differ only in their numbers, such as
-- token_0_processing, token_1_processing, ..., token_63_processing, are one range with a
-- counter in its name. A member occurs at most once in each process and fewer than
-- $min_instances times in all (a name that repeats is a candidate of its own); a family
-- has at least $min_instances members. name (a member), family (the name with each run of
-- digits written '#': token_#_processing). The unit choice (unit_probes, candidates)
-- reads a family as one range name (registered by analyses/ranges.py as unit_families).
-- PyTorch's operator ranges ("aten::mm, seq = 12, op_id = 3", one name per call) are left
-- out: they would make families of operators, which are never units (candidates'
-- operator_like), at the cost of one name per call.
WITH named AS (
    SELECT name, global_pid, count(*) AS k FROM nvtx_ranges
    WHERE end_ns IS NOT NULL AND regexp_matches(name, '[0-9]')
      AND NOT regexp_matches(name, '^aten::|, seq = [0-9]+|op_id = [0-9]+')
    GROUP BY name, global_pid),
members AS (
    SELECT name, regexp_replace(name, '[0-9]+', '#', 'g') AS family FROM named
    GROUP BY name HAVING max(k) = 1 AND sum(k) < $min_instances)
SELECT name, family FROM members
WHERE family IN (SELECT family FROM members GROUP BY family HAVING count(*) >= $min_instances);


-- @query unit_probes
-- @needs nvtx_ranges, unit_families
-- The probes of the unit choice: up to ~64 evenly spaced instances of each range name
-- (a numbered family, unit_families, as one name) repeated at least $min_instances times
-- (every instance of a name repeated less often than 128 times), with an id. A step
-- (registered by analyses/ranges.py as unit_probes): unit_probe_calls and candidates read
-- the same probes.
WITH closed AS (
    SELECT coalesce(f.family, r.name) AS name, r.start_ns, r.end_ns, r.global_pid
    FROM nvtx_ranges r LEFT JOIN unit_families f ON f.name = r.name
    WHERE r.end_ns IS NOT NULL),
counts AS (SELECT name, count(*) AS n FROM closed GROUP BY name HAVING count(*) >= $min_instances),
cand AS (
    SELECT c.name, c.start_ns, c.end_ns, c.global_pid, k.n,
           row_number() OVER (PARTITION BY c.name ORDER BY c.start_ns, c.end_ns) AS i
    FROM closed c JOIN counts k USING (name))
SELECT row_number() OVER (ORDER BY name, i) AS id, name, start_ns, end_ns, global_pid
FROM cand WHERE (i - 1) % greatest(1, n // 64) = 0;


-- @query unit_probe_calls
-- @needs api_calls, unit_probes
-- Per probe (unit_probes), the calls its process made inside it (start_ns in
-- [start_ns, end_ns]) that put work on the GPU: api_calls of category launch,
-- graph_launch, memcpy or memset. id, calls (probes without such calls are left out).
-- The accelerated pass (ranges._probe_calls_accelerated) counts the same calls from one
-- streamed read of api_calls, by a search among each process' sorted probe bounds.
SELECT p.id, count(*) AS calls
FROM unit_probes p JOIN api_calls g
  ON g.global_pid = p.global_pid AND g.start_ns BETWEEN p.start_ns AND p.end_ns
WHERE g.category IN ('launch', 'graph_launch', 'memcpy', 'memset')
GROUP BY p.id;


-- @query candidates
-- @needs nvtx_ranges, unit_families, unit_probe_calls, unit_probes
-- Every range name repeated at least $min_instances times (a numbered family, unit_families,
-- as one name), with the evidence the unit choice (analyses/ranges.py, select_unit) reads.
-- members: the distinct names it stands for (1, or a family's members), first_member and
-- last_member: the first and last of them in time. On its probes (unit_probes, with the
-- calls counted by unit_probe_calls):
--   gpu_share       share of probes inside which the process made a call that puts work on
--                   the GPU (api_calls category launch, graph_launch, memcpy or memset)
--   gpu_calls_mean  such calls per probe (mean)
-- median_ns (its instances' median duration), domain (its most frequent NVTX domain),
-- operator_like: the name or domain is a framework operator or library call rather than a
-- request or iteration (PyTorch's aten:: and emit_nvtx's "seq = .., op_id = .." ranges,
-- the ranges nsys writes for CUDA, cuBLAS, cuDNN, NCCL, MPI, OpenMP, OpenACC, and the
-- domains of RAPIDS libraries: libcudf, cudf_python, rmm, ...).
-- qualifies: repeated, median at least $min_median_ns, GPU work in at least half its
-- probes (when $cuda_traced: an NVTX-only capture shows no GPU work to look for), not
-- operator_like. inside_frac: share of its probes lying inside an instance of
-- another QUALIFYING name (same process; identical intervals: the alphabetically first
-- name counts as the outer one); usual_parent: that name most often (ties: the shorter).
-- How, in O(n log n): the names repeated $min_instances times are those of unit_probes
-- (the same rule), so only their ranges are aggregated. Whether some instance of name X
-- holds a probe is one look-up, not a comparison with every instance: per qualifying
-- name and process, its instances' starts in order with the latest end reached by any
-- instance starting at or before each (reach_ns) and strictly before it
-- (reach_before_ns); the probe lies inside an instance of X when, at the last start at or
-- before the probe's (an ASOF join), that reach is at or past the probe's end, with an
-- instance starting where the probe starts counted only when it ends later (or ends
-- with it and X sorts first). Each probe is looked up once per qualifying name of its
-- process.
WITH closed AS (
    SELECT coalesce(f.family, r.name) AS name, r.name AS member, r.domain, r.start_ns,
           r.end_ns, r.duration_ns, r.global_pid
    FROM nvtx_ranges r LEFT JOIN unit_families f ON f.name = r.name
    WHERE r.end_ns IS NOT NULL),
repeated AS (
    SELECT * FROM closed WHERE name IN (SELECT DISTINCT name FROM unit_probes)),
domains AS (
    SELECT name, first(domain ORDER BY m DESC, domain) AS domain
    FROM (SELECT name, domain, count(*) AS m FROM repeated GROUP BY name, domain)
    GROUP BY name),
counts AS (
    SELECT name, count(*) AS n, sum(duration_ns) AS total_ns,
           quantile_cont(duration_ns, 0.5) AS median_ns, any_value(d.domain) AS domain,
           count(DISTINCT member) AS members,
           arg_min(member, start_ns) AS first_member, arg_max(member, start_ns) AS last_member
    FROM repeated JOIN domains d USING (name)
    GROUP BY name HAVING count(*) >= $min_instances),
probe AS (SELECT * FROM unit_probes),
gpu AS (
    SELECT p.name, avg((g.calls IS NOT NULL)::INT) AS gpu_share,
           avg(coalesce(g.calls, 0)) AS gpu_calls_mean, count(*) AS m
    FROM probe p LEFT JOIN unit_probe_calls g USING (id) GROUP BY p.name),
judged AS (
    SELECT k.*, g.gpu_share, g.gpu_calls_mean, g.m,
           regexp_matches(k.name, '^aten::|, seq = ([0-9]+|#)|op_id = ([0-9]+|#)|^(cu|cuda|cublas|cublasLt|cudnn|cufft|cusparse|cusolver|curand|nccl|nvshmem|nvrtc)[A-Z_]|^MPI_|^ncclKernel')
           OR regexp_matches(lower(coalesce(k.domain, '')), '^(cuda|cublas|cublaslt|cudnn|cufft|cusparse|cusolver|curand|nccl|nvshmem|mpi|openmp|openacc|oshmem|ucx|ucxx|cupti|nvtx|cutlass|tensorrt|trt|libcudf|cudf|cudf_python|dask_cudf|rmm|cuml|cugraph|cupy|thrust|cub|nvcomp)$')
               AS operator_like
    FROM counts k JOIN gpu g USING (name)),
qual AS (
    SELECT *, median_ns >= $min_median_ns AND (gpu_share >= 0.5 OR NOT $cuda_traced)
              AND NOT operator_like AS qualifies
    FROM judged),
outer_starts AS (
    SELECT name, global_pid, start_ns, max(end_ns) AS end_ns
    FROM repeated
    WHERE name IN (SELECT name FROM qual WHERE qualifies)
      AND global_pid IS NOT NULL AND start_ns IS NOT NULL
    GROUP BY name, global_pid, start_ns),
reach AS (
    SELECT name, global_pid, start_ns, end_ns,
           max(end_ns) OVER (w ROWS UNBOUNDED PRECEDING) AS reach_ns,
           max(end_ns) OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
               AS reach_before_ns
    FROM outer_starts
    WINDOW w AS (PARTITION BY name, global_pid ORDER BY start_ns)),
pairs AS (
    SELECT p.id, p.name, p.start_ns, p.end_ns, p.global_pid, o.name AS outer_name
    FROM probe p JOIN (SELECT DISTINCT name, global_pid FROM outer_starts) o
      ON o.global_pid = p.global_pid AND o.name <> p.name),
inside AS (
    SELECT x.id, x.name, x.outer_name
    FROM pairs x ASOF JOIN reach r
      ON r.name = x.outer_name AND r.global_pid = x.global_pid AND x.start_ns >= r.start_ns
    WHERE CASE WHEN r.start_ns < x.start_ns THEN r.reach_ns >= x.end_ns
               ELSE coalesce(r.reach_before_ns >= x.end_ns, false) OR r.end_ns > x.end_ns
                    OR (r.end_ns = x.end_ns AND r.name < x.name) END),
frac AS (
    SELECT i.name, i.outer_name, count(*) / any_value(q.m) AS f,
           any_value(o.total_ns / o.n) AS outer_mean_ns
    FROM inside i JOIN qual q USING (name) JOIN counts o ON o.name = i.outer_name
    GROUP BY i.name, i.outer_name)
SELECT q.name, q.n, q.total_ns::DOUBLE AS total_ns, q.median_ns::DOUBLE AS median_ns, q.domain,
       q.members, q.first_member, q.last_member,
       q.gpu_share::DOUBLE AS gpu_share, q.gpu_calls_mean::DOUBLE AS gpu_calls_mean,
       q.operator_like, q.qualifies, coalesce(max(f.f), 0.0)::DOUBLE AS inside_frac,
       first(f.outer_name ORDER BY f.f DESC, f.outer_mean_ns, f.outer_name) AS usual_parent
FROM qual q LEFT JOIN frac f USING (name)
GROUP BY ALL
ORDER BY qualifies DESC, inside_frac >= 0.5, total_ns DESC, n DESC, name;


-- @query units_nvtx
-- @needs nvtx_ranges
-- The closed ranges named $name (or DOMAIN:NAME); a name holding '#' also takes the ranges
-- whose names read the same with each run of digits written '#' (a numbered family,
-- unit_families).
SELECT row_number() OVER (ORDER BY start_ns, global_tid, end_ns) AS instance,
       name, domain, style, start_ns, end_ns, duration_ns, pid, tid, global_pid, global_tid,
       end_tid
FROM nvtx_ranges
WHERE end_ns IS NOT NULL
  AND (name = $name OR domain || ':' || name = $name
       OR (contains($name, '#') AND regexp_replace(name, '[0-9]+', '#', 'g') = $name))
ORDER BY instance;


-- @query units_sync
-- @needs api_calls
-- Blocking host waits: the API calls whose name matches $blocking and holds no 'Async'
-- (ranges.BLOCKING_WAITS:
-- *Synchronize calls of devices, contexts, streams and events, synchronous copies
-- cudaMemcpy*/cuMemcpy* without Async, FromSymbol/ToSymbol included, and synchronous
-- memsets; a call nested in another such call is the same wait) on the thread that made
-- the most of them. Instance k runs from the end of wait k-1 to the end of wait k.
WITH calls AS (
    SELECT *, max(end_ns) OVER (PARTITION BY global_tid ORDER BY start_ns, end_ns DESC
                                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS covered
    FROM api_calls
    WHERE regexp_matches(name, $blocking) AND NOT contains(name, 'Async')),
outer_calls AS (SELECT * FROM calls WHERE covered IS NULL OR start_ns >= covered),
busiest AS (
    SELECT global_tid FROM outer_calls GROUP BY global_tid
    ORDER BY count(*) DESC, global_tid LIMIT 1),
intervals AS (
    SELECT lag(end_ns) OVER (ORDER BY end_ns) AS start_ns, end_ns,
           pid, tid, global_pid, global_tid
    FROM outer_calls WHERE global_tid = (SELECT global_tid FROM busiest))
SELECT row_number() OVER (ORDER BY start_ns) AS instance, 'sync-interval' AS name,
       '' AS domain, 'sync_interval' AS style, start_ns, end_ns, end_ns - start_ns AS duration_ns,
       pid, tid, global_pid, global_tid, NULL::BIGINT AS end_tid
FROM intervals
WHERE start_ns IS NOT NULL
ORDER BY instance;


-- @query launch_sequence
-- @needs api_calls, kernels, memcpys, memsets
-- The GPU work one thread submits, in order: the calls that put work on the GPU (api_calls
-- category launch, graph_launch, memcpy, memset; a runtime call and the driver call with
-- its id count as one) of the thread that made the most of them. label: the kernel's
-- short name (the first kernel of a graph launch), else the call's name (a copy, a memset,
-- a launch whose kernel was not recorded); gpu_end_ns: when its work ended on the GPU
-- (NULL: not recorded). The input of the launch-cycle unit (compute/cycles.py).
WITH calls AS (
    SELECT global_tid, global_pid, correlation_id, min(start_ns) AS start_ns,
           max(end_ns) AS end_ns, arg_min(name, start_ns) AS api, any_value(pid) AS pid,
           any_value(tid) AS tid
    FROM api_calls
    WHERE category IN ('launch', 'graph_launch', 'memcpy', 'memset')
    GROUP BY global_tid, global_pid, correlation_id),
busiest AS (
    SELECT global_tid FROM calls GROUP BY global_tid ORDER BY count(*) DESC, global_tid LIMIT 1),
mine AS (SELECT * FROM calls WHERE global_tid = (SELECT global_tid FROM busiest)),
work AS (
    SELECT global_pid, correlation_id, arg_min(short_name, start_ns) AS label,
           max(end_ns) AS gpu_end_ns
    FROM kernels WHERE start_ns > 0 GROUP BY global_pid, correlation_id
    UNION ALL
    SELECT global_pid, correlation_id, NULL, max(end_ns)
    FROM (SELECT global_pid, correlation_id, end_ns FROM memcpys WHERE start_ns > 0
          UNION ALL
          SELECT global_pid, correlation_id, end_ns FROM memsets WHERE start_ns > 0)
    GROUP BY global_pid, correlation_id),
done AS (
    SELECT global_pid, correlation_id, max(label) AS label, max(gpu_end_ns) AS gpu_end_ns
    FROM work SEMI JOIN mine USING (global_pid, correlation_id)
    GROUP BY global_pid, correlation_id)
SELECT m.start_ns, m.end_ns, coalesce(d.label, m.api)::VARCHAR AS label, d.gpu_end_ns,
       m.pid, m.tid, m.global_pid, m.global_tid
FROM mine m LEFT JOIN done d USING (global_pid, correlation_id)
ORDER BY m.start_ns, m.end_ns;


-- @query blocking_ends
-- @needs api_calls
-- The blocking host waits of thread $tid (the waits of units_sync: $blocking, no 'Async', a
-- call nested in another such call is the same wait), in order: when each began and
-- returned (start_ns, end_ns) and its API name.
WITH calls AS (
    SELECT *, max(end_ns) OVER (PARTITION BY global_tid ORDER BY start_ns, end_ns DESC
                                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS covered
    FROM api_calls
    WHERE global_tid = $tid AND regexp_matches(name, $blocking) AND NOT contains(name, 'Async'))
SELECT start_ns, end_ns, name FROM calls WHERE covered IS NULL OR start_ns >= covered
ORDER BY end_ns, start_ns;


-- @query sync_work
-- @needs api_calls, kernels, memcpys, memsets, _ranges_units
-- The GPU work each sync interval (_ranges_units, of units_sync) holds: the calls of its
-- thread that put work on the GPU (api_calls category launch, graph_launch, memcpy,
-- memset; a runtime call and the driver call with its id count once) that begin inside it,
-- each labelled by what it does: the kernel's short name (the first kernel of a graph
-- launch), a copy's kind, 'memset', else the call's name. instance, ops (how many), work
-- (its distinct labels, sorted, '|'-separated: intervals that run the same kinds of work
-- read the same, however many times each and whatever the sizes).
WITH calls AS (
    SELECT global_tid, global_pid, correlation_id, min(start_ns) AS start_ns,
           arg_min(name, start_ns) AS api
    FROM api_calls
    WHERE category IN ('launch', 'graph_launch', 'memcpy', 'memset')
      AND global_tid IN (SELECT DISTINCT global_tid FROM _ranges_units)
    GROUP BY global_tid, global_pid, correlation_id),
labelled AS (
    SELECT global_pid, correlation_id, arg_min(short_name, start_ns)::VARCHAR AS label
    FROM kernels SEMI JOIN calls USING (global_pid, correlation_id)
    GROUP BY global_pid, correlation_id
    UNION ALL
    SELECT global_pid, correlation_id, min(copy_kind)::VARCHAR
    FROM memcpys SEMI JOIN calls USING (global_pid, correlation_id)
    GROUP BY global_pid, correlation_id
    UNION ALL
    SELECT global_pid, correlation_id, 'memset'
    FROM memsets SEMI JOIN calls USING (global_pid, correlation_id)
    GROUP BY global_pid, correlation_id),
work AS (
    SELECT c.global_tid, c.start_ns, coalesce(max(l.label), any_value(c.api)) AS label
    FROM calls c LEFT JOIN labelled l USING (global_pid, correlation_id)
    GROUP BY c.global_tid, c.global_pid, c.correlation_id, c.start_ns),
placed AS (
    SELECT u.instance, w.start_ns, w.label
    FROM work w ASOF JOIN _ranges_units u
      ON w.global_tid = u.global_tid AND w.start_ns >= u.start_ns
    WHERE w.start_ns <= u.end_ns)
SELECT u.instance, count(p.label) AS ops,
       coalesce(string_agg(DISTINCT p.label, '|' ORDER BY p.label), '') AS work
FROM _ranges_units u LEFT JOIN placed p USING (instance)
GROUP BY u.instance ORDER BY u.instance;


-- @query units_named
-- @needs nvtx_ranges
-- The closed ranges of several names ($names, a list) in process $pid, in start order: the
-- instances of sibling ranges that a group unit is made of.
SELECT name, domain, style, start_ns, end_ns, pid, tid, global_pid, global_tid, end_tid
FROM nvtx_ranges
WHERE end_ns IS NOT NULL AND global_pid = $pid AND list_contains($names, name)
ORDER BY start_ns, end_ns DESC;


-- @query units_warmup
-- @needs api_calls, nvtx_ranges, _ranges_units
-- The one-off calls each unit instance holds: calls of the process that start inside the
-- instance (CUDA API calls, and NVTX ranges, where nsys writes cuBLAS / cuDNN calls) whose
-- name matches $pattern (module loading, context or handle creation, JIT compilation,
-- allocation: Settings.warmup_calls). instance, name (distinct names per instance).
WITH u AS (SELECT instance, start_ns, end_ns, global_pid FROM _ranges_units
           WHERE start_ns IS NOT NULL),
-- the expression is matched once per distinct API name, not once per call
api_names AS (
    SELECT name FROM (SELECT name, count(*) AS n FROM api_calls GROUP BY name)
    WHERE regexp_matches(name, $pattern)),
oneoff AS (
    SELECT global_pid, start_ns, name FROM api_calls SEMI JOIN api_names USING (name)
    UNION ALL
    SELECT global_pid, start_ns, name FROM nvtx_ranges WHERE regexp_matches(name, $pattern))
SELECT DISTINCT u.instance, o.name
FROM u JOIN oneoff o
  ON (u.global_pid, u.start_ns) <= (o.global_pid, o.start_ns)
 AND (o.global_pid, o.start_ns) <= (u.global_pid, u.end_ns)
ORDER BY u.instance, o.name;


-- @query rg_units
-- @needs _ranges_units
-- The rg_* queries are steps of `instances` (materialized one by one, so that each heavy
-- join or window gets the whole memory budget).
-- rg_units: the instances with the key their CUDA calls are matched on, and the scope.
SELECT *, CASE WHEN $scope = 'thread' THEN global_tid ELSE global_pid END AS key,
       $scope AS scope
FROM _ranges_units

-- @query rg_calls
-- @needs api_calls
-- @keep view
-- Every CUDA call with the key it counts for (the scope: the variable rg_scope, set by
-- analyses/ranges.py, since a view takes no parameters) and the CPU component it counts
-- into, cls: 0 launch, 1 memcpy, 2 sync, 3 other (the order of CPU_COMPONENTS). A view,
-- not a step: reading it twice costs less than writing every call out. No join:
-- the sweep reads the calls as api_calls stores them, in the export's order, which a
-- join would not keep; calls of keys without instances count nowhere (the sweep skips
-- them, _own places no work of theirs).
SELECT CASE WHEN getvariable('rg_scope') = 'thread' THEN global_tid ELSE global_pid END AS key,
       CASE WHEN category IN ('launch', 'graph_launch') THEN 0
            WHEN category IN ('memcpy', 'memset') THEN 1
            WHEN category = 'sync' THEN 2 ELSE 3 END AS cls,
       start_ns, end_ns, global_pid, correlation_id
FROM api_calls

-- @query rg_cpu_intervals
-- @needs rg_calls
-- The key's calls for the CPU components; the sweep in compute/sweep.py cuts them into
-- disjoint pieces (a call keeps the part not covered by a call that began earlier) and sums
-- each class up to every instance boundary.
SELECT key, start_ns, end_ns, cls FROM rg_calls

-- @query rg_cpu_probes
-- @needs rg_units
-- Each instance's boundaries: covered time at its end minus at its start.
SELECT key, unnest([start_ns, end_ns]) AS ts, instance AS grp, unnest([-1, 1]) AS sign
FROM rg_units

-- @query rg_ops
-- @needs cuda_graphs, kernels, memcpys, memsets
-- @keep view
-- (a view) Every GPU operation with its launch key; kernel: a kernel or a graph-level
-- execution (else a copy or memset; a boolean, cheaper per row than a string);
-- kernel_row: a row of kernels, which carries its launch call.
SELECT true AS kernel, device_id, global_pid, correlation_id, start_ns, end_ns,
       true AS kernel_row
FROM kernels WHERE start_ns > 0
UNION ALL
SELECT false, device_id, global_pid, correlation_id, start_ns, end_ns, false
FROM memcpys WHERE start_ns > 0
UNION ALL
SELECT false, device_id, global_pid, correlation_id, start_ns, end_ns, false
FROM memsets WHERE start_ns > 0
UNION ALL
SELECT true, device_id, global_pid, correlation_id, gpu_start_ns, gpu_end_ns, false
FROM cuda_graphs WHERE trace_level = 'graph' AND gpu_start_ns > 0

-- @query rg_launched_other
-- @needs rg_calls, rg_ops
-- Step: the GPU operations other than kernels (copies, memsets, graph-level executions)
-- with the key's call that launched them, from rg_calls; a few, next to the kernels. As
-- for a kernel, several calls with the operation's id (a runtime call and the driver call
-- inside it) count as one, from the first entry to the last return, on the key of the
-- call that entered first: each operation is one row.
WITH other AS (SELECT * FROM rg_ops WHERE NOT kernel_row),
calls AS (
    SELECT a.global_pid, a.correlation_id, arg_min(a.key, a.start_ns) AS key,
           min(a.start_ns) AS api_start_ns, max(a.end_ns) AS api_end_ns
    FROM rg_calls a
    -- on the correlation id alone (as overlap's copy_apis): groups of other processes
    -- are left out by the join below
    SEMI JOIN other o ON a.correlation_id = o.correlation_id
    GROUP BY a.global_pid, a.correlation_id)
SELECT c.key, c.api_start_ns, c.api_end_ns, o.kernel, o.device_id, o.start_ns, o.end_ns
FROM other o
JOIN calls c ON c.global_pid = o.global_pid AND c.correlation_id = o.correlation_id

-- @query rg_launched
-- @needs kernels, rg_launched_other, rg_units
-- @keep view
-- Every GPU operation with the key's call that launched it: a kernel's is the launch call
-- the kernels view carries (several calls with its id, runtime and driver, count as one
-- from the first entry to the last return); the others come from rg_launched_other.
-- A view (no join: the kernels are read as they are), not written out.
-- Each instance's own work, the step rg_own (instance, kernel, device_id, start_ns, end_ns,
-- api_end_ns), is placed from these (query rg_own): the call goes to the instance of its
-- key with the latest start_ns <= the call's start_ns (ties: the higher instance number),
-- when that instance also contains the call's end; an operation of no instance has a NULL
-- one (or is left out), which the joins and groups on instance below leave aside.
SELECT *
FROM (SELECT CASE WHEN getvariable('rg_scope') = 'thread' THEN launch_global_tid
                  ELSE global_pid END AS key,
             launch_start_ns AS api_start_ns, launch_end_ns AS api_end_ns, true AS kernel,
             device_id, start_ns, end_ns
      FROM kernels WHERE start_ns > 0 AND launch_end_ns IS NOT NULL)
WHERE key IN (SELECT DISTINCT key FROM rg_units)
UNION ALL
SELECT * FROM rg_launched_other

-- @query rg_busy_intervals
-- @needs rg_ops
-- @keep view
-- Every GPU operation as an interval of its device: intervals.Coverage gives the device's
-- busy time (the union of its operations) before any instant.
SELECT device_id AS key, start_ns, end_ns FROM rg_ops

-- @query rg_own_sums
-- @needs rg_own
-- Step: the own work's counts, time sums and span per instance, device and kind, for
-- rg_udev and instances (one pass over rg_own for both, instead of one each).
SELECT instance, device_id, kernel, count(*) AS n, sum(end_ns - start_ns) AS t,
       min(start_ns) AS first_ns, max(end_ns) AS last_ns
FROM rg_own
WHERE instance IS NOT NULL
GROUP BY ALL

-- @query rg_udev
-- @needs rg_ops, rg_own_sums, rg_units
-- The device each instance's GPU side is measured on: the one that ran most of its own
-- GPU time, else its process's busiest device.
WITH u AS (SELECT * FROM rg_units),
ops AS (SELECT * FROM rg_ops),
own_device AS (
    SELECT instance, first(device_id ORDER BY t DESC, device_id) AS device_id
    FROM (SELECT instance, device_id, sum(t) AS t FROM rg_own_sums GROUP BY ALL)
    GROUP BY instance),
process_device AS (
    SELECT global_pid, first(device_id ORDER BY t DESC, device_id) AS device_id
    FROM (SELECT global_pid, device_id, sum(end_ns - start_ns) AS t FROM ops GROUP BY ALL)
    GROUP BY global_pid),
udev AS (
    SELECT u.instance, u.start_ns, u.end_ns, coalesce(d.device_id, p.device_id) AS device_id
    FROM u LEFT JOIN own_device d USING (instance) LEFT JOIN process_device p USING (global_pid))
SELECT * FROM udev

-- Own work (analyses/ranges.py, _gpu_side; not a query): per instance, its own work on
-- its device (rg_udev), as two pieces clipped to its window: [ws, we) from the work's
-- start, [ps, pe) from its launch call's return (the part in which it was submitted and
-- unfinished), i.e. ws = greatest(start_ns, window start), we = least(end_ns, window end),
-- ps = greatest(api_end_ns, window start), pe = we, each leaving a NULL bound out; a piece
-- that does not lie inside the window counts nowhere. Per instance the unions of the
-- first pieces, of the kernels and of all (rg_own_union: instance, kernel_union_ns,
-- any_union_ns), and the second merged into stretches, measured into rg_busy (pending_ns,
-- pending_busy_ns). A counting sort puts rg_own in instance order and a compiled loop
-- (compute/compiled.py: own_pieces, own_work) does the rest, instead of a join to
-- rg_udev sorted by instance or window functions partitioned by instance in SQL.

-- The method of the instances' CPU and GPU sides: the queries rg_cpu_pieces ...
-- rg_own_union below. The accelerated pass (ranges.accelerated: compute/sweep.py for the
-- CPU side over rg_cpu_intervals and rg_cpu_probes, a search among the sorted instances
-- for the placement over rg_launched, intervals.Coverage and the compiled loops
-- own_pieces and own_work of compute/compiled.py for the GPU side) makes the same steps
-- rg_own, rg_cpu, rg_busy and rg_own_union; nsysdiag/engine/accelerate.py chooses between
-- the two by input size.

-- @query rg_cpu_pieces
-- @needs rg_calls
-- (a step) The key's calls cut into disjoint pieces: taken by start (ties: the longer
-- first, then the lower class), each call keeps the part beyond the furthest end of the
-- calls before it, [piece_start, piece_end), credited to its class; cum0_ns .. cum3_ns:
-- the running totals of each class's pieces up to this one (included).
WITH pieces AS (
    SELECT key, cls, greatest(start_ns, coalesce(reach_ns, start_ns)) AS piece_start,
           end_ns AS piece_end
    FROM (SELECT key, cls, start_ns, end_ns,
                 max(end_ns) OVER (PARTITION BY key ORDER BY start_ns, end_ns DESC, cls
                                   ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
                     AS reach_ns
          FROM rg_calls
          WHERE key IS NOT NULL AND start_ns IS NOT NULL AND end_ns >= start_ns)
    WHERE end_ns > greatest(start_ns, coalesce(reach_ns, start_ns)))
SELECT key, cls, piece_start, piece_end,
       sum(piece_end - piece_start) FILTER (WHERE cls = 0) OVER w AS cum0_ns,
       sum(piece_end - piece_start) FILTER (WHERE cls = 1) OVER w AS cum1_ns,
       sum(piece_end - piece_start) FILTER (WHERE cls = 2) OVER w AS cum2_ns,
       sum(piece_end - piece_start) FILTER (WHERE cls = 3) OVER w AS cum3_ns
FROM pieces
WINDOW w AS (PARTITION BY key ORDER BY piece_start ROWS UNBOUNDED PRECEDING)

-- @query rg_cpu
-- @needs rg_cpu_pieces, rg_units
-- (a step) Per instance, the time of each class inside its window: covered(end) -
-- covered(start), where covered(t), the length of a class's pieces before instant t, is
-- the running total at the last piece that starts at or before t (an ASOF join) less the
-- part of that piece after t.
WITH probes AS (
    SELECT u.instance, u.start_ns AS t, -1 AS sign,
           coalesce(p.cum0_ns, 0) AS c0, coalesce(p.cum1_ns, 0) AS c1,
           coalesce(p.cum2_ns, 0) AS c2, coalesce(p.cum3_ns, 0) AS c3, p.cls,
           p.piece_end - least(u.start_ns, p.piece_end) AS after_ns
    FROM rg_units u ASOF LEFT JOIN rg_cpu_pieces p
      ON p.key = u.key AND p.piece_start <= u.start_ns
    UNION ALL
    SELECT u.instance, u.end_ns, 1,
           coalesce(p.cum0_ns, 0), coalesce(p.cum1_ns, 0), coalesce(p.cum2_ns, 0),
           coalesce(p.cum3_ns, 0), p.cls, p.piece_end - least(u.end_ns, p.piece_end)
    FROM rg_units u ASOF LEFT JOIN rg_cpu_pieces p
      ON p.key = u.key AND p.piece_start <= u.end_ns)
SELECT instance,
       sum(sign * (c0 - CASE WHEN cls = 0 THEN after_ns ELSE 0 END))::BIGINT AS cpu_launch_ns,
       sum(sign * (c1 - CASE WHEN cls = 1 THEN after_ns ELSE 0 END))::BIGINT AS cpu_memcpy_ns,
       sum(sign * (c2 - CASE WHEN cls = 2 THEN after_ns ELSE 0 END))::BIGINT AS cpu_sync_ns,
       sum(sign * (c3 - CASE WHEN cls = 3 THEN after_ns ELSE 0 END))::BIGINT AS cpu_other_api_ns
FROM probes
GROUP BY instance

-- @query rg_own
-- @needs rg_launched, rg_units
-- (a step) Each launched operation placed in the instance of its key with the latest
-- start_ns <= its call's start (ties: the higher instance number), when that instance
-- also contains the call's end: an ASOF join.
WITH units AS (
    SELECT key, start_ns, max(instance) AS instance, arg_max(end_ns, instance) AS end_ns
    FROM rg_units
    WHERE key IS NOT NULL AND start_ns IS NOT NULL
    GROUP BY key, start_ns)
SELECT u.instance, l.kernel, l.device_id, l.start_ns, l.end_ns, l.api_end_ns
FROM (SELECT * FROM rg_launched WHERE api_start_ns IS NOT NULL) l
ASOF JOIN units u ON u.key = l.key AND u.start_ns <= l.api_start_ns
WHERE l.api_end_ns <= u.end_ns

-- @query rg_busy_pieces
-- @needs rg_busy_intervals
-- (a step) Each device's busy time (the union of rg_busy_intervals) as disjoint pieces,
-- cut as the CPU side's, with cum_ns, the running total of their lengths (included).
WITH pieces AS (
    SELECT key AS device_id, greatest(start_ns, coalesce(reach_ns, start_ns)) AS piece_start,
           end_ns AS piece_end
    FROM (SELECT key, start_ns, end_ns,
                 max(end_ns) OVER (PARTITION BY key ORDER BY start_ns, end_ns DESC
                                   ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
                     AS reach_ns
          FROM rg_busy_intervals
          WHERE key IS NOT NULL AND start_ns IS NOT NULL AND end_ns >= start_ns)
    WHERE end_ns > greatest(start_ns, coalesce(reach_ns, start_ns)))
SELECT device_id, piece_start, piece_end,
       sum(piece_end - piece_start) OVER (PARTITION BY device_id ORDER BY piece_start
                                          ROWS UNBOUNDED PRECEDING) AS cum_ns
FROM pieces

-- @query rg_own_pieces
-- @needs rg_own, rg_udev
-- (a step) Per instance, its own work on its device as two pieces clipped to its window
-- (ranges.sql, Own work): ws (from the work's start), ps (from its launch call's return)
-- and e; with the parts of the pending pieces [ps, e) beyond the furthest end of those
-- before them by ps, [pending_start, e): the merged pending stretches, cut into disjoint
-- pieces.
WITH own AS (
    SELECT o.instance, o.kernel, greatest(o.start_ns, u.start_ns) AS ws,
           greatest(o.api_end_ns, u.start_ns) AS ps, least(o.end_ns, u.end_ns) AS e
    FROM rg_own o
    JOIN rg_udev u ON u.instance = o.instance AND u.device_id = o.device_id
    WHERE o.instance IS NOT NULL)
SELECT instance, kernel, ws, ps, e,
       CASE WHEN e > ps THEN
           greatest(ps, coalesce(max(e) FILTER (WHERE e > ps) OVER (
               PARTITION BY instance ORDER BY ps, e DESC
               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), ps)) END AS pending_start
FROM own

-- @query rg_own_union
-- @needs rg_own_pieces
-- (a step) Per instance with own work on its device: the unions of the pieces [ws, e) of
-- its kernels and of all of it (running maximum cut; pieces that end where they start
-- count nowhere).
SELECT instance,
       coalesce(sum(greatest(0, e - greatest(ws, coalesce(kernel_reach, ws))))
                FILTER (WHERE kernel AND e > ws), 0)::BIGINT AS kernel_union_ns,
       coalesce(sum(greatest(0, e - greatest(ws, coalesce(any_reach, ws))))
                FILTER (WHERE e > ws), 0)::BIGINT AS any_union_ns
FROM (SELECT instance, kernel, ws, e,
             max(e) FILTER (WHERE e > ws) OVER (
                 PARTITION BY instance ORDER BY ws, e DESC
                 ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS any_reach,
             max(e) FILTER (WHERE e > ws) OVER (
                 PARTITION BY instance, kernel ORDER BY ws, e DESC
                 ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS kernel_reach
      FROM rg_own_pieces)
GROUP BY instance

-- @query rg_busy
-- @needs rg_busy_pieces, rg_own_pieces, rg_udev
-- (a step) Per instance with a device: busy_ns, the device's busy time inside its window;
-- pending_ns, the length of its pending stretches; pending_busy_ns, the busy time inside
-- them. The busy time inside [a, b) is covered(b) - covered(a), covered(t) as on the CPU
-- side: the running total at the device's last busy piece that starts at or before t
-- (an ASOF join) less the part of that piece after t.
WITH u AS (SELECT instance, device_id, start_ns, end_ns FROM rg_udev
           WHERE device_id IS NOT NULL),
stretches AS (  -- the instances' windows and their pending pieces, each an interval [a, b)
    SELECT instance, device_id, start_ns AS a, end_ns AS b, false AS pending FROM u
    UNION ALL
    SELECT p.instance, u.device_id, p.pending_start, p.e, true
    FROM rg_own_pieces p JOIN u USING (instance)
    WHERE p.e > p.pending_start),
ends AS (
    SELECT instance, device_id, pending, -1 AS sign, a AS t, a, b FROM stretches
    UNION ALL
    SELECT instance, device_id, pending, 1, b, a, b FROM stretches),
covered AS (
    SELECT e.instance, e.pending, e.sign, e.a, e.b,
           coalesce(c.cum_ns - (c.piece_end - least(e.t, c.piece_end)), 0) AS covered_ns
    FROM ends e
    ASOF LEFT JOIN rg_busy_pieces c ON c.device_id = e.device_id AND c.piece_start <= e.t)
SELECT u.instance,
       coalesce(sum(sign * covered_ns) FILTER (WHERE NOT pending), 0)::BIGINT AS busy_ns,
       coalesce(sum(b - a) FILTER (WHERE pending AND sign = 1), 0)::BIGINT AS pending_ns,
       coalesce(sum(sign * covered_ns) FILTER (WHERE pending), 0)::BIGINT AS pending_busy_ns
FROM u LEFT JOIN covered USING (instance)
GROUP BY u.instance
ORDER BY u.instance

-- @query instances
-- @needs api_calls, rg_busy, rg_cpu, rg_own_sums, rg_own_union, rg_udev, rg_units
-- key: the thread (scope 'thread') or the process (scope 'process') whose API calls count.
--
-- CPU side. The key's API calls are cut into disjoint pieces: each call keeps the part not
-- already covered by a call that began earlier (so a driver call nested in a runtime call
-- counts once, for the outer call). Per component the pieces get running totals; the time
-- a component spent before instant t is found with one ASOF join, and the time inside an
-- instance is its value at the end minus its value at the start. Exact for any nesting.
--   cpu_launch_ns      inside kernel / graph launch calls (category launch, graph_launch)
--   cpu_memcpy_ns      inside memcpy and memset calls
--   cpu_sync_ns        inside synchronization calls (category sync)
--   cpu_other_api_ns   inside every other CUDA call
--   cpu_outside_cuda_ns  duration_ns minus the four above: CPU work, queueing, waiting
--                      on anything but CUDA
--
-- GPU side. Own work = kernels, copies, memsets (and graph-level graph launches) whose
-- launching API call lies inside the instance on its key (NVIDIA's projection rule, joined
-- on global_pid + correlation_id); when instances overlap on one key the call goes to the
-- most recently started one, if that one contains it. The instance's GPU is the device that
-- ran most of its own GPU time (else its process's busiest device). Over the window
-- [start_ns, end_ns] on that GPU:
--   gpu_own_kernel_ns  own kernels run (union)
--   gpu_own_copy_ns    own copies/memsets run and no own kernel does
--   gpu_other_ns       only other work runs (other streams, threads, processes, instances)
--   gpu_pending_idle_ns  nothing runs although own work has been submitted (its launch
--                      call returned) and is unfinished: the GPU delays it, e.g. for work
--                      this trace does not show (another process) or scheduling
--   gpu_idle_ns        nothing runs and no own work is pending: the GPU waits for the host
-- The five add up to duration_ns. Unions of intervals are taken with the same running-max
-- cut as on the CPU side; time covered by the device's busy pieces inside any interval
-- comes from their running totals through ASOF joins.
-- cuda_covered: the instance overlaps the span between its process's first and last traced
-- CUDA call (false when tracing stopped early or started late, which would make it look
-- all "outside CUDA"; NULL when the process made no CUDA call).
-- Whole own work, also outside the window: n_kernels
-- n_copies, own_kernel_total_ns, own_copy_total_ns (sums of durations), gpu_start_ns and
-- gpu_end_ns (NVIDIA's projected range), gpu_overhang_ns (own work after end_ns).
WITH u AS (SELECT * FROM rg_units),
cpu AS (SELECT * FROM rg_cpu),
udev AS (SELECT * FROM rg_udev),
busy AS (SELECT * FROM rg_busy),
own_total AS (
    SELECT instance,
           coalesce(sum(n) FILTER (WHERE kernel), 0)::BIGINT AS n_kernels,
           coalesce(sum(n) FILTER (WHERE NOT kernel), 0)::BIGINT AS n_copies,
           coalesce(sum(t) FILTER (WHERE kernel), 0) AS own_kernel_total_ns,
           coalesce(sum(t) FILTER (WHERE NOT kernel), 0) AS own_copy_total_ns,
           min(first_ns) AS gpu_start_ns, max(last_ns) AS gpu_end_ns
    FROM rg_own_sums GROUP BY instance),
own_union AS (SELECT * FROM rg_own_union),
traced_span AS (
    SELECT global_pid, min(start_ns) AS lo, max(end_ns) AS hi FROM api_calls GROUP BY global_pid)
SELECT u.instance, u.name, u.start_ns, u.end_ns, u.duration_ns, u.pid, u.tid,
       u.start_ns < s.hi AND u.end_ns > s.lo AS cuda_covered,
       c.cpu_launch_ns::BIGINT AS cpu_launch_ns, c.cpu_memcpy_ns::BIGINT AS cpu_memcpy_ns,
       c.cpu_sync_ns::BIGINT AS cpu_sync_ns, c.cpu_other_api_ns::BIGINT AS cpu_other_api_ns,
       (u.duration_ns - c.cpu_launch_ns - c.cpu_memcpy_ns - c.cpu_sync_ns - c.cpu_other_api_ns)
           ::BIGINT AS cpu_outside_cuda_ns,
       d.device_id,
       CASE WHEN d.device_id IS NOT NULL
            THEN coalesce(w.kernel_union_ns, 0) END::BIGINT AS gpu_own_kernel_ns,
       CASE WHEN d.device_id IS NOT NULL
            THEN coalesce(w.any_union_ns, 0) - coalesce(w.kernel_union_ns, 0) END::BIGINT
           AS gpu_own_copy_ns,
       (b.busy_ns - coalesce(w.any_union_ns, 0))::BIGINT AS gpu_other_ns,
       (b.pending_ns - b.pending_busy_ns)::BIGINT AS gpu_pending_idle_ns,
       (u.duration_ns - b.busy_ns - b.pending_ns + b.pending_busy_ns)::BIGINT
           AS gpu_idle_ns,
       coalesce(t.n_kernels, 0) AS n_kernels, coalesce(t.n_copies, 0) AS n_copies,
       coalesce(t.own_kernel_total_ns, 0)::BIGINT AS own_kernel_total_ns,
       coalesce(t.own_copy_total_ns, 0)::BIGINT AS own_copy_total_ns,
       t.gpu_start_ns, t.gpu_end_ns, greatest(0, t.gpu_end_ns - u.end_ns) AS gpu_overhang_ns
FROM u
JOIN cpu c USING (instance)
JOIN udev d USING (instance)
LEFT JOIN own_union w USING (instance)
LEFT JOIN busy b USING (instance)
LEFT JOIN own_total t USING (instance)
LEFT JOIN traced_span s USING (global_pid)
ORDER BY u.instance


-- @query summary
-- @needs _ranges_instances
-- Percentiles over every instance; the tail and the median band over the instances the
-- CUDA trace covers (cuda_covered not false), as in attribution.
WITH q AS (
    SELECT count(*) AS n, quantile_cont(duration_ns, 0.5) AS p50_ns,
           quantile_cont(duration_ns, 0.9) AS p90_ns, quantile_cont(duration_ns, 0.99) AS p99_ns,
           quantile_cont(duration_ns, 0.999) AS p999_ns, max(duration_ns) AS max_ns,
           avg(duration_ns) AS mean_ns
    FROM _ranges_instances),
c AS (SELECT duration_ns FROM _ranges_instances WHERE cuda_covered IS NOT FALSE),
band AS (
    SELECT count(*) AS n_attributed, quantile_cont(duration_ns, 0.45) AS lo,
           quantile_cont(duration_ns, 0.55) AS hi FROM c)
SELECT n, p50_ns, p90_ns, p99_ns, p999_ns, max_ns, mean_ns,
       p99_ns / nullif(p50_ns, 0) AS p99_over_p50, n_attributed,
       CASE WHEN n_attributed > 0
            THEN greatest(1, ceil(n_attributed * $tail_pct / 100))::BIGINT ELSE 0 END AS tail_n,
       (SELECT count(*) FROM c WHERE duration_ns BETWEEN lo AND hi) AS median_band_n,
       lo AS band_lo_ns, hi AS band_hi_ns
FROM q, band;


-- @query attribution
-- @needs _ranges_instances
-- Over the instances the CUDA trace covers (cuda_covered not false), n of them.
-- tail: the ceil(n * $tail_pct / 100) slowest instances (at least one);
-- median band: the instances whose duration lies between the 45th and 55th percentile.
-- delta_ns = tail_mean_ns - median_mean_ns. The cpu_* components add up to duration_ns and
-- so do the gpu_* components, so each family's deltas add up to the duration's; where one
-- component shrank, another grew by more than the duration did, and its delta over the
-- duration's would pass 1. So a share is of the family's growth, never above 1:
--   family_growth_ns  sum of the family's positive deltas (the duration row: its own)
--   family_shrink_ns  sum of the family's negative deltas, as a positive figure: the
--                     shrinking that offsets part of the growth (growth - shrink = the
--                     duration's delta)
--   share_of_growth   delta_ns / family_growth_ns for a component that grew, 0 for one that
--                     did not (each family's shares add up to 1 when anything grew)
WITH i AS (SELECT * FROM _ranges_instances WHERE cuda_covered IS NOT FALSE),
band AS (
    SELECT quantile_cont(duration_ns, 0.45) AS lo, quantile_cont(duration_ns, 0.55) AS hi,
           greatest(1, ceil(count(*) * $tail_pct / 100))::BIGINT AS tail_n
    FROM i),
ranked AS (SELECT *, row_number() OVER (ORDER BY duration_ns DESC, start_ns) AS slow_rank FROM i),
groups AS (
    SELECT 'tail' AS grp, r.* FROM ranked r, band WHERE r.slow_rank <= band.tail_n
    UNION ALL
    SELECT 'median', r.* FROM ranked r, band WHERE r.duration_ns BETWEEN band.lo AND band.hi),
long AS (
    UNPIVOT (SELECT grp, duration_ns, cpu_launch_ns, cpu_memcpy_ns, cpu_sync_ns, cpu_other_api_ns,
                    cpu_outside_cuda_ns, gpu_own_kernel_ns, gpu_own_copy_ns, gpu_other_ns,
                    gpu_pending_idle_ns, gpu_idle_ns FROM groups)
    ON COLUMNS(* EXCLUDE (grp)) INTO NAME col VALUE value_ns),
means AS (
    SELECT col, avg(value_ns) FILTER (WHERE grp = 'tail') AS tail_mean_ns,
           avg(value_ns) FILTER (WHERE grp = 'median') AS median_mean_ns
    FROM long GROUP BY col)
SELECT regexp_replace(col, '_ns$', '') AS component, family,
       tail_mean_ns, median_mean_ns, delta_ns,
       CASE WHEN delta_ns > 0 THEN delta_ns / sum(greatest(delta_ns, 0)) OVER fam
            WHEN delta_ns IS NOT NULL THEN 0.0 END AS share_of_growth,
       sum(greatest(delta_ns, 0)) OVER fam AS family_growth_ns,
       sum(greatest(-delta_ns, 0)) OVER fam AS family_shrink_ns
FROM (SELECT *, tail_mean_ns - median_mean_ns AS delta_ns,
             CASE WHEN col LIKE 'cpu_%' THEN 'cpu' WHEN col LIKE 'gpu_%' THEN 'gpu'
                  ELSE 'total' END AS family
      FROM means)
-- the family's sums run in component order, so the doubles come out the same on every run
WINDOW fam AS (PARTITION BY family ORDER BY col
               ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)
ORDER BY family = 'gpu', family = 'cpu', delta_ns DESC, component;


-- @query slowest
-- @needs _ranges_instances
SELECT * FROM _ranges_instances ORDER BY duration_ns DESC, start_ns LIMIT $limit;


-- @query totals
-- @needs nvtx_ranges
-- Matches `nsys stats --report nvtx_sum` (nsys 2024+): range = 'domain:name' (':name' in
-- the default domain), grouped with the style; median as the mean of the two middle
-- values, sample standard deviation. Unclosed ranges are left out (nsys closes them at the
-- last NVTX timestamp) and counted in `unclosed`.
SELECT domain || ':' || name AS range, domain, name, style,
       count(end_ns) AS instances, sum(duration_ns)::BIGINT AS total_ns, avg(duration_ns) AS avg_ns,
       quantile_cont(duration_ns, 0.5) AS med_ns, min(duration_ns) AS min_ns,
       max(duration_ns) AS max_ns, coalesce(stddev_samp(duration_ns), 0) AS stddev_ns,
       100.0 * sum(duration_ns) / sum(sum(duration_ns)) OVER () AS time_pct,
       count(*) - count(end_ns) AS unclosed
FROM nvtx_ranges
GROUP BY domain, name, style
ORDER BY total_ns DESC NULLS LAST, range, style;
