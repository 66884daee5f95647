"""Multiply-adds of the operators that carry a network's compute (convolutions, dense, matrix products): what the
accelerator's MAC share (``explain``) counts."""

from __future__ import annotations

import math

from graph_pack.graph import Graph, Node

# ops whose multiply-adds the share counts (their MACs are the network's compute; element-wise ops are not)
MAC_OPS = ("nn.conv2d", "nn.conv2d_transpose", "nn.dense", "nn.batch_matmul", "nn.matmul")


def op_macs(graph: Graph, node: Node) -> int:
    """Multiply-adds of a convolution, transposed convolution, dense or matrix product in the unpacked layout."""
    if node.op not in MAC_OPS:
        return 0
    out = math.prod(node.shape)
    weight = graph[node.inputs[1]].shape
    if node.op == "nn.conv2d":   # OIHW, I per group
        return out * math.prod(weight[1:])
    if node.op == "nn.conv2d_transpose":   # IOHW: every input scatters O/groups x KH x KW products
        return math.prod(graph[node.inputs[0]].shape) * math.prod(weight[1:])
    return out * graph[node.inputs[0]].shape[-1]   # dense, matmul: the reduced dimension is the data's last


def graph_macs(graph: Graph) -> dict[str, int]:
    """Each MAC-carrying operator of an unpacked graph and its multiply-adds (graph_pack records them)."""
    return {n.name: op_macs(graph, n) for n in graph.ops() if n.op in MAC_OPS}


MATRIX_OPS = ("nn.dense", "nn.batch_matmul", "nn.matmul")


def matrix_share(graph: Graph) -> float:
    """The share of an unpacked graph's multiply-adds in matrix products (dense layers, attention's products): near 1
    for a transformer or an MLP, a few percent for a CNN (its classifier); 0 for a graph without MACs."""
    macs = {name: (graph[name].op, n) for name, n in graph_macs(graph).items()}
    total = sum(n for _, n in macs.values())
    return sum(n for op, n in macs.values() if op in MATRIX_OPS) / total if total else 0.0
