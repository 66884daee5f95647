"""The kernel ``build`` runs for a host op that no tuning record gives a schedule: the baseline every tuned schedule
must beat to be applied (issue 43: no tuned result slower than its untuned default in the same timed rounds).

That kernel is not the auto-scheduler's default loop nest nor a template's default config: it is host.jit's fixed
kernel (conv2d with its bias and relu epilogue, dense, pooling), numpy's (softmax, elementwise ops), or the compiled
default nest (erf). Rather than restate build's choice, this module builds a graph of just the op (the auto-scheduler's
fused DAG, or a host template's workload) and takes the host steps ``build`` makes for it (``build.host_steps``):
whatever build runs, the baseline runs.

A tuning run measures this kernel once per task as the trial ``UNTUNED`` (``tuning.cpu``'s runner, the same timing
as every other trial) and logs it (tuner ``untuned``); ``schedule_log.read_schedules`` and ``tuning.load_best`` then
apply a logged schedule only where it was faster than that record, so ``vta run --log`` decides without timing.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from graph_pack.graph import Graph, GraphBuilder
from host.loop_ir import ComputeDag

UNTUNED: dict = {"untuned": 1}   # a record's config (integer knobs, as every record's): the kernel build runs without one
UNTUNED_TUNER = "untuned"              # the tuner field of its records

_UNARY = {"relu": "nn.relu", "sigmoid": "sigmoid", "tanh": "tanh", "erf": "erf", "clip": "clip"}
_BINARY = {("add", "channel"): "nn.bias_add", ("add", "full"): "add", ("mul", "full"): "multiply"}


def is_untuned(config: object) -> bool:
    """Whether a record's config is the untuned baseline's."""
    return config == UNTUNED


class UntunedKernel:
    """``kernel(*arrays)``: the host steps build runs for a one-op graph, on the op's inputs in order."""

    def __init__(self, graph: Graph, inputs: list[str]):
        from graph_pack.build import host_steps
        self.graph, self.inputs = graph, inputs
        self.steps = host_steps(graph)

    @property
    def backends(self) -> list[str]:
        """What runs each step ("jit", "numpy", "auto"): which kernel is the baseline."""
        return [s.backend for s in self.steps]

    def __call__(self, *arrays: np.ndarray) -> np.ndarray:
        values = dict(zip(self.inputs, arrays, strict=True))
        for step in self.steps:
            values[step.output] = step.fn(step.attrs, *(values[i] for i in step.inputs))
        return np.asarray(values[self.graph.outputs[0]])


def _apply(b: GraphBuilder, value: str, op: tuple, other: str | None, channel_axis: int = 1) -> str:
    if op[0] in _UNARY:
        attrs = {"a_min": op[1], "a_max": op[2]} if op[0] == "clip" else {}
        return b.op(_UNARY[op[0]], [value], **attrs)
    name = _BINARY.get(tuple(op[:2]))
    if name is None or other is None:
        raise ValueError(f"no graph op computes the elementwise step {op!r}")
    return b.op(name, [value, other], **({"axis": channel_axis} if name == "nn.bias_add" else {}))


def _chain(b: GraphBuilder, value: str, chain, extra: list[str], channel_axis: int = 1) -> str:
    for op in chain:
        other = extra.pop(0) if op[0] in ("add", "mul") else None
        value = _apply(b, value, tuple(op), other, channel_axis)
    return value


def dag_graph(dag: ComputeDag) -> tuple[Graph, list[str]]:
    """A graph computing ``dag`` with graph ops (its inputs, in ``dag.inputs`` order, are the graph's inputs), as
    build would meet the op in a network; ValueError when no graph op computes it (a producer chain)."""
    w, b = dag.attrs, GraphBuilder()
    names = [b.input(f"in{i}", t.shape) for i, t in enumerate(dag.inputs)]
    if w.get("producers"):
        raise ValueError(f"{dag.name}: fused producers have no graph form (build never fuses them)")
    anchor_inputs = {"conv2d": 2, "dense": 2, "layer_norm": 3}.get(dag.name, 1)
    x, extra = names[:anchor_inputs], names[anchor_inputs:]
    if dag.name == "conv2d":
        y = b.op("nn.conv2d", x, strides=tuple(w["strides"]), padding=tuple(w["padding"]),
                 dilation=tuple(w["dilation"]), groups=w["groups"])
    elif dag.name == "dense":
        y = b.op("nn.dense", x)
    elif dag.name in ("max_pool2d", "avg_pool2d"):
        attrs = {"pool_size": tuple(w["pool_size"]), "strides": tuple(w["strides"]), "padding": tuple(w["padding"]),
                 "ceil_mode": w["ceil_mode"]}
        if dag.name == "avg_pool2d":
            attrs["count_include_pad"] = w["count_include_pad"]
        y = b.op(f"nn.{dag.name}", x, **attrs)
    elif dag.name == "global_avg_pool2d":
        y = b.op("nn.global_avg_pool2d", x)
    elif dag.name == "softmax":
        y = b.op("nn.softmax", x, axis=-1)
    elif dag.name == "layer_norm":
        y = b.op("nn.layer_norm", x, axis=-1, epsilon=w["epsilon"])
    elif dag.name == "elementwise":
        return _finish(b, _chain(b, x[0], w["ops"], extra, w["channel_axis"]), names)
    else:
        raise ValueError(f"{dag.name}: no graph op computes this DAG")
    return _finish(b, _chain(b, y, w.get("consumers", ()), extra), names)


def _finish(b: GraphBuilder, out: str, names: list[str]) -> tuple[Graph, list[str]]:
    graph, _ = b.finish([out])
    return graph, names


def untuned_dag_kernel(dag: ComputeDag) -> UntunedKernel:
    """The kernel build runs for ``dag``'s op without a record (ValueError when no graph op computes it)."""
    graph, names = dag_graph(dag)
    return UntunedKernel(graph, names)


def template_graph(workload: dict) -> tuple[Graph, list[str]]:
    """A graph of a host template's workload (conv2d, depthwise, int8 conv2d, dense; no epilogue: the template's
    trials time the op alone), its inputs ``data`` and ``kernel``."""
    from host.templates import host_template_of
    template = host_template_of(workload["op"]).from_task_workload(workload)
    dtype = "int8" if getattr(template, "integer", False) else "float32"
    b = GraphBuilder()
    x = b.input("data", workload["data_shape"], dtype)
    k = b.input("kernel", workload["kernel_shape"], dtype)
    if len(workload["kernel_shape"]) == 2:
        y = b.op("nn.dense", [x, k])
    else:
        groups = workload["data_shape"][1] if workload["kernel_shape"][1] != workload["data_shape"][1] else 1
        y = b.op("nn.conv2d", [x, k], strides=tuple(workload["strides"]), padding=tuple(workload["padding"]),
                 dilation=tuple(workload["dilation"]), groups=groups,
                 **({"out_dtype": "int32"} if dtype == "int8" else {}))
    graph, _ = b.finish([y])
    return graph, ["data", "kernel"]


def untuned_template_kernel(workload: dict) -> Callable[..., np.ndarray]:
    """The kernel build runs for a host template's workload without a record, called with the template's named
    inputs (``data``, ``kernel``)."""
    graph, names = template_graph(workload)
    kernel = UntunedKernel(graph, names)

    def run(**inputs: np.ndarray) -> np.ndarray:
        return kernel(*(inputs[n] for n in names))

    run.backends = kernel.backends   # type: ignore[attr-defined]
    return run
