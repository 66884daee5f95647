"""A network's host operators as auto-scheduler tasks: each float32 anchor node (conv2d of any groups, dense,
pooling, softmax) with the elementwise nodes that alone read it after it (bias add, relu, clip, residual add,
multiply) as one fused ComputeDag, every other elementwise node as its own, deduplicated by workload and weighted
by how often the network runs it. Reshape-like nodes (batch_flatten, reshape, dropout) compute nothing.

    tasks, skipped = extract_auto_tasks(graph)
    for task in tasks: result = auto_schedule(task.dag, n_trial=64)

This is the graph side of ``vta tune --scheduler auto`` (issue 43); tuning whole networks through the task
scheduler and applying the schedules in ``build`` are not wired yet.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from graph_pack.graph import Graph, Node
from graph_pack.opdefs import OPS, pair, quad
from host import ops
from host.loop_ir import ComputeDag

FREE = ("nn.batch_flatten", "reshape", "nn.dropout")
ANCHORS = ("nn.conv2d", "nn.dense", "nn.max_pool2d", "nn.avg_pool2d", "nn.global_avg_pool2d", "nn.softmax")
UNARY = {"nn.relu": lambda a: ("relu",), "sigmoid": lambda a: ("sigmoid",), "tanh": lambda a: ("tanh",),
         "clip": lambda a: ("clip", a["a_min"], a["a_max"])}
BINARY = {"add": "add", "multiply": "mul", "nn.bias_add": "add"}


@dataclass
class AutoTask:
    dag: ComputeDag
    nodes: tuple[str, ...]      # the graph nodes it computes, anchor first (its first occurrence)
    inputs: tuple[str, ...]     # the graph nodes feeding dag.inputs, in order
    occurrences: list[tuple[tuple[str, ...], tuple[str, ...]]] = field(default_factory=list)   # (nodes, inputs)

    @property
    def weight(self) -> int:
        """How many times the network runs this workload."""
        return len(self.occurrences)


def _attrs(node: Node) -> dict:
    return {**OPS[node.op].defaults, **node.attrs}


def _consumer(graph: Graph, users: dict, node: Node, value: str) -> tuple[tuple, str | None, Node] | None:
    """The elementwise op (and its other input) of the only reader of ``value``, when it can be fused."""
    readers = users[value]
    if len(readers) != 1 or readers[0] == "<output>":
        return None
    nxt = graph[readers[0]]
    if nxt.dtype != "float32" or nxt.shape != graph[value].shape:
        return None
    if nxt.op in UNARY:
        return UNARY[nxt.op](_attrs(nxt)), None, nxt
    if nxt.op in BINARY and len(nxt.inputs) == 2:
        other = nxt.inputs[1] if nxt.inputs[0] == value else nxt.inputs[0]
        if other == value:
            return None
        oshape = graph[other].shape
        if nxt.op == "nn.bias_add":
            if _attrs(nxt)["axis"] % len(nxt.shape) != 1 or nxt.inputs[0] != value:
                return None
            return (BINARY[nxt.op], "channel"), other, nxt
        if oshape == nxt.shape:
            return (BINARY[nxt.op], "full"), other, nxt
    return None


def _anchor_dag(graph: Graph, node: Node, consumers: list[tuple]) -> ComputeDag | None:
    a = _attrs(node)
    shapes = [graph[i].shape for i in node.inputs]
    if node.op == "nn.conv2d":
        if a.get("data_layout", "NCHW") != "NCHW" or a.get("kernel_layout", "OIHW") != "OIHW":
            return None
        return ops.conv2d(shapes[0], shapes[1], pair(a["strides"], "strides"), quad(a["padding"], "padding"),
                          pair(a["dilation"], "dilation"), int(a["groups"]), consumers=consumers)
    if node.op == "nn.dense":
        return ops.dense(shapes[0], shapes[1], consumers=consumers)
    if node.op in ("nn.max_pool2d", "nn.avg_pool2d"):
        if a.get("layout", "NCHW") != "NCHW":
            return None
        return ops.pool2d(node.op[3:6], shapes[0], a["pool_size"], a["strides"], a["padding"], a["ceil_mode"],
                          bool(a.get("count_include_pad", False)), consumers=consumers)
    if node.op == "nn.global_avg_pool2d":
        return ops.global_avg_pool2d(shapes[0], consumers=consumers)
    if node.op == "nn.softmax" and not consumers:
        return ops.softmax(shapes[0], int(a["axis"]))
    return None


def extract_auto_tasks(graph: Graph) -> tuple[list[AutoTask], list[str]]:
    """The tasks of ``graph``'s float32 host operators, and the names of the operator nodes none covers."""
    users = graph.consumers()
    covered: set[str] = set()
    tasks: dict[str, AutoTask] = {}
    skipped = []
    for node in graph.ops():
        if node.name in covered or node.op in FREE:
            continue
        if node.dtype != "float32" or any(graph[i].dtype != "float32" for i in node.inputs):
            skipped.append(node.name)
            continue
        task = None
        if node.op in ANCHORS:
            consumers, extra, nodes, value = [], [], [node.name], node.name
            while (found := _consumer(graph, users, node, value)) is not None and node.op != "nn.softmax":
                op, other, nxt = found
                consumers.append(op)
                extra += [other] if other else []
                nodes.append(nxt.name)
                value = nxt.name
            try:
                dag = _anchor_dag(graph, node, consumers)
            except ValueError:
                dag = None
            if dag is not None:
                task = AutoTask(dag, tuple(nodes), (*node.inputs, *extra))
        elif node.op in UNARY:
            task = AutoTask(ops.elementwise(node.shape, [UNARY[node.op](_attrs(node))]), (node.name,),
                            tuple(node.inputs))
        elif node.op in BINARY and len(node.inputs) == 2:
            x, y = (graph[i] for i in node.inputs)
            if node.op == "nn.bias_add" or (x.shape == y.shape == node.shape):
                kind = "channel" if node.op == "nn.bias_add" else "full"
                task = AutoTask(ops.elementwise(node.shape, [(BINARY[node.op], kind)]), (node.name,),
                                tuple(node.inputs))
        if task is None:
            skipped.append(node.name)
            continue
        covered.update(task.nodes)
        tasks.setdefault(task.dag.key, task).occurrences.append((task.nodes, task.inputs))
    return list(tasks.values()), skipped
