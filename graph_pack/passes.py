"""Graph rewrites as small named passes: ``apply(graph, params)`` returns ``(graph, params, changed)``.

``simplify`` is what every frontend runs at import: batch norms fold into the convolution (or dense)
before them, the rest become a per-channel multiply and add; dropouts vanish; a conv/dense followed by a
per-channel add becomes conv + ``nn.bias_add``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graph_pack.graph import Graph, GraphBuilder, prune, retype

Params = dict[str, np.ndarray]


def _replace_uses(graph: Graph, old: str, new: str) -> None:
    for node in graph:
        node.inputs = [new if i == old else i for i in node.inputs]
    graph.outputs = [new if o == old else o for o in graph.outputs]


def _rebuild(graph: Graph, params: Params, fn) -> tuple[Graph, Params, bool]:
    """Copy ``graph`` node by node; ``fn(builder, node, rename)`` may emit replacements and return the new
    name of the node's value (or None to copy the node unchanged)."""
    b = GraphBuilder(Graph(), {})
    rename: dict[str, str] = {}
    changed = False
    for node in graph:
        new = fn(b, node, rename)
        if new is not None:
            rename[node.name] = new
            changed = True
            continue
        inputs = [rename.get(i, i) for i in node.inputs]
        if node.op == "input":
            b.input(node.name, node.shape, node.dtype)
        elif node.op == "const":
            b.const(node.name, params[node.name])
        else:
            b.op(node.op, inputs, name=node.name, **node.attrs)
        rename[node.name] = node.name
    g, p = b.finish([rename.get(o, o) for o in graph.outputs])
    g, p = prune(g, p)
    return g, p, changed


def _new_const(b: GraphBuilder, graph: Graph, name: str, value: np.ndarray) -> str:
    """A constant named ``name`` (with a numeric suffix if the old or the new graph already has that name:
    a pass may run again over its own output, and one constant may feed several rewritten nodes)."""
    return b.const(b.unique(name, taken=graph.nodes), value)


def _const(graph: Graph, params: Params, name: str) -> np.ndarray | None:
    node = graph.nodes.get(name)
    return params.get(name) if node is not None and node.op == "const" else None


@dataclass
class FoldBatchNorm:
    """conv2d / conv2d_transpose / dense (+ bias_add) -> batch_norm  becomes  conv' + bias_add'."""

    def apply(self, graph: Graph, params: Params):
        users = graph.consumers()

        def producer_chain(x: str):
            """(weight-bearing node, bias node or None) if ``x`` is such a node read only by the batch norm."""
            node = graph[x]
            bias = None
            if node.op == "nn.bias_add" and len(users[x]) == 1 and _const(graph, params, node.inputs[1]) is not None:
                bias, node = node, graph[node.inputs[0]]
                if len(users[node.name]) != 1:
                    return None
            if node.op in ("nn.conv2d", "nn.conv2d_transpose", "nn.dense") and len(users[node.name]) == 1 \
                    and _const(graph, params, node.inputs[1]) is not None and node.dtype == "float32":
                return node, bias
            return None

        plan: dict[str, tuple] = {}   # conv name -> (bias node or None, batch norm node)
        for node in graph:
            if node.op != "nn.batch_norm" or node.attrs["axis"] != 1:
                continue
            found = producer_chain(node.inputs[0])
            stats = [_const(graph, params, i) for i in node.inputs[1:]]
            if found is not None and all(s is not None for s in stats):
                plan[found[0].name] = (found[1], node)
        folded = {bn.name: conv for conv, (_, bn) in plan.items()}

        def fn(b: GraphBuilder, node, rename):
            if node.name in folded:
                return rename[folded[node.name]]
            if node.name not in plan:
                return None
            bias, bn = plan[node.name]
            gamma, beta, mean, var = (params[i].astype(np.float64) for i in bn.inputs[1:])
            scale = gamma / np.sqrt(var + bn.attrs["epsilon"])
            w = params[node.inputs[1]].astype(np.float64)
            shape = [1] * w.ndim
            shape[1 if node.op == "nn.conv2d_transpose" else 0] = -1  # the output-channel axis
            old_bias = params[bias.inputs[1]].astype(np.float64) if bias is not None else 0.0
            w_name = _new_const(b, graph, f"{node.name}.weight_bn",
                                (w * scale.reshape(shape)).astype(np.float32))
            b_name = _new_const(b, graph, f"{node.name}.bias_bn",
                                ((old_bias - mean) * scale + beta).astype(np.float32))
            y = b.op(node.op, [rename[node.inputs[0]], w_name], name=node.name, **node.attrs)
            return b.op("nn.bias_add", [y, b_name], name=bn.name, axis=1)

        return _rebuild(graph, params, fn)


