-- Collectives across ranks: which rank arrives last at each NCCL collective, how long the
-- others wait for it, and how much of each rank's communication overlaps its compute.
--
-- Per export (queries nccl_kernels and overlap, over the views):
--   a rank is one process on one GPU that runs NCCL kernels (names starting "nccl"); the
--   collective is read from the kernel's name (AllReduce, AllGather, ReduceScatter,
--   Broadcast, Reduce, AllToAll, SendRecv, Send, Recv; "other" when none is named). NCCL
--   runs a communicator's kernels on the stream it was handed, so a rank's streams that
--   run NCCL kernels, numbered in order of their first one, stand in for its
--   communicators (comm); seq numbers a rank's kernels of one collective on one comm in
--   start order. Every rank of a communicator calls its collectives in the same order,
--   so (comm, kind, seq) names one collective instance on every rank.
--
-- Per export, where no export of the run holds NCCL kernels (query mpi_calls): the MPI
--   collectives that nsys traces (--trace=mpi) as NVTX ranges of the "MPI" domain. A rank
--   is a process; its calls of one symmetric collective (Allreduce, Allgather(v),
--   Alltoall(v/w), Reduce_scatter(_block), Barrier: every rank leaves when the last has
--   arrived) are numbered in start order. The ranges carry no communicator: every call is
--   taken on one (comm 0), as every rank calls a communicator's collectives in the same
--   order. A rank arrives when its call starts.
--
-- Across exports (queries instances and per_rank, over the table `arrivals`: rank, comm,
-- kind, seq, start_ns, end_ns on one aligned timeline, the instances every rank holds):
--   a rank arrives at an instance when its kernel starts: the kernel then spins until the
--   last rank has arrived, so a rank's wait is last arrival - its arrival. The last
--   rank caused the others' waits (their sum); the run lost last - second-last arrival
--   to it (the time the instance would have started sooner had it arrived with the
--   next-latest). Where two or more ranks share the last arrival, none of them alone
--   held the others: the instance has no last rank, and its waits count for no rank.
--   The transfer is the median end - last arrival.
-- Units: ns.

-- @query nccl_kernels
-- @needs kernels
WITH nccl AS (
    SELECT pid, device_id, stream_id, start_ns, end_ns, name,
           coalesce(lower(nullif(regexp_extract(
               name, '(?i)(AllReduce|AllGather|ReduceScatter|Broadcast|AllToAll|SendRecv|Reduce|Send|Recv)',
               1), '')), 'other') AS kind
    FROM kernels
    WHERE (name ILIKE 'nccl%' OR short_name ILIKE 'nccl%')
      AND start_ns IS NOT NULL AND end_ns IS NOT NULL
),
comms AS (
    SELECT pid, device_id, stream_id,
           dense_rank() OVER (PARTITION BY pid, device_id ORDER BY min(start_ns), stream_id) - 1
               AS comm
    FROM nccl
    GROUP BY pid, device_id, stream_id
)
SELECT n.pid, n.device_id, c.comm, n.kind,
       row_number() OVER (PARTITION BY n.pid, n.device_id, c.comm, n.kind
                          ORDER BY n.start_ns, n.end_ns) - 1 AS seq,
       n.start_ns, n.end_ns, n.stream_id, n.name
FROM nccl n JOIN comms c USING (pid, device_id, stream_id)
ORDER BY n.pid, n.device_id, n.start_ns

-- @query mpi_calls
-- @needs nvtx_ranges
WITH calls AS (
    SELECT pid, start_ns, end_ns, name,
           replace(lower(regexp_extract(
               name, '^MPI_(Allreduce|Allgather|Alltoall|Reduce_scatter|Barrier)(v|w|_block)?$',
               1)), '_', '') AS kind
    FROM nvtx_ranges
    WHERE domain = 'MPI' AND end_ns IS NOT NULL
)
SELECT pid, -1 AS device_id, 0 AS comm, kind,
       row_number() OVER (PARTITION BY pid, kind ORDER BY start_ns, end_ns) - 1 AS seq,
       start_ns, end_ns, NULL::BIGINT AS stream_id, name
FROM calls
WHERE kind <> ''
ORDER BY pid, start_ns

