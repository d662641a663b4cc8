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
--                  2 sync, 3 other (as ranges' CPU components), swept at each gap's host
--                  window and at the instant the GPU went idle (analyses/sweep.py)

-- @query gaps
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
SELECT global_pid + device_id AS key, start_ns, end_ns FROM memcpys
WHERE global_pid IS NOT NULL AND device_id IS NOT NULL
UNION ALL
SELECT global_pid + device_id, start_ns, end_ns FROM memsets
WHERE global_pid IS NOT NULL AND device_id IS NOT NULL

-- @query device_busy
SELECT device_id AS key, start_ns, end_ns FROM kernels
UNION ALL SELECT device_id, start_ns, end_ns FROM memcpys
UNION ALL SELECT device_id, start_ns, end_ns FROM memsets
UNION ALL SELECT device_id, gpu_start_ns, gpu_end_ns FROM cuda_graphs WHERE trace_level = 'graph'

-- @query thread_calls
SELECT global_tid AS key, start_ns, end_ns,
       CASE WHEN category IN ('launch', 'graph_launch') THEN 0
            WHEN category IN ('memcpy', 'memset') THEN 1
            WHEN category = 'sync' THEN 2 ELSE 3 END AS cls
FROM api_calls

-- @query probes
SELECT key, ts, grp, sign FROM _gpu_idle_probes

-- @query sequence
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
-- The rows of sequence (room for its gaps), and of them the graph-level executions
SELECT (SELECT count(*) FROM kernels) + g AS n, g AS graph_rows
FROM (SELECT count(*) AS g FROM cuda_graphs WHERE trace_level = 'graph')
