-- GPU metrics: the sampled DRAM, SM and PCIe metrics (nsys --gpu-metrics-devices), per
-- metric.
--
-- Inputs:  gpu_metrics (one row per sample and metric: metric_name, value).
-- A metric is kept when its lower-cased name holds 'dram', 'vram', 'sm active' or 'pcie'
-- (the memory, SM and link figures that confirm memory-bound phases); the percentile is
-- quantile_cont's (linear between the two nearest ranks). Values keep nsys's units (most
-- are percent of the peak).
-- Outputs:
--   per_metric  one row per metric, by name: metric_name, mean, p99, samples
--   summary     metrics (kept), samples (of them)

-- @query per_metric
-- @needs gpu_metrics
SELECT metric_name, avg(value) AS mean, quantile_cont(value, 0.99) AS p99,
       count(*) AS samples
FROM gpu_metrics
WHERE regexp_matches(lower(metric_name), 'dram|vram|sm active|pcie')
GROUP BY metric_name
ORDER BY metric_name

-- @query summary
-- @needs gpu_metrics
SELECT count(DISTINCT metric_name) AS metrics, count(*) AS samples
FROM gpu_metrics
WHERE regexp_matches(lower(metric_name), 'dram|vram|sm active|pcie')
