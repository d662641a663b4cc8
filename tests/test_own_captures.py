"""The diagnosis on the project's own H100 captures of planted failure modes
(fixtures/h100, fixtures/README.md): each scenario's verdict and the evidence it rests on."""

from __future__ import annotations

import pytest

import nsysdiag


@pytest.fixture(scope="module")
def diagnosed(labelled):
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = nsysdiag.diagnose(labelled[name], cache=False)
        return cache[name]

    return get


def test_requests_of_varying_size_are_a_workload_tail(diagnosed):
    d = diagnosed("sizes")
    assert d.verdict.layer == "workload", d.verdict.summary
    w = d.analyses["workload"]
    # batch 8-512, 1-12 decode steps: the slow requests launch several times the kernels at
    # no slower a time per kernel, and the extra kernels explain most of their extra latency
    assert w.kernel_ratio > 3 and w.per_kernel_ratio < 1.2
    assert w.kernels_explain >= 0.5 and w.r_kernels > 0.5


def test_model_switching_is_transfer_volume(diagnosed):
    d = diagnosed("switch")
    assert d.verdict.layer == "pcie", d.verdict.summary
    assert "transfer volume" in d.verdict.summary
    w = d.analyses["workload"]
    # a 64 MiB weight set (67.1 MB) on the switching requests, ~0.13 MB on the others
    assert 60e6 < w.slow_copy_bytes - w.median_copy_bytes < 68e6
    # at the link's pinned speed, not slowed: more bytes, not slower copies
    assert w.extra_copy_gbps > 30
    assert any(f.title.startswith("Transfer volume") for f in d.findings)


def test_open_loop_serving_idles_between_requests_without_alarms(diagnosed):
    d = diagnosed("openloop")
    assert d.verdict.layer == "healthy", d.verdict.summary
    idle = d.analyses["gpu_idle"]
    assert idle.top_cause == "between_units"
    assert not [f for f in d.findings if f.severity != "info" and f.check != "A/B"]


def test_a_thread_holding_the_gil_is_cpu(diagnosed):
    d = diagnosed("gil")
    assert d.verdict.layer == "cpu", d.verdict.summary
    assert d.analyses["ranges"].top_cpu_component.value == "cpu_outside_cuda"


def test_a_cold_start_is_set_apart_as_warm_up(diagnosed):
    d = diagnosed("coldstart")
    assert d.verdict.layer == "healthy", d.verdict.summary
    assert d.tail.n_warmup >= 1 and "cuLibraryLoadData" in d.tail.warmup_calls


@pytest.mark.parametrize("name", ["train", "trainnvtx"])
def test_data_loader_stalls_in_training_are_cpu(diagnosed, name):
    d = diagnosed(name)
    assert d.verdict.layer == "cpu", d.verdict.summary
    assert d.analyses["ranges"].top_cpu_component.value == "cpu_outside_cuda"
    if name == "trainnvtx":
        # the iteration range, not one of the thousands of aten:: operator ranges
        assert d.tail.unit == "train_step" and d.tail.n + d.tail.n_warmup == 300


# workload2.py's captures (fixtures/README.md): other models, frameworks and range names
# than workload.py's, at mild doses. What each planted, and what the verdict must name.
WORKLOAD2 = [
    ("tf_clean_0", "healthy", None),
    ("cnn_clean_0", "healthy", None),
    ("cupy_clean_0", "healthy", None),
    # another process streamed pageable copies both ways, but the program's 2 MiB payloads
    # did not slow (P99/P50 1.09): no tail, so no cause to name
    ("tf_pcie_1", "healthy", None),
    ("tf_gil_0.15", "cpu", {"host_stall"}),
    ("tf_gil_0.3", "cpu", {"host_stall"}),
    ("cupy_gil_0.15", "cpu", {"host_stall"}),
    # the stall comes after the step's input copy, before its first kernel launch
    ("cnn_loader_0.08", "cpu", {"host_stall_before_work"}),
    ("cnn_loader_0.25", "cpu", {"host_stall_before_work"}),
    ("cupy_loader_0.15", "cpu", {"host_stall_before_work"}),
    ("tf_queue_0.5", "cpu", {"queueing"}),
    ("cupy_queue_0.6", "cpu", {"queueing"}),
    # the other process was killed at the end, so nsys kept 3 of its CUDA events: its
    # kernels are not in the export, only the waits they caused
    ("cnn_gpu_0.2", "gpu", {"other_gpu_work", "gpu_pending"}),
    # the same mechanism, the other process exiting on its own: its kernels are in the export
    ("tf_gpu_0.15", "gpu", {"other_gpu_work"}),
    ("tf_sizes_1", "workload", {"new_sizes", "more_work"}),
    # the third set: 400 units, milder doses and other programs per mechanism
    ("cnn_queue_0.4", "cpu", {"queueing"}),
    ("tf_queue_0.3", "cpu", {"queueing"}),
    ("cnn_gil_0.1", "cpu", {"host_stall"}),
    ("tf_loader_0.1", "cpu", {"host_stall_before_work"}),
    ("cupy_gpu_0.2", "gpu", {"other_gpu_work"}),
    # the cnn program ignores --mechanism sizes (fixed batches): a clean run
    ("cnn_sizes_1", "healthy", None),
]


@pytest.mark.parametrize("name,layer,mechanisms", WORKLOAD2)
def test_workload2_captures_name_the_planted_layer_and_mechanism(diagnosed, name, layer,
                                                                 mechanisms):
    d = diagnosed(name)
    assert d.verdict.layer == layer, d.verdict.summary
    if mechanisms is None:
        tail_warnings = [f for f in d.findings if f.severity in ("warning", "critical")
                         and f.layer in ("cpu", "gpu", "pcie", "workload")
                         and f.check not in ("C1", "E1")]
        assert not tail_warnings, [f.title for f in tail_warnings]
    else:
        assert d.verdict.mechanism is not None
        assert d.verdict.mechanism.value in mechanisms, d.verdict.summary
