-- GPU idle time by cause: why the GPU waited before each kernel.
--
-- Inputs:  kernels (start_ns, end_ns, global_pid, device_id, stream_id, graph_node_id,
--          launch_end_ns and launch_global_tid: the launch call's return and thread),
--          cuda_graphs (graph-level executions keep the GPU busy), memcpys, memsets,
--          api_calls (the launching thread's CUDA calls), and the unit windows of the
--          ranges analysis (its instances: start_ns, end_ns, pid), registered by
--          analyses/gpu_idle.py.
-- Params:  $no_end  an end below every valid timestamp (a NULL end extends no busy period).
-- Units:   ns on the trace timeline.
--
-- The gaps are launch gaps' main gaps (the method's definition): per process and GPU,
-- kernels and graph-level executions by start; a kernel outside CUDA graphs that starts
-- after the furthest end of the earlier ones follows one gap [idle_start_ns, idle_end_ns).
-- Each gap gets one cause (analyses/gpu_idle.py, docs/analyses/gpu_idle.md), from
--   copies_busy    the process's own copies and memsets on the GPU (a union per process
--                  and GPU; key = global_pid + device_id, the pid bits lie above bit 24)
--   device_busy    every operation on the GPU, any process (a union per GPU)
--   thread_calls   the launching thread's CUDA calls, cls 0 launch, 1 memcpy/memset,
--                  2 sync, 3 other (as ranges' CPU components), cut into pieces
--                  (host_pieces) and measured in each gap's host window and at the
--                  instant the GPU went idle (host_windows; the accelerated pass sweeps
--                  them, compute/sweep.py)

-- @query gaps
-- @needs cuda_graphs, kernels
-- The order of the device sequence: by start, then end (NULL last); work tied on both
-- is taken kernels outside graphs first, then by stream, launch call return and thread,
-- so that the one gap a tie holds goes to the same kernel on every run.
WITH seq AS (
    SELECT global_pid, device_id, coalesce(stream_id, -1) AS stream_id, start_ns, end_ns,
           coalesce(launch_end_ns, $no_end) AS launch_end_ns,
           coalesce(launch_global_tid, $no_end) AS launch_global_tid,
           graph_node_id IS NOT NULL AS in_graph
    FROM kernels
    WHERE start_ns IS NOT NULL AND global_pid IS NOT NULL AND device_id IS NOT NULL
    UNION ALL
    SELECT global_pid, device_id, coalesce(stream_id, -1), gpu_start_ns, gpu_end_ns, $no_end,
           $no_end, true
    FROM cuda_graphs
    WHERE trace_level = 'graph' AND gpu_start_ns IS NOT NULL AND global_pid IS NOT NULL
      AND device_id IS NOT NULL),
w AS (
    SELECT *, max(coalesce(end_ns, $no_end)) OVER (
                  PARTITION BY global_pid, device_id
                  ORDER BY start_ns, end_ns NULLS LAST, in_graph, stream_id, launch_end_ns,
                           launch_global_tid
                  ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS busy_until
    FROM seq)
SELECT global_pid, (global_pid >> 24) & 16777215 AS pid, device_id, stream_id,
       busy_until AS idle_start_ns, start_ns AS idle_end_ns, launch_end_ns, launch_global_tid
FROM w
WHERE NOT in_graph AND busy_until > $no_end AND start_ns > busy_until
ORDER BY global_pid, device_id, start_ns, end_ns NULLS LAST, stream_id, launch_end_ns,
         launch_global_tid

-- @query copies_busy
-- @needs memcpys, memsets
SELECT global_pid + device_id AS key, start_ns, end_ns FROM memcpys
WHERE global_pid IS NOT NULL AND device_id IS NOT NULL
UNION ALL
SELECT global_pid + device_id, start_ns, end_ns FROM memsets
WHERE global_pid IS NOT NULL AND device_id IS NOT NULL

-- @query device_busy
-- @needs cuda_graphs, kernels, memcpys, memsets
SELECT device_id AS key, start_ns, end_ns FROM kernels
UNION ALL SELECT device_id, start_ns, end_ns FROM memcpys
UNION ALL SELECT device_id, start_ns, end_ns FROM memsets
UNION ALL SELECT device_id, gpu_start_ns, gpu_end_ns FROM cuda_graphs WHERE trace_level = 'graph'

-- @query device_processes
-- @needs cuda_graphs, kernels, memcpys, memsets
-- Per GPU, whether all its operations belong to one known process: then other work never
-- runs in a gap (the process's own kernels do not, by the gap's definition, and its
-- copies are its own), and device_busy need not be read for it.
SELECT device_id, count(*) = count(global_pid) AND min(global_pid) = max(global_pid) AS single
FROM (SELECT device_id, global_pid FROM kernels WHERE end_ns >= start_ns
      UNION ALL SELECT device_id, global_pid FROM memcpys WHERE end_ns >= start_ns
      UNION ALL SELECT device_id, global_pid FROM memsets WHERE end_ns >= start_ns
      UNION ALL SELECT device_id, global_pid FROM cuda_graphs
      WHERE trace_level = 'graph' AND gpu_end_ns >= gpu_start_ns)
WHERE device_id IS NOT NULL
GROUP BY device_id

-- @query thread_calls
-- @needs api_calls
-- @keep view
SELECT global_tid AS key, start_ns, end_ns,
       CASE WHEN category IN ('launch', 'graph_launch') THEN 0
            WHEN category IN ('memcpy', 'memset') THEN 1
            WHEN category = 'sync' THEN 2 ELSE 3 END AS cls
FROM api_calls

-- @query host_pieces
-- @needs _gpu_idle_windows, thread_calls
-- (a step) The calls of the threads with a host window (_gpu_idle_windows: id, key the
-- thread, start_ns, end_ns; registered by analyses/gpu_idle.py) cut into disjoint pieces:
-- taken by start (ties: the longer first, then the lower class), each call keeps the part
-- beyond the furthest end of the thread's calls before it, [piece_start, piece_end),
-- credited to its class; cum0_ns .. cum3_ns: the running totals of each class's pieces up
-- to this one (included). (As ranges.sql rg_cpu_pieces.)
WITH calls AS (
    SELECT key, cls, start_ns, end_ns FROM thread_calls
    WHERE key IN (SELECT DISTINCT key FROM _gpu_idle_windows)
      AND start_ns IS NOT NULL AND end_ns >= start_ns),
pieces AS (
    SELECT key, cls, greatest(start_ns, coalesce(reach_ns, start_ns)) AS piece_start,
           end_ns AS piece_end
    FROM (SELECT *, max(end_ns) OVER (PARTITION BY key ORDER BY start_ns, end_ns DESC, cls
                                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
                        AS reach_ns
          FROM calls)
    WHERE end_ns > greatest(start_ns, coalesce(reach_ns, start_ns)))
SELECT key, cls, piece_start, piece_end,
       coalesce(sum(piece_end - piece_start) FILTER (WHERE cls = 0) OVER w, 0) AS cum0_ns,
       coalesce(sum(piece_end - piece_start) FILTER (WHERE cls = 1) OVER w, 0) AS cum1_ns,
       coalesce(sum(piece_end - piece_start) FILTER (WHERE cls = 2) OVER w, 0) AS cum2_ns,
       coalesce(sum(piece_end - piece_start) FILTER (WHERE cls = 3) OVER w, 0) AS cum3_ns
FROM pieces
WINDOW w AS (PARTITION BY key ORDER BY piece_start ROWS UNBOUNDED PRECEDING)

-- @query host_windows
-- @needs _gpu_idle_windows, host_pieces
-- Per host window, the time of each class of call inside it: covered(end) -
-- covered(start), where covered(t), the length of a class's pieces before instant t, is
-- the running total at the last piece that starts at or before t (an ASOF join) less the
-- part of that piece after t; at_cls: the class of the piece holding the window's start
-- (NULL: the thread was outside CUDA then).
WITH bounds AS (
    SELECT w.id, -1 AS sign, p.cls, p.piece_end > w.start_ns AS holds,
           p.cum0_ns, p.cum1_ns, p.cum2_ns, p.cum3_ns,
           p.piece_end - least(w.start_ns, p.piece_end) AS after_ns
    FROM _gpu_idle_windows w ASOF LEFT JOIN host_pieces p
      ON p.key = w.key AND p.piece_start <= w.start_ns
    UNION ALL
    SELECT w.id, 1, p.cls, false, p.cum0_ns, p.cum1_ns, p.cum2_ns, p.cum3_ns,
           p.piece_end - least(w.end_ns, p.piece_end)
    FROM _gpu_idle_windows w ASOF LEFT JOIN host_pieces p
      ON p.key = w.key AND p.piece_start <= w.end_ns)
SELECT id,
       coalesce(sum(sign * (cum0_ns - CASE WHEN cls = 0 THEN after_ns ELSE 0 END)), 0)::BIGINT
           AS launch_ns,
       coalesce(sum(sign * (cum1_ns - CASE WHEN cls = 1 THEN after_ns ELSE 0 END)), 0)::BIGINT
           AS copy_ns,
       coalesce(sum(sign * (cum2_ns - CASE WHEN cls = 2 THEN after_ns ELSE 0 END)), 0)::BIGINT
           AS sync_ns,
       coalesce(sum(sign * (cum3_ns - CASE WHEN cls = 3 THEN after_ns ELSE 0 END)), 0)::BIGINT
           AS other_ns,
       coalesce(max(cls) FILTER (WHERE holds), -1) AS at_cls
FROM bounds
GROUP BY id
ORDER BY id

-- @query sequence
-- @needs cuda_graphs, kernels
-- (The accelerated pass of analyses/gpu_idle.py reads this and sequence_rows.) The rows of gaps' device sequence as the pass reads them: a NULL end reads $no_end,
-- sort_end the end for ordering (NULL last), in_graph 1 for graph work.
SELECT global_pid, device_id, start_ns, coalesce(end_ns, $no_end) AS end_ns,
       coalesce(end_ns, 9223372036854775807) AS sort_end, in_graph, stream_id,
       launch_end_ns, launch_global_tid
FROM (SELECT global_pid, device_id, start_ns, end_ns,
             CASE WHEN graph_node_id IS NULL THEN 0 ELSE 1 END AS in_graph,
             coalesce(stream_id, -1) AS stream_id,
             coalesce(launch_end_ns, $no_end) AS launch_end_ns,
             coalesce(launch_global_tid, $no_end) AS launch_global_tid
      FROM kernels
      UNION ALL
      SELECT global_pid, device_id, gpu_start_ns, gpu_end_ns, 1, coalesce(stream_id, -1),
             $no_end, $no_end
      FROM cuda_graphs
      WHERE trace_level = 'graph')

-- @query sequence_rows
-- @needs cuda_graphs, kernels
-- The rows of sequence (room for its gaps), and of them the graph-level executions
SELECT (SELECT count(*) FROM kernels) + g AS n, g AS graph_rows
FROM (SELECT count(*) AS g FROM cuda_graphs WHERE trace_level = 'graph')
