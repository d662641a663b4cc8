-- Capture completeness: what the capture lost or lacks, and the synchronization points.
--
-- Inputs:  api_calls, kernels, nvtx_ranges, devices (each only when the probe finds it);
--          launches reads `launched` (below).
-- Params:  $blocking  regular expression of the API names that block the host
--                     (ranges.BLOCKING_WAITS; a name holding 'Async' never blocks).
-- Outputs: launches: one row per process with launch calls or kernel records:
--            global_pid          nsys process key
--            pid                 operating-system process id
--            launch_calls        successful kernel launch calls (api_calls category 'launch',
--                                return code 0 or not recorded), less those made while
--                                their thread captured a stream into a CUDA graph (between
--                                cudaStreamBeginCapture and cudaStreamEndCapture: recorded,
--                                not run; the graph's launches run them)
--            kernels             kernel records outside CUDA graphs
--            launches_without_kernel  launch calls whose correlation id matches no kernel
--                                of the process (computed only where the counts differ;
--                                else 0)
--            kernels_without_launch   kernels whose correlation id matches no API call of
--                                the process (likewise)
--          blocking: blocking_waits (calls matching $blocking)
--          open_ranges: NVTX ranges never closed (a push without its pop, a start without
--            its end: the capture ended inside them), by name: name, n
--          devices: device_id, name, chip_name, compute_capability, is_discrete (the GPUs
--            the export lists, for the link table)

-- @query capturing
-- @needs api_calls
-- Stream capture windows: a thread's launches from cudaStreamBeginCapture to the first
-- cudaStreamEndCapture after it are recorded into a graph, not run (the graph's launches
-- run them); hi is NULL when the capture never ended. The expressions are matched once
-- per distinct name, then the calls of the matching names are read.
WITH names AS (SELECT DISTINCT name FROM api_calls),
marks AS (
    SELECT global_tid, start_ns, end_ns,
           regexp_matches(name, '^cu(da)?StreamBeginCapture') AS begins
    FROM api_calls
    WHERE name IN (SELECT name FROM names
                   WHERE regexp_matches(name, '^cu(da)?Stream(Begin|End)Capture')))
SELECT b.global_tid, b.start_ns AS lo,
       (SELECT min(e.end_ns) FROM marks e
        WHERE NOT e.begins AND e.global_tid = b.global_tid AND e.start_ns >= b.start_ns) AS hi
FROM marks b WHERE b.begins

-- @query launched_outside_capture
-- @needs api_calls, capturing
-- `launched` where the export has capture windows (the query `capturing`, named as a
-- temporary view): the successful launch calls outside every window.
SELECT a.* FROM api_calls a
WHERE a.category = 'launch' AND coalesce(a.return_value, 0) = 0
  AND NOT EXISTS (SELECT 1 FROM capturing c
                  WHERE c.global_tid = a.global_tid AND a.start_ns >= c.lo
                    AND (c.hi IS NULL OR a.start_ns <= c.hi))

-- @query launched_all
-- @needs api_calls
-- `launched` where it has none (most exports): every successful launch call. The anti-join
-- above would cost a pass that pairs every launch call with the (empty) windows.
SELECT a.* FROM api_calls a
WHERE a.category = 'launch' AND coalesce(a.return_value, 0) = 0

-- @query launches
-- @needs api_calls, kernels, launched
-- Reads `launched` (launched_outside_capture or launched_all, as a temporary view).
WITH calls AS (
    SELECT global_pid, any_value(pid) AS pid, count(*) AS launch_calls
    FROM launched
    GROUP BY global_pid),
ks AS (
    SELECT global_pid, count(*) AS kernels
    FROM kernels WHERE graph_node_id IS NULL GROUP BY global_pid),
counts AS (
    SELECT coalesce(c.global_pid, k.global_pid) AS global_pid, c.pid,
           coalesce(c.launch_calls, 0) AS launch_calls, coalesce(k.kernels, 0) AS kernels
    FROM calls c FULL OUTER JOIN ks k USING (global_pid)),
differ AS (SELECT global_pid FROM counts WHERE launch_calls <> kernels),
lost AS (
    SELECT a.global_pid, count(*) AS n
    FROM launched a
    WHERE a.global_pid IN (SELECT global_pid FROM differ)
      AND NOT EXISTS (SELECT 1 FROM kernels k WHERE k.global_pid = a.global_pid
                                               AND k.correlation_id = a.correlation_id)
    GROUP BY a.global_pid),
orphans AS (
    SELECT k.global_pid, count(*) AS n
    FROM kernels k
    WHERE k.graph_node_id IS NULL AND k.global_pid IN (SELECT global_pid FROM differ)
      AND NOT EXISTS (SELECT 1 FROM api_calls a WHERE a.global_pid = k.global_pid
                                                 AND a.correlation_id = k.correlation_id)
    GROUP BY k.global_pid)
SELECT c.global_pid, c.pid, c.launch_calls, c.kernels,
       coalesce(l.n, 0) AS launches_without_kernel, coalesce(o.n, 0) AS kernels_without_launch
FROM counts c LEFT JOIN lost l USING (global_pid) LEFT JOIN orphans o USING (global_pid)
ORDER BY c.global_pid

-- @query launches_no_calls
-- @needs kernels
-- The same table when the capture has kernels and no API calls (every kernel lacks its call).
SELECT global_pid, NULL::BIGINT AS pid, 0::BIGINT AS launch_calls, count(*) AS kernels,
       0::BIGINT AS launches_without_kernel, count(*) AS kernels_without_launch
FROM kernels WHERE graph_node_id IS NULL
GROUP BY global_pid ORDER BY global_pid

-- @query launches_no_kernels
-- @needs api_calls
-- The same table when the capture has API calls and no kernel records.
SELECT global_pid, any_value(pid) AS pid, count(*) AS launch_calls, 0::BIGINT AS kernels,
       count(*) AS launches_without_kernel, 0::BIGINT AS kernels_without_launch
FROM api_calls
WHERE category = 'launch' AND coalesce(return_value, 0) = 0
GROUP BY global_pid ORDER BY global_pid

-- @query blocking
-- @needs api_calls
-- the expression is matched once per distinct name, not once per call
SELECT coalesce(sum(n), 0)::BIGINT AS blocking_waits
FROM (SELECT name, count(*) AS n FROM api_calls GROUP BY name)
WHERE regexp_matches(name, $blocking) AND NOT contains(name, 'Async')

-- @query open_ranges
-- @needs nvtx_ranges
SELECT name, count(*) AS n
FROM nvtx_ranges WHERE end_ns IS NULL
GROUP BY name ORDER BY n DESC, name

-- @query devices
-- @needs devices
SELECT device_id, name, chip_name, compute_capability, is_discrete, pcie_generation, pcie_width
FROM devices ORDER BY device_id
