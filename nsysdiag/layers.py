"""The layers of the stack a finding or a verdict names, as one enum.

A finding sits in a layer (cpu, gpu, pcie, workload, graph, or info for what is about the
capture or the run itself); a verdict names the layer of the tail's cause, or says there
is none to name (healthy, undetermined, insufficient). Members are strings (``Layer.CPU
== "cpu"``, the same hash), so the JSON form and user code comparing with the names keep
working; code in the package names the members, so a search finds every use.
"""

from __future__ import annotations

import enum


class Layer(str, enum.Enum):
    """A layer of the stack (or a verdict without one)."""

    CPU = "cpu"  #: the host: launching threads, queueing, Python, the OS
    GPU = "gpu"  #: the device: kernels, other work on it
    PCIE = "pcie"  #: host-device transfers over the link
    WORKLOAD = "workload"  #: the work per unit itself (more or bigger work)
    GRAPH = "graph"  #: CUDA Graphs use (findings only)
    INFO = "info"  #: about the capture or the whole run (findings only)
    HEALTHY = "healthy"  #: verdict: the tail is tight, or elevated with no cause corroborated
    UNDETERMINED = "undetermined"  #: verdict: the evidence names no cause
    INSUFFICIENT = "insufficient"  #: verdict: too few units to judge

    def __str__(self) -> str:
        return self.value


#: the layers a latency tail's cause can sit in that a confidence is judged for (a
#: workload verdict is the work itself, judged by its own rule)
CAUSE_LAYERS = (Layer.CPU, Layer.GPU, Layer.PCIE)
#: the layers a finding sits in
FINDING_LAYERS = (Layer.CPU, Layer.GPU, Layer.PCIE, Layer.WORKLOAD, Layer.GRAPH, Layer.INFO)
#: what a verdict names
VERDICT_LAYERS = (Layer.HEALTHY, Layer.CPU, Layer.GPU, Layer.PCIE, Layer.WORKLOAD,
                  Layer.UNDETERMINED, Layer.INSUFFICIENT)
