-- Where host threads blocked in the OS: the traced OS runtime calls (poll, futex, ioctl,
-- read, ...) per call name.
--
-- Inputs:  os_runtime (one row per traced OS call: global_tid, name, start_ns, end_ns,
--          duration_ns).
-- A call's blocked time is its duration; calls of several threads add up, so a name's
-- total can exceed the capture's length (threads says over how many it is summed).
-- Outputs (ns):
--   per_name  one row per call name, most blocked time first (ties by name): name, calls,
--             total_ns, threads (that made the call), max_ns
--   summary   every call: calls, total_ns, threads

-- @query per_name
-- @needs os_runtime
SELECT name, count(*) AS calls, sum(duration_ns)::BIGINT AS total_ns,
       count(DISTINCT global_tid) AS threads, max(duration_ns)::BIGINT AS max_ns
FROM os_runtime
GROUP BY name
ORDER BY total_ns DESC, name

-- @query summary
-- @needs os_runtime
SELECT count(*) AS calls, coalesce(sum(duration_ns), 0)::BIGINT AS total_ns,
       count(DISTINCT global_tid) AS threads
FROM os_runtime