@dataclass
class LowerBatchNorm:
    """A batch norm nothing could absorb becomes ``multiply`` and ``add`` by (C, 1, 1) constants."""

    def apply(self, graph: Graph, params: Params):
        def fn(b: GraphBuilder, node, rename):
            if node.op != "nn.batch_norm":
                return None
            gamma, beta, mean, var = (params[i].astype(np.float64) for i in node.inputs[1:])
            scale = gamma / np.sqrt(var + node.attrs["epsilon"])
            rank = len(node.shape)
            shape = (-1,) + (1,) * (rank - 1 - node.attrs["axis"] % rank)   # axis may count from the end
            s = _new_const(b, graph, f"{node.name}.scale", scale.astype(np.float32).reshape(shape))
            t = _new_const(b, graph, f"{node.name}.shift",
                           (beta - mean * scale).astype(np.float32).reshape(shape))
            y = b.op("multiply", [rename[node.inputs[0]], s], name=f"{node.name}_mul")
            return b.op("add", [y, t], name=f"{node.name}_add")
        return _rebuild(graph, params, fn)


@dataclass
class RemoveIdentities:
    """nn.dropout (inference) and casts to the same dtype disappear."""

    def apply(self, graph: Graph, params: Params):
        def fn(b: GraphBuilder, node, rename):
            if node.op == "nn.dropout" or (node.op == "cast" and graph[node.inputs[0]].dtype == node.dtype):
                return rename[node.inputs[0]]
            return None
        return _rebuild(graph, params, fn)


@dataclass
class BiasAddFromAdd:
    """conv2d / dense followed by ``add`` of a per-channel constant becomes ``nn.bias_add`` (what quantize
    and graph_pack look for)."""

    def apply(self, graph: Graph, params: Params):
        def fn(b: GraphBuilder, node, rename):
            if node.op != "add":
                return None
            x, c = node.inputs
            const = _const(graph, params, c)
            src = graph[x]
            if const is None or src.op not in ("nn.conv2d", "nn.conv2d_transpose", "nn.dense"):
                return None
            channels = node.shape[1]
            want = (channels,) + (1,) * (len(node.shape) - 2)
            if const.shape not in (want, (1, *want)) or node.shape != src.shape:
                return None
            bias = _new_const(b, graph, f"{c}.bias", const.reshape(channels))
            return b.op("nn.bias_add", [rename[x], bias], name=node.name, axis=1)
        return _rebuild(graph, params, fn)


def run_passes(graph: Graph, params: Params, passes: list, max_rounds: int = 10) -> tuple[Graph, Params]:
    """Apply ``passes`` in turn until none changes the graph."""
    for _ in range(max_rounds):
        any_change = False
        for p in passes:
            graph, params, changed = p.apply(graph, params)
            any_change |= changed
        if not any_change:
            break
    return retype(graph), params


def simplify(graph: Graph, params: Params) -> tuple[Graph, Params]:
    """The import-time clean-up every frontend runs."""
    graph, params = run_passes(graph, params, [RemoveIdentities(), BiasAddFromAdd(), FoldBatchNorm()])
    return run_passes(graph, params, [LowerBatchNorm()])
