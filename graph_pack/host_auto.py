"""Host operators as the auto-scheduler's fused DAGs (``host.ops``), and their compiled kernels in ``build``.

A float32 anchor node (conv2d of any groups, dense, pooling; softmax and layer norm alone) with the elementwise nodes
that alone read it after it (bias add, relu, clip, sigmoid, tanh, erf, a residual add or multiply) is one
``ComputeDag``; any other float elementwise node is its own. ``tuning.auto_tasks`` makes tuning tasks of them;
``build`` runs a node with a record in the log (``auto_schedules``) as the kernel compiled under the logged schedule,
and erf, which the host otherwise runs slowly in numpy (``compiled_by_default``), under its default schedule, with
or without a log. Ops with a fixed JIT kernel (host.jit) and
no record keep it: on ResNet-18's layers the JIT kernels beat the untuned loop nests (docs/benchmarks.md).

The same rule decides fusion while tuning and at build, so a record's DAG is the one build asks for: a binary
consumer's other input must be computed before the anchor (earlier in the graph's order; at build, by an earlier
step), and a consumer that belongs to an accelerator group is never fused.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from graph_pack.graph import Graph, Node
from graph_pack.opdefs import OPS, pair, quad
from host import ops
from host.knobs import AUTO_VERSION, config_schedule
from host.loop_ir import ComputeDag
from host.schedule import Schedule, default_schedule

if TYPE_CHECKING:
    from graph_pack.schedule_log import LoggedSchedules

FREE = ("nn.batch_flatten", "reshape", "nn.dropout")
ANCHORS = ("nn.conv2d", "nn.dense", "nn.max_pool2d", "nn.avg_pool2d", "nn.global_avg_pool2d", "nn.softmax",
           "nn.layer_norm")
UNARY = {"nn.relu": lambda a: ("relu",), "sigmoid": lambda a: ("sigmoid",), "tanh": lambda a: ("tanh",),
         "clip": lambda a: ("clip", a["a_min"], a["a_max"]), "erf": lambda a: ("erf",)}
BINARY = {"add": "add", "multiply": "mul", "nn.bias_add": "add"}
@dataclass(frozen=True)
class FusedOp:
    dag: ComputeDag
    nodes: tuple[str, ...]      # the graph nodes it computes, anchor first
    inputs: tuple[str, ...]     # the graph values feeding dag.inputs, in order


def attrs_of(node: Node) -> dict:
    return {**OPS[node.op].defaults, **node.attrs}


def _consumer(graph: Graph, users: dict, value: str, ready: Callable[[str], bool], free: Callable[[str], bool]
              ) -> tuple[tuple, str | None, Node] | None:
    """The elementwise op (and its other input) of the only reader of ``value``, when it can be fused."""
    readers = users[value]
    if len(readers) != 1 or readers[0] == "<output>" or not free(readers[0]):
        return None
    nxt = graph[readers[0]]
    if nxt.dtype != "float32" or nxt.shape != graph[value].shape:
        return None
    if nxt.op in UNARY:
        return UNARY[nxt.op](attrs_of(nxt)), None, nxt
    if nxt.op in BINARY and len(nxt.inputs) == 2:
        other = nxt.inputs[1] if nxt.inputs[0] == value else nxt.inputs[0]
        if other == value or graph[other].dtype != "float32" or not ready(other):
            return None
        if nxt.op == "nn.bias_add":
            if attrs_of(nxt)["axis"] % len(nxt.shape) != 1 or nxt.inputs[0] != value or \
                    graph[other].shape != (nxt.shape[1],):
                return None
            return (BINARY[nxt.op], "channel"), other, nxt
        if graph[other].shape == nxt.shape:
            return (BINARY[nxt.op], "full"), other, nxt
    return None


def _anchor_dag(graph: Graph, node: Node, consumers: list[tuple]) -> ComputeDag | None:
    a = attrs_of(node)
    shapes = [graph[i].shape for i in node.inputs]
    if node.op == "nn.conv2d":
        if a.get("data_layout", "NCHW") != "NCHW" or a.get("kernel_layout", "OIHW") != "OIHW" or len(shapes) != 2:
            return None
        return ops.conv2d(shapes[0], shapes[1], pair(a["strides"], "strides"), quad(a["padding"], "padding"),
                          pair(a["dilation"], "dilation"), int(a["groups"]), consumers=consumers)
    if node.op == "nn.dense":
        return ops.dense(shapes[0], shapes[1], consumers=consumers) if len(shapes[0]) == 2 else None
    if node.op in ("nn.max_pool2d", "nn.avg_pool2d"):
        if a.get("layout", "NCHW") != "NCHW":
            return None
        return ops.pool2d(node.op[3:6], shapes[0], a["pool_size"], a["strides"], a["padding"], a["ceil_mode"],
                          bool(a.get("count_include_pad", False)), consumers=consumers)
    if node.op == "nn.global_avg_pool2d":
        return ops.global_avg_pool2d(shapes[0], consumers=consumers)
    if node.op == "nn.softmax" and not consumers:
        return ops.softmax(shapes[0], int(a["axis"]))
    if node.op == "nn.layer_norm" and not consumers and len(shapes) == 3 and shapes[1] == shapes[2] == shapes[0][-1:]:
        return ops.layer_norm(shapes[0], int(a["axis"]), float(a["epsilon"]))
    return None


def _float(graph: Graph, node: Node) -> bool:
    return node.dtype == "float32" and all(graph[i].dtype == "float32" for i in node.inputs)


def fused_op(graph: Graph, node: Node, users: dict[str, list[str]], ready: Callable[[str], bool] = lambda v: True,
             free: Callable[[str], bool] = lambda n: True) -> FusedOp | None:
    """The DAG that computes ``node`` (with the elementwise consumers fused into it), or None when no host op
    definition takes it. ``ready(value)``: whether a fused binary op's other input is computed before ``node``;
    ``free(name)``: whether a consumer may be fused (not an accelerator group's)."""
    if node.op in FREE or not _float(graph, node):
        return None
    if node.op in ANCHORS:
        consumers, extra, nodes, value = [], [], [node.name], node.name
        while node.op not in ("nn.softmax", "nn.layer_norm") and (found := _consumer(graph, users, value, ready, free)) is not None:
            op, other, nxt = found
            consumers.append(op)
            extra += [other] if other else []
            nodes.append(nxt.name)
            value = nxt.name
        try:
            dag = _anchor_dag(graph, node, consumers)
        except ValueError:
            return None
        return None if dag is None else FusedOp(dag, tuple(nodes), (*node.inputs, *extra))
    if node.op in UNARY:
        return FusedOp(ops.elementwise(node.shape, [UNARY[node.op](attrs_of(node))]), (node.name,), tuple(node.inputs))
    if node.op in BINARY and len(node.inputs) == 2:
        x, y = (graph[i] for i in node.inputs)
        if node.op == "nn.bias_add":
            if attrs_of(node)["axis"] % len(node.shape) != 1 or y.shape != (node.shape[1],):
                return None
        elif not x.shape == y.shape == node.shape:
            return None
        kind = "channel" if node.op == "nn.bias_add" else "full"
        return FusedOp(ops.elementwise(node.shape, [(BINARY[node.op], kind)]), (node.name,), tuple(node.inputs))
    return None


# ---- schedules from a tuning log, kernels at build ------------------------------------------------------------

@dataclass
class AutoSchedules:
    """The auto-scheduler's best records of a log for this CPU (``build(..., auto_schedules=it)``); remembers which
    DAGs build asked for and which it found a schedule for."""

    logged: LoggedSchedules
    asked: dict[str, str] = field(default_factory=dict)      # dag key -> short name
    applied: dict[str, Schedule] = field(default_factory=dict)

    def __call__(self, dag: ComputeDag) -> Schedule | None:
        self.asked.setdefault(dag.key, dag.name)
        if dag.key in self.logged.untuned_won:
            self.logged.kept_untuned.add(dag.key)
        if dag.key not in self.applied:
            for config in self.logged.candidates.get(dag.key, []):
                try:
                    self.applied[dag.key] = config_schedule(dag, config)
                    break
                except ValueError:
                    self.logged.refused += 1
            else:
                return None
        self.logged.applied[dag.key] = {}
        return self.applied[dag.key]

    @property
    def records(self) -> int:
        return self.logged.records

    def summary(self) -> str:
        tuned = sum(self.applies(key, s) for key, s in self.applied.items())
        kept = len(self.logged.kept_untuned)
        return (f"auto-scheduled: {tuned} host op(s) from {self.logged.path} (the best of "
                f"{self.logged.records} auto-scheduler record(s) for {self.logged.cfg.model}); "
                + (f"{kept} keep the untuned kernel, faster than every schedule in the same tuning run; " if kept
                   else "") + "host ops without a record keep their default kernels")

    def applies(self, key: str, schedule: Schedule) -> bool:
        """Whether build runs ``schedule`` for the DAG ``key``: every logged schedule that beat the untuned kernel
        does; in a log without the untuned kernel's record (tuned before it was measured) the default loop nest
        does not (it is slower than host.jit's kernels as a rule, docs/benchmarks.md)."""
        return schedule.sketch != "default" or key in self.logged.untuned


def read_auto_schedules(path, cpu) -> AutoSchedules:
    """The auto-scheduler's records of the log at ``path`` made on ``cpu`` (a ``CpuTarget``) with these rules. Every
    host kernel is bit-equal to graph_pack.kernels' reference (softmax and layer norm through host.numerics), so a
    run checked bit for bit (vta run --check) applies them all."""
    from graph_pack.schedule_log import (
        read_schedules,  # it reads build's workload keys: build imports this module
    )
    return AutoSchedules(read_schedules(path, cpu, version=AUTO_VERSION))


class _Kernel:
    """A compiled DAG as a host step's function ``fn(attrs, *arrays)``; one call at a time (the kernel keeps its
    intermediate tensors between calls)."""

    def __init__(self, dag: ComputeDag, schedule: Schedule):
        from host import compile_schedule
        self.kernel = compile_schedule(dag, schedule)
        self.lock = threading.Lock()

    def __call__(self, attrs: dict, *arrays: np.ndarray) -> np.ndarray:
        with self.lock:   # (softmax and layer norm take their input as rows: the same data, reshaped)
            return self.kernel(*(np.asarray(a, np.float32).reshape(t.shape)
                                 for a, t in zip(arrays, self.kernel.dag.inputs, strict=True)))


_KERNELS: dict[tuple[str, str], _Kernel] = {}
_KERNELS_LOCK = threading.Lock()
MAX_CACHED = 256


def kernel(dag: ComputeDag, schedule: Schedule) -> _Kernel:
    """The kernel of ``dag`` under ``schedule``, compiled once per process (the ``MAX_CACHED`` latest kept)."""
    key = (dag.key, schedule.to_json())
    with _KERNELS_LOCK:
        if key not in _KERNELS:
            while len(_KERNELS) >= MAX_CACHED:
                _KERNELS.pop(next(iter(_KERNELS)))
            _KERNELS[key] = _Kernel(dag, schedule)
        return _KERNELS[key]


def compiled_by_default(dag: ComputeDag) -> bool:
    """Whether ``dag`` runs compiled under its default schedule without a record: erf, which numpy lacks
    (graph_pack.kernels calls math.erf per element; compiled, libm's erf on the same doubles: the same bits, 10x
    faster on BERT-base's GELU activation, bench/host_ops.py). Softmax and layer norm run host.jit's row kernels
    without a record (host.jit.get_kernel); other elementwise ops keep numpy's single vectorised pass."""
    return dag.name == "elementwise" and any(op[0] == "erf" for op in dag.attrs["ops"])


def schedule_for(dag: ComputeDag, schedules: AutoSchedules | None) -> Schedule | None:
    """The logged schedule of ``dag`` that beat the untuned kernel in its tuning run (``AutoSchedules.applies``),
    else its default schedule for the ops the host would run in numpy, else None (the op keeps its JIT kernel)."""
    found = schedules(dag) if schedules is not None else None
    if compiled_by_default(dag):
        return found or default_schedule(dag)
    return found if found is not None and schedules.applies(dag.key, found) else None
