-- Graphs: is the work replayed as CUDA Graphs, and what does a launch cost?
--
-- Inputs:  cuda_graphs (one row per graph launch: host launch call joined on global_pid +
--          correlation_id to its GPU records; trace_level graph | node | api_only),
--          kernels (graph_node_id is set for kernels run inside a graph, node-level trace).
-- Params:  $top  rows of per_graph.
-- Units:   ns; *_pct in percent.
--
-- summary (one row):
--   graph_launches     rows of cuda_graphs
--   host_launches      launches with a host API call (cudaGraphLaunch / cuGraphLaunch)
--   device_launches    GPU launch records without a host call (device-side launches, or a
--                      call outside the capture)
--   gpu_traced         launches with GPU records
--   trace_level        node, graph, mixed, or api_only (launch calls, no GPU records)
--   graphs             distinct graph ids (NULL ids not counted)
--   kernels_per_launch mean kernels per node-level launch
--   kernels, kernels_in_graphs, kernels_in_graphs_pct   kernels rows; those with a graph node
--   graph_gpu_ns       GPU time inside graphs: graph-level launch spans (first node start to
--                      last node end) plus node-level graph kernel durations
--   graph_gpu_time_pct graph_gpu_ns over itself plus the kernel time outside graphs
--   launch_to_start_*  launch call entry -> first GPU work of the launch, percentiles
--   api_duration_*     launch call duration, percentiles
--   gpu_duration_*     first GPU work -> last GPU work end of a launch, percentiles
-- per_graph: per graph id and trace level, by total GPU time: launches, kernels (node
--   level), GPU time and launch overhead percentiles.
-- launches: the cuda_graphs rows, with api_duration_ns, in launch order.

-- @query summary
-- @needs cuda_graphs, kernels
WITH g AS (
    SELECT *, api_end_ns - api_start_ns AS api_duration_ns FROM cuda_graphs),
k AS (
    SELECT count(*) AS kernels, count(graph_node_id) AS kernels_in_graphs,
           coalesce(sum(duration_ns), 0) AS kernel_ns,
           coalesce(sum(duration_ns) FILTER (WHERE graph_node_id IS NOT NULL), 0) AS node_kernel_ns
    FROM kernels),
s AS (
    SELECT count(*) AS graph_launches,
           count(*) FILTER (WHERE api_start_ns IS NOT NULL) AS host_launches,
           count(*) FILTER (WHERE api_start_ns IS NULL) AS device_launches,
           count(*) FILTER (WHERE gpu_start_ns IS NOT NULL) AS gpu_traced,
           CASE WHEN bool_or(trace_level = 'graph') AND bool_or(trace_level = 'node') THEN 'mixed'
                WHEN bool_or(trace_level = 'node') THEN 'node'
                WHEN bool_or(trace_level = 'graph') THEN 'graph'
                WHEN count(*) > 0 THEN 'api_only' END AS trace_level,
           count(DISTINCT graph_id) AS graphs,
           avg(n_kernels) FILTER (WHERE trace_level = 'node') AS kernels_per_launch,
           coalesce(sum(gpu_duration_ns) FILTER (WHERE trace_level = 'graph'), 0) AS graph_level_ns,
           quantile_cont(launch_to_start_ns, 0.5) AS launch_to_start_p50_ns,
           quantile_cont(launch_to_start_ns, 0.9) AS launch_to_start_p90_ns,
           quantile_cont(launch_to_start_ns, 0.99) AS launch_to_start_p99_ns,
           max(launch_to_start_ns) AS launch_to_start_max_ns,
           quantile_cont(api_duration_ns, 0.5) AS api_duration_p50_ns,
           quantile_cont(api_duration_ns, 0.99) AS api_duration_p99_ns,
           quantile_cont(gpu_duration_ns, 0.5) AS gpu_duration_p50_ns,
           quantile_cont(gpu_duration_ns, 0.9) AS gpu_duration_p90_ns,
           quantile_cont(gpu_duration_ns, 0.99) AS gpu_duration_p99_ns
    FROM g)
SELECT s.graph_launches, s.host_launches, s.device_launches, s.gpu_traced, s.trace_level,
       s.graphs, s.kernels_per_launch, k.kernels, k.kernels_in_graphs,
       100.0 * k.kernels_in_graphs / nullif(k.kernels, 0) AS kernels_in_graphs_pct,
       (s.graph_level_ns + k.node_kernel_ns)::BIGINT AS graph_gpu_ns,
       100.0 * (s.graph_level_ns + k.node_kernel_ns)
             / nullif(s.graph_level_ns + k.kernel_ns, 0) AS graph_gpu_time_pct,
       s.launch_to_start_p50_ns, s.launch_to_start_p90_ns, s.launch_to_start_p99_ns,
       s.launch_to_start_max_ns, s.api_duration_p50_ns, s.api_duration_p99_ns,
       s.gpu_duration_p50_ns, s.gpu_duration_p90_ns, s.gpu_duration_p99_ns
FROM s, k

-- @query per_graph
-- @needs cuda_graphs
SELECT graph_id, trace_level, count(*) AS launches, sum(n_kernels)::BIGINT AS kernels,
       sum(gpu_duration_ns)::BIGINT AS total_gpu_ns,
       quantile_cont(gpu_duration_ns, 0.5) AS gpu_duration_p50_ns,
       quantile_cont(gpu_duration_ns, 0.99) AS gpu_duration_p99_ns,
       quantile_cont(launch_to_start_ns, 0.5) AS launch_to_start_p50_ns,
       quantile_cont(launch_to_start_ns, 0.99) AS launch_to_start_p99_ns,
       quantile_cont(api_end_ns - api_start_ns, 0.5) AS api_duration_p50_ns
FROM cuda_graphs
GROUP BY graph_id, trace_level
ORDER BY total_gpu_ns DESC NULLS LAST, launches DESC, graph_id
LIMIT $top

-- @query launches
-- @needs cuda_graphs
SELECT pid, tid, global_pid, correlation_id, api_name, api_start_ns, api_end_ns,
       api_end_ns - api_start_ns AS api_duration_ns, gpu_start_ns, gpu_end_ns,
       gpu_duration_ns, launch_to_start_ns, device_id, stream_id, graph_id, graph_exec_id,
       n_kernels::BIGINT AS n_kernels, n_copies::BIGINT AS n_copies, trace_level
FROM cuda_graphs
ORDER BY coalesce(api_start_ns, gpu_start_ns), global_pid, correlation_id
