-- Transfers: memcpy/memset bandwidth, pageable vs pinned, the host link, same-direction
-- contention (checks E1 of the method: is the PCIe transfer layer the bottleneck?).
--
-- Inputs:  memcpys, memsets, devices.
-- Params:  $large_bytes  copies of at least this size count as "large" (the achieved
--                        bandwidth against the link is the p90 of large copies when any).
--          $link_*       per (device, direction) link figures resolved in link.py:
--                        device ids, directions, GB/s, sources, notes (parallel lists).
--          $copy_latency_ns, $pageable_latency_ns, $managed_latency_ns, $pageable_link_pct,
--          $managed_link_pct: the expected-time model (Settings); $margin_pct: how far
--          beyond a physical limit a copy is suspect; $low_pct: below this share of its
--          expected speed a copy is slow.
-- Units:   bytes; ns; bandwidth in GB/s = bytes / ns (1e9 bytes/s); *_pct in percent.
--
-- _ops (temporary table _transfers_ops, one row per memcpy or memset):
--   op (memcpy|memset), start_ns, end_ns, duration_ns, device_id, pid, global_pid,
--   context_id, stream_id, correlation_id, bytes, copy_kind (memset for memsets),
--   copy_kind_label, src_kind, dst_kind, is_pageable, is_uvm (UVM_* migration),
--   copy_count, operation (nsys label, e.g. "[CUDA memcpy Host-to-Device]"),
--   suspect (faster_than_link, faster_than_memory, else NULL: faster than physically
--   possible, so suspect data, left out of every bandwidth and contention figure),
--   expected_ns (what was possible: latency + bytes / bandwidth of the link for its
--   direction and memory kind, pinned, pageable or managed; NULL without a link figure),
--   bandwidth_gbps (NULL for zero duration and suspect rows), direction (HtoD|DtoH for explicit host
--   copies, else NULL), host_memory (pinned|pageable|other, host copies only),
--   overlapped_ns (time during which another copy of the same direction ran, on any
--   stream, process or device: a shared host link), overlap_fraction (overlapped_ns /
--   duration_ns, 0..1).
--   Overlap uses a sweep: +1 at each start, -1 at each end, the running sum is the number
--   of copies in flight; the cumulative length of stretches with >= 2 in flight, read at a
--   copy's end minus at its start, is its overlapped time. O(n log n); copies that overlap
--   no other (found with one window pass in start order) skip the sweep.
-- by_kind: per (op, copy_kind, src_kind, dst_kind): copies, total_bytes, total_time_ns,
--   zero_duration, mean/median/p10/p90 per-copy GB/s, aggregate_gbps (sum bytes / sum ns).
-- mem_time: nsys stats cuda_gpu_mem_time_sum: per operation label, time_pct,
--   total_time_ns, copies, avg_ns, med_ns, min_ns, max_ns, stddev_ns (sample).
-- host: per (device, direction) of explicit host copies: size and bandwidth figures,
--   pinned vs pageable, expected_pct (sum of expected_ns over sum of duration_ns: 100 is
--   as fast as the model says is possible), pinned_expected_pct (the same with every copy
--   modelled as pinned: what pinning would give), slow_copies (below $low_pct of it),
--   suspect_copies, link_gbps/link_source/link_note, achieved_pct_of_link (p90 of
--   large copies, else of all copies, over the link), aggregate_pct_of_link.
-- contention: per direction and 'all': copy_time_ns, overlapped_ns, contention_share_pct,
--   median GB/s of copies overlapped for more than half their duration vs of copies
--   never overlapped, processes and devices involved.
-- totals: counts, bytes and times of all copies; the unified-memory migrations (copy kinds
--   UVM_*: uvm_copies, uvm_bytes, uvm_time_ns ns, uvm_htod_bytes, uvm_dtoh_bytes) and the
--   explicit copies from or to managed memory (managed_copies, prefetches included).
-- page_faults (over the um_page_faults view; no rows when the export holds none): per
--   process, cpu_faults (host accesses to managed pages not resident on the host),
--   gpu_faults (faults raised by kernels: the sum of each group's numberOfPageFaults),
--   gpu_fault_groups (records: the faults of one page handled together), gpu_fault_time_ns
--   (the union, per GPU, of the groups' handling intervals, summed over the GPUs: ns the
--   GPU spent resolving faults), devices (GPUs that faulted), first_ns / last_ns (the
--   first and last fault, ns on the trace timeline).

-- @query _ops
-- @needs devices, memcpys, memsets
CREATE OR REPLACE TEMP TABLE _transfers_ops AS
WITH ops AS (
    SELECT 'memcpy' AS op, start_ns, end_ns, duration_ns, device_id, pid, global_pid,
           context_id, stream_id, correlation_id, bytes, copy_kind, copy_kind_label,
           src_kind, dst_kind, is_pageable, starts_with(copy_kind, 'UVM_') AS is_uvm,
           copy_count, '[CUDA memcpy ' || copy_kind_label || ']' AS operation
    FROM memcpys
    UNION ALL
    SELECT 'memset', start_ns, end_ns, duration_ns, device_id, pid, global_pid, context_id,
           stream_id, correlation_id, bytes, 'memset', 'Memset', NULL, mem_kind, false, false,
           1, '[CUDA memset]'
    FROM memsets),
links AS (
    SELECT unnest($link_device_ids::BIGINT[]) AS device_id,
           unnest($link_directions::VARCHAR[]) AS link_direction,
           unnest($link_gbps::DOUBLE[]) AS link_gbps,
           unnest($link_sources::VARCHAR[]) AS link_source),
d AS (
    SELECT *,
           CASE WHEN op = 'memcpy' AND copy_kind IN ('HtoD', 'HtoA') THEN 'HtoD'
                WHEN op = 'memcpy' AND copy_kind IN ('DtoH', 'AtoH') THEN 'DtoH' END AS direction,
           CASE WHEN copy_kind IN ('HtoD', 'HtoA', 'UVM_HtoD') THEN 'HtoD'
                WHEN copy_kind IN ('DtoH', 'AtoH', 'UVM_DtoH') THEN 'DtoH' END AS link_direction
    FROM ops),
m AS (
    SELECT d.*, l.link_gbps, l.link_source,
           dev.memory_bandwidth_bytes_per_s / 1e9 AS memory_gbps, dev.l2_cache_bytes,
           CASE WHEN duration_ns > 0 THEN bytes / duration_ns END AS raw_gbps
    FROM d
    LEFT JOIN links l ON l.device_id = d.device_id AND l.link_direction = d.link_direction
    LEFT JOIN (SELECT device_id, any_value(memory_bandwidth_bytes_per_s)
                   AS memory_bandwidth_bytes_per_s, max(l2_cache_bytes) AS l2_cache_bytes
               FROM devices GROUP BY device_id) dev ON dev.device_id = d.device_id),
x AS (
    SELECT * EXCLUDE (raw_gbps, suspect, l2_cache_bytes),
           CASE WHEN suspect IS NULL THEN raw_gbps END AS bandwidth_gbps, suspect,
           CASE WHEN link_gbps > 0 AND link_direction IS NOT NULL THEN
               CASE WHEN is_uvm THEN $managed_latency_ns
                                     + bytes / (link_gbps * $managed_link_pct / 100.0)
                    WHEN is_pageable THEN $pageable_latency_ns
                                     + bytes / (link_gbps * $pageable_link_pct / 100.0)
                    ELSE $copy_latency_ns + bytes / link_gbps END END AS expected_ns,
           CASE WHEN link_gbps > 0 AND link_direction IS NOT NULL
                THEN $copy_latency_ns + bytes / link_gbps END AS pinned_expected_ns
    FROM (SELECT *,
                 -- faster than physically possible: a host copy beyond its link (a link
                 -- from the platform table may be twice as wide: x8 assumed for laptops),
                 -- a memset or device copy beyond the GPU's memory (DRAM bandwidth bounds
                 -- only what does not fit in L2: an L2-resident memset runs faster); judged
                 -- on copies of at least $large_bytes, whose time no timestamp granularity
                 -- explains
                 CASE WHEN bytes >= $large_bytes AND raw_gbps IS NOT NULL
                       AND link_direction IS NOT NULL AND link_gbps > 0
                       AND raw_gbps > link_gbps * (CASE WHEN link_source = 'default' THEN 2
                                                        ELSE 1 END)
                                      * (1 + $margin_pct / 100.0) THEN 'faster_than_link'
                      WHEN bytes >= $large_bytes AND raw_gbps IS NOT NULL
                       AND copy_kind IN ('memset', 'DtoD') AND memory_gbps > 0
                       AND NOT coalesce(bytes <= l2_cache_bytes, false)
                       AND raw_gbps > memory_gbps * (1 + $margin_pct / 100.0)
                      THEN 'faster_than_memory' END AS suspect
          FROM m)),
