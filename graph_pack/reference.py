"""``run_reference``: execute a graph node by node with the numpy reference kernels."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from graph_pack.graph import Graph, GraphError, Node
from graph_pack.kernels import KERNELS


def check_inputs(graph: Graph, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The inputs as arrays of the declared shapes and dtypes (float inputs are converted; others must match)."""
    names = graph.inputs
    unknown = set(inputs) - set(names)
    if unknown:
        raise GraphError(f"unknown input(s) {sorted(unknown)}; the graph's inputs: {names}")
    out = {}
    for name in names:
        if name not in inputs:
            raise GraphError(f"missing input {name!r} of shape {graph[name].shape} {graph[name].dtype}")
        out[name] = check_input(graph, name, inputs[name])
    return out


def check_input(graph: Graph, name: str, value) -> np.ndarray:
    """One input as an array of its declared shape and dtype (a float input is converted; others must match)."""
    node, value = graph[name], np.asarray(value)
    if value.shape != node.shape:
        raise GraphError(f"input {name!r}: expected shape {node.shape}, got {value.shape}")
    if value.dtype != np.dtype(node.dtype):
        if not (np.issubdtype(value.dtype, np.floating) and np.issubdtype(np.dtype(node.dtype), np.floating)):
            raise GraphError(f"input {name!r}: expected dtype {node.dtype}, got {value.dtype}")
        value = value.astype(node.dtype)
    return value


def evaluate(graph: Graph, params: dict[str, np.ndarray], inputs: dict[str, np.ndarray],
             observe: Callable[[str, np.ndarray], None] | None = None,
             kernel_for: Callable[[Node], Callable | None] | None = None) -> dict[str, np.ndarray]:
    """Every node's value is computed in order; ``observe(name, value)`` sees each operator's output.
    Returns the values of the graph's outputs by name. Values are dropped once nothing reads them.
    ``kernel_for(node)``: a kernel bit-identical to the reference's for the node (host.jit's), or None for
    the reference's own."""
    values = dict(check_inputs(graph, inputs))
    remaining = {name: len(users) for name, users in graph.consumers().items()}
    for node in graph:
        if node.op == "input":
            continue
        if node.op == "const":
            if node.name not in params:
                raise GraphError(f"no value for constant {node.name!r} in params")
            values[node.name] = params[node.name]
            continue
        fn = (kernel_for and kernel_for(node)) or KERNELS.get(node.op)
        if fn is None:
            raise GraphError(f"{node.name}: no reference kernel for op {node.op!r}")
        try:
            out = fn(node.attrs, *(values[i] for i in node.inputs))
        except (ValueError, TypeError) as e:
            raise GraphError(f"{node.name} ({node.op}): {e}") from None
        values[node.name] = out
        if observe is not None:
            observe(node.name, out)
        for i in node.inputs:
            remaining[i] -= 1
            if remaining[i] == 0 and graph[i].op != "const":
                values.pop(i, None)
    return {o: values[o] for o in graph.outputs}


def run_reference(graph: Graph, params: dict[str, np.ndarray], inputs: dict[str, np.ndarray]):
    """Run ``graph`` in numpy; the output array (a tuple of arrays when the graph has several outputs)."""
    outs = evaluate(graph, params, inputs)
    values = [outs[o] for o in graph.outputs]
    return values[0] if len(values) == 1 else tuple(values)
