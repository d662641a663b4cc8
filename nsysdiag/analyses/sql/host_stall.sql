-- Host-stall signature: where in each unit the launching thread ran without a CUDA call.
--
-- Inputs:  hs_units (instance, start_ns, end_ns, pid, tid: the units to measure), hs_all
--          (the same columns for every unit), api_calls, os_runtime (query blocked only).
-- Params:  $waits  regular expression of the OS calls in which a thread waits (queues,
--                  locks, sleeps), not works.
-- Outputs: stretches: the stretches inside each unit during which its thread made no CUDA
--          call (calls nested in calls count once: a stretch starts where every earlier
--          call has returned), one row each: instance, stretch_ns, lead (a stretch before
--          the unit's first kernel launch: the one from its start to its first CUDA call,
--          the whole unit without one, and those between the calls that precede its first
--          launch, such as the copy of its input; without a launch, the first only), and per
--          instance once: overlap_ns, the part of the lead during which other instances
--          on the thread were still open (the unit waited for them: from its start to the
--          last end among those that overlap it and end before it does), else 0. Calls
--          count from that end on (the others' calls are not the unit's).
--          blocked: instance, blocked_ns: the part of the lead the thread spent in OS waits
--            that began before the unit opened (the thread was elsewhere when the unit
--            opened: it queued; a wait that begins inside the unit is the unit's own)

-- @query stretches
-- @needs api_calls, hs_all, hs_units
WITH busy AS (
    SELECT u.instance, max(o.end_ns) AS busy_until
    FROM hs_units u JOIN hs_all o
      ON o.pid = u.pid AND o.tid = u.tid AND o.instance <> u.instance
         AND o.start_ns < u.end_ns AND o.end_ns > u.start_ns AND o.end_ns < u.end_ns
    GROUP BY u.instance),
u AS (SELECT h.*, b.busy_until FROM hs_units h LEFT JOIN busy b USING (instance)),
c AS (
    SELECT u.instance, a.start_ns, a.end_ns, a.category IN ('launch', 'graph_launch') AS launch
    FROM u JOIN api_calls a
      ON a.pid = u.pid AND a.tid = u.tid
         AND a.start_ns >= greatest(u.start_ns, coalesce(u.busy_until, u.start_ns))
         AND a.start_ns < u.end_ns),
g AS (
    SELECT instance, start_ns,
           start_ns - max(end_ns) OVER (PARTITION BY instance ORDER BY start_ns, end_ns
                                        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
               AS gap_ns
    FROM c),
per AS (SELECT instance, min(start_ns) AS first_ns, max(end_ns) AS last_ns,
               min(start_ns) FILTER (WHERE launch) AS first_launch_ns
        FROM c GROUP BY instance),
lead AS (
    SELECT u.instance, coalesce(p.first_ns, u.end_ns) - u.start_ns AS stretch_ns, true AS lead,
           greatest(0, coalesce(u.busy_until, u.start_ns) - u.start_ns) AS overlap_ns
    FROM u LEFT JOIN per p USING (instance)),
tail AS (
    SELECT u.instance, u.end_ns - p.last_ns AS stretch_ns, false AS lead, 0 AS overlap_ns
    FROM u JOIN per p USING (instance) WHERE p.last_ns < u.end_ns)
SELECT instance, stretch_ns, lead, overlap_ns FROM lead
UNION ALL SELECT instance, stretch_ns, lead, overlap_ns FROM tail
UNION ALL SELECT g.instance, g.gap_ns, g.start_ns <= coalesce(p.first_launch_ns, p.first_ns), 0
          FROM g JOIN per p USING (instance) WHERE g.gap_ns > 0
ORDER BY instance, stretch_ns DESC

-- @query blocked
-- @needs api_calls, os_runtime, hs_units
WITH u AS (SELECT * FROM hs_units),
lead AS (
    SELECT u.instance, u.pid, u.tid, u.start_ns AS lo,
           coalesce((SELECT min(a.start_ns) FROM api_calls a
                     WHERE a.pid = u.pid AND a.tid = u.tid AND a.start_ns >= u.start_ns
                       AND a.start_ns < u.end_ns), u.end_ns) AS hi
    FROM u)
SELECT l.instance,
       -- least/greatest skip NULLs: a unit without a wait must not count its whole lead
       coalesce(sum(greatest(0, least(o.end_ns, l.hi) - greatest(o.start_ns, l.lo)))
                FILTER (WHERE o.start_ns IS NOT NULL), 0)::BIGINT AS blocked_ns
FROM lead l LEFT JOIN os_runtime o
  ON o.pid = l.pid AND o.tid = l.tid AND o.start_ns < l.lo AND o.end_ns > l.lo
     AND regexp_matches(o.name, $waits)
GROUP BY l.instance
ORDER BY l.instance


-- @query pass_calls
-- @needs api_calls, hs_threads
-- The accelerated pass (host_stall.py: stretches_accelerated, blocked_accelerated) reads
-- the CUDA calls of the measured units' threads, each with its thread's code in
-- hs_threads (thread, code), and places them in the units by searches among the calls
-- sorted by thread and time, instead of comparing every unit with every call. A thread is
-- its (pid, tid) as one key, pid << 24 | tid: the low 48 bits of the packed global_tid
-- (pid and tid are decoded from those bits), so that the join hashes one column read as
-- stored instead of two computed from it.
SELECT t.code, a.start_ns, a.end_ns, a.category IN ('launch', 'graph_launch') AS launch
FROM api_calls a JOIN hs_threads t ON a.global_tid & 281474976710655 = t.thread
WHERE a.start_ns IS NOT NULL

-- @query pass_waits
-- @needs os_runtime, hs_threads
-- (the accelerated pass of blocked) the OS waits of the measured units' threads
SELECT t.code, o.start_ns, o.end_ns
FROM os_runtime o JOIN hs_threads t ON o.global_tid & 281474976710655 = t.thread
WHERE o.start_ns IS NOT NULL AND o.end_ns IS NOT NULL AND regexp_matches(o.name, $waits)
