-- Memory allocated in the launch loop: the allocation and free calls a thread makes while
-- it launches kernels, how far over that time they recur, and what they cost it.
--
-- Inputs:  api_calls (one row per traced CUDA API call: global_tid, pid, tid, name,
--          category, start_ns, end_ns, duration_ns).
-- A thread's launch window runs from the entry of its first launch call (category launch
-- or graph_launch) to the return of its last. An allocation call is one of category
-- memory (cudaMalloc, cudaFree, cudaMallocHost, cudaHostAlloc, cudaHostRegister,
-- cudaMallocManaged and their driver forms) that starts after the window opens and
-- returns before it closes; setup before the first launch and teardown after the last
-- fall outside. The stream-ordered calls (names ending in Async) and the memory-pool calls
-- (MemPool) are left out: they are the remedy, not the fault. How far the calls recur:
-- the window is cut in ten equal parts (tenths, by the call's entry); allocations made
-- once, between two phases, fall in one or two, allocations made in every pass of a loop
-- in most of them.
-- Outputs (ns): one row per thread with allocation calls in its window (name NULL), and
-- one per thread and call name, most time first (ties by thread, name): global_tid, pid,
-- tid, name, launches, window_ns, calls, frees (calls whose name holds Free), tenths (of
-- the window holding a call, 1-10), time_ns (their summed duration), share_pct (time_ns
-- of window_ns), median_ns, max_ns.

-- @query calls
-- @needs api_calls
WITH windows AS (
    SELECT global_tid, min(start_ns) AS first_ns, max(end_ns) AS last_ns,
           count(*) AS launches
    FROM api_calls
    WHERE category IN ('launch', 'graph_launch')
    GROUP BY global_tid),
allocations AS (
    SELECT a.global_tid, a.pid, a.tid, a.name::VARCHAR AS name, a.duration_ns, w.launches,
           w.last_ns - w.first_ns AS window_ns,
           least(9, floor(10 * (a.start_ns - w.first_ns)::DOUBLE
                          / nullif(w.last_ns - w.first_ns, 0)))::INTEGER AS tenth
    FROM api_calls a JOIN windows w USING (global_tid)
    WHERE a.category = 'memory' AND a.start_ns > w.first_ns AND a.end_ns < w.last_ns
      AND NOT regexp_matches(a.name::VARCHAR, 'Async$|MemPool'))
SELECT global_tid, any_value(pid) AS pid, any_value(tid) AS tid, name,
       any_value(launches) AS launches, any_value(window_ns) AS window_ns,
       count(*) AS calls, count(*) FILTER (WHERE name LIKE '%Free%') AS frees,
       count(DISTINCT tenth) AS tenths, sum(duration_ns)::BIGINT AS time_ns,
       100.0 * sum(duration_ns) / nullif(any_value(window_ns), 0) AS share_pct,
       quantile_cont(duration_ns, 0.5) AS median_ns, max(duration_ns)::BIGINT AS max_ns
FROM allocations
GROUP BY GROUPING SETS ((global_tid), (global_tid, name))
ORDER BY time_ns DESC, global_tid, name NULLS FIRST