-- @query overlap
-- @needs kernels
-- Per rank: NCCL kernel time, other kernel time on the same GPU by the same process, and
-- the NCCL time during which one of those other kernels ran. The other kernels' union is
-- a run of disjoint islands; cover(t), the island time before t, is the islands wholly
-- before the last island starting at or before t plus that island's part before t, and a
-- kernel's overlapped time is cover(end) - cover(start): two sorted look-ups per kernel.
WITH k AS (
    SELECT pid, device_id, start_ns, end_ns,
           (name ILIKE 'nccl%' OR short_name ILIKE 'nccl%') AS is_nccl
    FROM kernels
    WHERE start_ns IS NOT NULL AND end_ns IS NOT NULL
),
ranks AS (SELECT DISTINCT pid, device_id FROM k WHERE is_nccl),
compute AS (
    SELECT k.pid, k.device_id, k.start_ns, k.end_ns,
           max(k.end_ns) OVER (PARTITION BY k.pid, k.device_id ORDER BY k.start_ns, k.end_ns
                               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach
    FROM k JOIN ranks USING (pid, device_id)
    WHERE NOT k.is_nccl
),
islands AS (
    SELECT pid, device_id, min(start_ns) AS start_ns, max(end_ns) AS end_ns
    FROM (SELECT *, sum(CASE WHEN reach IS NULL OR start_ns > reach THEN 1 ELSE 0 END)
                        OVER (PARTITION BY pid, device_id ORDER BY start_ns, end_ns) AS island
          FROM compute)
    GROUP BY pid, device_id, island
),
covered AS (
    SELECT pid, device_id, start_ns, end_ns,
           coalesce(sum(end_ns - start_ns) OVER (
               PARTITION BY pid, device_id ORDER BY start_ns
               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS before_ns
    FROM islands
),
nccl AS (SELECT * FROM k WHERE is_nccl),
at_end AS (
    SELECT n.pid, n.device_id, n.start_ns, n.end_ns,
           coalesce(c.before_ns + least(n.end_ns, c.end_ns) - c.start_ns, 0) AS cover_end
    FROM nccl n ASOF LEFT JOIN covered c
      ON n.pid = c.pid AND n.device_id = c.device_id AND n.end_ns >= c.start_ns
),
overlapped AS (
    SELECT e.pid, e.device_id,
           sum(e.cover_end
               - coalesce(c.before_ns + least(e.start_ns, c.end_ns) - c.start_ns, 0))::BIGINT
               AS ns
    FROM at_end e ASOF LEFT JOIN covered c
      ON e.pid = c.pid AND e.device_id = c.device_id AND e.start_ns >= c.start_ns
    GROUP BY e.pid, e.device_id
)
SELECT r.pid, r.device_id,
       (SELECT coalesce(sum(end_ns - start_ns), 0)::BIGINT FROM nccl
        WHERE nccl.pid = r.pid AND nccl.device_id = r.device_id) AS nccl_ns,
       (SELECT coalesce(sum(end_ns - start_ns), 0)::BIGINT FROM compute
        WHERE compute.pid = r.pid AND compute.device_id = r.device_id) AS compute_ns,
       coalesce(o.ns, 0) AS nccl_overlapped_ns
FROM ranks r LEFT JOIN overlapped o USING (pid, device_id)
ORDER BY r.pid, r.device_id

-- @query complete
-- @needs k
-- The kernels (table k: on one timeline, with their rank) of the instances every one of
-- the $n ranks holds: the table `arrivals` of the queries below.
SELECT rank, comm, kind, seq, start_ns, end_ns, export FROM k
QUALIFY count(*) OVER (PARTITION BY comm, kind, seq) = $n

-- @query end_residuals
-- @needs arrivals
-- Per export: the median over its kernels of (end - the instance's median end), ns: how
-- far its clock sits from the run's, since a collective's kernels end together.
SELECT export, median(end_ns - m)::BIGINT AS residual_ns
FROM (SELECT export, end_ns, median(end_ns) OVER (PARTITION BY comm, kind, seq) AS m
      FROM arrivals)
GROUP BY export

-- @query end_fits
-- @needs arrivals
-- Per export: its clock's error against the run's as a line a + b * t (offset and
-- drift), the least-squares fit of (end - the instance's median end) on t.
SELECT export, regr_intercept(end_ns - m, m) AS a, coalesce(regr_slope(end_ns - m, m), 0) AS b
FROM (SELECT export, end_ns, median(end_ns) OVER (PARTITION BY comm, kind, seq) AS m
      FROM arrivals)
GROUP BY export

-- @query instances
-- @needs arrivals
WITH inst AS (
    SELECT comm, kind, seq,
           max(start_ns) AS last_arrival_ns,
           min(start_ns) AS first_arrival_ns,
           list_sort(list(start_ns), 'DESC')[2] AS second_arrival_ns,
           arg_max(rank, start_ns) AS last_rank,
           sum(start_ns)::HUGEINT AS sum_arrival_ns,
           count(*) AS ranks,
           median(end_ns) AS end_ns
    FROM arrivals
    GROUP BY comm, kind, seq
)
SELECT comm, kind, seq, first_arrival_ns, last_arrival_ns,
       CASE WHEN second_arrival_ns = last_arrival_ns THEN NULL ELSE last_rank END AS last_rank,
       (ranks * last_arrival_ns - sum_arrival_ns)::BIGINT AS wait_ns,
       last_arrival_ns - second_arrival_ns AS delay_ns,
       greatest(CAST(end_ns AS BIGINT) - last_arrival_ns, 0) AS transfer_ns
FROM inst
ORDER BY first_arrival_ns, comm, kind, seq

-- @query per_rank
-- @needs arrivals, instances
-- $instances: the table of the query above, registered as `instances`.
SELECT a.rank,
       count(*) AS instances,
       sum(i.last_arrival_ns - a.start_ns)::BIGINT AS waited_ns,
       count(*) FILTER (WHERE i.last_rank = a.rank AND i.wait_ns > 0) AS times_last,
       coalesce(sum(i.wait_ns) FILTER (WHERE i.last_rank = a.rank), 0)::BIGINT AS caused_wait_ns,
       coalesce(sum(i.delay_ns) FILTER (WHERE i.last_rank = a.rank), 0)::BIGINT AS delay_ns
FROM arrivals a JOIN instances i USING (comm, kind, seq)
GROUP BY a.rank
ORDER BY a.rank

-- @query slowest
-- @needs arrivals, instances
-- Every rank's arrival and end at the $n instances with the longest waits.
SELECT i.comm, i.kind, i.seq, i.wait_ns, i.last_rank, a.rank, a.start_ns, a.end_ns
FROM (SELECT * FROM instances WHERE wait_ns > 0
      ORDER BY wait_ns DESC, first_arrival_ns LIMIT $n) i
JOIN arrivals a USING (comm, kind, seq)
ORDER BY i.wait_ns DESC, i.comm, i.kind, i.seq, a.rank