w AS (
    -- in start order, a copy shares the link if it starts before an earlier one ended or
    -- ends after the next one started; only those enter the sweep (often none do)
    SELECT direction, start_ns, end_ns,
           max(end_ns) OVER (PARTITION BY direction ORDER BY start_ns, end_ns
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS end_before,
           lead(start_ns) OVER (PARTITION BY direction ORDER BY start_ns, end_ns) AS next_start
    FROM x WHERE direction IS NOT NULL AND end_ns >= start_ns AND suspect IS NULL),
shared AS (SELECT * FROM w WHERE start_ns < end_before OR end_ns > next_start),
ev AS (
    SELECT direction, start_ns AS t, 1 AS d FROM shared
    UNION ALL
    SELECT direction, end_ns, -1 FROM shared),
pts AS (SELECT direction, t, sum(d) AS d FROM ev GROUP BY direction, t),
seg AS (
    SELECT direction, t,
           sum(d) OVER (PARTITION BY direction ORDER BY t ROWS UNBOUNDED PRECEDING) AS in_flight,
           lead(t) OVER (PARTITION BY direction ORDER BY t) - t AS len
    FROM pts),
cum AS (
    SELECT direction, t,
           coalesce(sum(CASE WHEN in_flight >= 2 THEN len ELSE 0 END)
                    OVER (PARTITION BY direction ORDER BY t
                          ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)::BIGINT AS before_ns
    FROM seg),
o AS (
    SELECT x.*,
           CASE WHEN x.direction IS NOT NULL AND x.end_ns >= x.start_ns
                THEN coalesce(ce.before_ns - cs.before_ns, 0) END AS overlapped_ns
    FROM x
    LEFT JOIN cum cs ON cs.direction = x.direction AND cs.t = x.start_ns
    LEFT JOIN cum ce ON ce.direction = x.direction AND ce.t = x.end_ns)
SELECT *,
       CASE WHEN direction IS NULL THEN NULL
            WHEN is_pageable THEN 'pageable'
            WHEN 'pinned' IN (src_kind, dst_kind) THEN 'pinned' ELSE 'other' END AS host_memory,
       overlapped_ns / nullif(duration_ns, 0) AS overlap_fraction
FROM o

-- @query totals
-- @needs _transfers_ops
SELECT count(*) FILTER (WHERE op = 'memcpy') AS copies,
       count(*) FILTER (WHERE op = 'memset') AS memsets,
       coalesce(sum(bytes), 0)::BIGINT AS total_bytes,
       coalesce(sum(duration_ns), 0)::BIGINT AS total_time_ns,
       count(*) FILTER (WHERE duration_ns = 0) AS zero_duration_copies,
       count(*) FILTER (WHERE suspect IS NOT NULL) AS suspect_copies,
       count(*) FILTER (WHERE suspect = 'faster_than_link') AS faster_than_link,
       count(*) FILTER (WHERE suspect = 'faster_than_memory') AS faster_than_memory,
       count(*) FILTER (WHERE direction IS NOT NULL) AS host_copies,
       count(*) FILTER (WHERE is_uvm) AS uvm_copies,
       coalesce(sum(bytes) FILTER (WHERE is_uvm), 0)::BIGINT AS uvm_bytes,
       coalesce(sum(duration_ns) FILTER (WHERE is_uvm), 0)::BIGINT AS uvm_time_ns,
       coalesce(sum(bytes) FILTER (WHERE copy_kind = 'UVM_HtoD'), 0)::BIGINT AS uvm_htod_bytes,
       coalesce(sum(bytes) FILTER (WHERE copy_kind = 'UVM_DtoH'), 0)::BIGINT AS uvm_dtoh_bytes,
       count(*) FILTER (WHERE op = 'memcpy' AND NOT is_uvm
                        AND (src_kind = 'managed' OR dst_kind = 'managed')) AS managed_copies,
       count(*) FILTER (WHERE is_pageable) AS pageable_copies,
       coalesce(sum(bytes) FILTER (WHERE is_pageable), 0)::BIGINT AS pageable_bytes,
       100.0 * sum(duration_ns) FILTER (WHERE host_memory = 'pageable')
             / nullif(sum(duration_ns) FILTER (WHERE direction IS NOT NULL), 0) AS pageable_time_pct
FROM _transfers_ops

-- @query by_kind
-- @needs _transfers_ops
SELECT op, copy_kind, src_kind, dst_kind, is_pageable, is_uvm,
       count(*) AS copies, sum(bytes)::BIGINT AS total_bytes,
       sum(duration_ns)::BIGINT AS total_time_ns,
       count(*) FILTER (WHERE duration_ns = 0) AS zero_duration,
       avg(bandwidth_gbps) AS mean_gbps,
       quantile_cont(bandwidth_gbps, 0.5) AS median_gbps,
       quantile_cont(bandwidth_gbps, 0.1) AS p10_gbps,
       quantile_cont(bandwidth_gbps, 0.9) AS p90_gbps,
       sum(bytes) FILTER (WHERE bandwidth_gbps IS NOT NULL)
           / nullif(sum(duration_ns) FILTER (WHERE bandwidth_gbps IS NOT NULL), 0) AS aggregate_gbps
FROM _transfers_ops
GROUP BY op, copy_kind, src_kind, dst_kind, is_pageable, is_uvm
ORDER BY is_uvm, total_time_ns DESC, copy_kind, src_kind, dst_kind

-- @query mem_time
-- @needs _transfers_ops
WITH t AS (
    SELECT operation, sum(duration_ns)::BIGINT AS total_time_ns, count(*) AS copies,
           avg(duration_ns) AS avg_ns, quantile_cont(duration_ns, 0.5) AS med_ns,
           min(duration_ns) AS min_ns, max(duration_ns) AS max_ns,
           stddev_samp(duration_ns) AS stddev_ns
    FROM _transfers_ops GROUP BY operation)
SELECT operation, 100.0 * total_time_ns / nullif(sum(total_time_ns) OVER (), 0) AS time_pct,
       total_time_ns, copies, avg_ns, med_ns, min_ns, max_ns, stddev_ns
FROM t ORDER BY total_time_ns DESC, operation

-- @query devices
-- @needs devices, memcpys, memsets
WITH ids AS (
    SELECT device_id FROM devices
    UNION SELECT device_id FROM memcpys WHERE device_id IS NOT NULL
    UNION SELECT device_id FROM memsets WHERE device_id IS NOT NULL)
SELECT i.device_id, d.name, d.chip_name, d.compute_capability, d.is_discrete, d.pcie_generation,
       d.pcie_width
FROM ids i LEFT JOIN devices d USING (device_id)
ORDER BY i.device_id

-- @query host
-- @needs _transfers_ops
WITH links AS (
    SELECT unnest($link_device_ids::BIGINT[]) AS device_id,
           unnest($link_directions::VARCHAR[]) AS direction,
           unnest($link_gbps::DOUBLE[]) AS link_gbps,
           unnest($link_sources::VARCHAR[]) AS link_source,
           unnest($link_notes::VARCHAR[]) AS link_note),
s AS (
    SELECT device_id, direction, count(*) AS copies, sum(bytes)::BIGINT AS total_bytes,
           sum(duration_ns)::BIGINT AS total_time_ns,
           quantile_cont(bytes, 0.5) AS median_bytes,
           quantile_cont(bandwidth_gbps, 0.5) AS median_gbps,
           quantile_cont(bandwidth_gbps, 0.9) AS p90_gbps,
           count(*) FILTER (WHERE bytes >= $large_bytes) AS large_copies,
           quantile_cont(bandwidth_gbps, 0.9) FILTER (WHERE bytes >= $large_bytes) AS p90_large_gbps,
           sum(bytes) FILTER (WHERE bandwidth_gbps IS NOT NULL)
               / nullif(sum(duration_ns) FILTER (WHERE bandwidth_gbps IS NOT NULL), 0) AS aggregate_gbps,
           100.0 * sum(expected_ns) FILTER (WHERE bandwidth_gbps IS NOT NULL)
               / nullif(sum(duration_ns) FILTER (WHERE bandwidth_gbps IS NOT NULL
                                                  AND expected_ns IS NOT NULL), 0)
               AS expected_pct,
           100.0 * sum(pinned_expected_ns) FILTER (WHERE bandwidth_gbps IS NOT NULL)
               / nullif(sum(duration_ns) FILTER (WHERE bandwidth_gbps IS NOT NULL
                                                  AND pinned_expected_ns IS NOT NULL), 0)
               AS pinned_expected_pct,
           count(*) FILTER (WHERE bandwidth_gbps IS NOT NULL
                            AND 100.0 * expected_ns < $low_pct * duration_ns) AS slow_copies,
           count(*) FILTER (WHERE suspect IS NOT NULL) AS suspect_copies,
           count(*) FILTER (WHERE host_memory = 'pinned') AS pinned_copies,
           count(*) FILTER (WHERE host_memory = 'pageable') AS pageable_copies,
           quantile_cont(bandwidth_gbps, 0.5) FILTER (WHERE host_memory = 'pinned') AS pinned_median_gbps,
           quantile_cont(bandwidth_gbps, 0.5) FILTER (WHERE host_memory = 'pageable') AS pageable_median_gbps
    FROM _transfers_ops WHERE direction IS NOT NULL
    GROUP BY device_id, direction)
SELECT s.*, 100.0 * pageable_median_gbps / nullif(pinned_median_gbps, 0) AS pageable_vs_pinned_pct,
       l.link_gbps, l.link_source, l.link_note,
       CASE WHEN large_copies > 0 THEN 'p90_large' ELSE 'p90_all' END AS achieved_basis,
       100.0 * coalesce(p90_large_gbps, p90_gbps) / nullif(l.link_gbps, 0) AS achieved_pct_of_link,
       100.0 * aggregate_gbps / nullif(l.link_gbps, 0) AS aggregate_pct_of_link
FROM s LEFT JOIN links l USING (device_id, direction)
ORDER BY s.device_id, s.direction DESC

-- @query contention
-- @needs _transfers_ops
SELECT coalesce(direction, 'all') AS direction, count(*) AS copies,
       count(*) FILTER (WHERE overlapped_ns > 0) AS overlapped_copies,
       sum(duration_ns)::BIGINT AS copy_time_ns, sum(overlapped_ns)::BIGINT AS overlapped_ns,
       100.0 * sum(overlapped_ns) / nullif(sum(duration_ns), 0) AS contention_share_pct,
       quantile_cont(bandwidth_gbps, 0.5) FILTER (WHERE overlap_fraction > 0.5) AS overlapped_median_gbps,
       quantile_cont(bandwidth_gbps, 0.5) FILTER (WHERE overlapped_ns = 0) AS alone_median_gbps,
       count(DISTINCT global_pid) AS processes, count(DISTINCT device_id) AS devices
FROM _transfers_ops WHERE direction IS NOT NULL
GROUP BY GROUPING SETS ((direction), ())
ORDER BY grouping(direction), direction DESC

-- @query copies
-- @needs _transfers_ops
SELECT op, operation, start_ns, end_ns, duration_ns, device_id, pid, global_pid, context_id,
       stream_id, correlation_id, bytes, copy_kind, src_kind, dst_kind, is_pageable, is_uvm,
       copy_count, bandwidth_gbps, direction, host_memory, overlapped_ns, overlap_fraction,
       expected_ns, suspect
FROM _transfers_ops
ORDER BY start_ns, device_id, stream_id

-- @query page_faults
-- @needs um_page_faults
WITH g AS (
    SELECT global_pid, device_id, start_ns, end_ns FROM um_page_faults
    WHERE side = 'gpu' AND start_ns IS NOT NULL AND end_ns IS NOT NULL),
-- the union of a process's fault groups per GPU: an island starts at a group that begins
-- after every earlier group (in start order) has ended
ordered AS (
    SELECT *, max(end_ns) OVER (PARTITION BY global_pid, device_id ORDER BY start_ns, end_ns
                                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM g),
islands AS (
    SELECT *, sum(CASE WHEN prev_end IS NULL OR start_ns > prev_end THEN 1 ELSE 0 END)
                  OVER (PARTITION BY global_pid, device_id ORDER BY start_ns, end_ns
                        ROWS UNBOUNDED PRECEDING) AS island
    FROM ordered),
busy AS (
    SELECT global_pid, sum(len)::BIGINT AS gpu_fault_time_ns
    FROM (SELECT global_pid, max(end_ns) - min(start_ns) AS len
          FROM islands GROUP BY global_pid, device_id, island)
    GROUP BY global_pid),
counts AS (
    SELECT global_pid, any_value(pid) AS pid,
           coalesce(sum(faults) FILTER (WHERE side = 'cpu'), 0)::BIGINT AS cpu_faults,
           coalesce(sum(faults) FILTER (WHERE side = 'gpu'), 0)::BIGINT AS gpu_faults,
           count(*) FILTER (WHERE side = 'gpu') AS gpu_fault_groups,
           count(DISTINCT device_id) AS devices, min(start_ns) AS first_ns,
           max(coalesce(end_ns, start_ns)) AS last_ns
    FROM um_page_faults GROUP BY global_pid)
SELECT c.pid, c.global_pid, c.cpu_faults, c.gpu_faults, c.gpu_fault_groups,
       coalesce(b.gpu_fault_time_ns, 0)::BIGINT AS gpu_fault_time_ns, c.devices, c.first_ns,
       c.last_ns
FROM counts c LEFT JOIN busy b USING (global_pid)
ORDER BY c.cpu_faults + c.gpu_faults DESC, c.pid
