"""The graph IR: named nodes in topological order, each with an op, attributes, inputs and an inferred type.

A graph holds structure only; constant values (weights) live beside it in a ``params`` dict keyed by the
name of their ``const`` node, as Relay keeps ``mod`` and ``params`` apart. Op names follow Relay's
(``nn.conv2d``, ``nn.max_pool2d``, ``add`` ...), so VTA's start/stop names work unchanged. Every node has
one output. ``GraphBuilder`` is how frontends, the zoo and passes make graphs: ``op()`` normalises the
attributes and infers the output type at once, so a malformed graph fails where it is built.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from graph_pack import opdefs


class GraphError(ValueError):
    """A malformed graph, an unknown op, or attributes/inputs an op does not accept."""


@dataclass(frozen=True)
class TensorType:
    shape: tuple[int, ...]
    dtype: str

    def __str__(self) -> str:
        return f"{self.shape} {self.dtype}"


@dataclass
class Node:
    name: str
    op: str                   # "input", "const", or an operator such as "nn.conv2d"
    inputs: list[str]
    attrs: dict[str, Any]
    type: TensorType

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self) -> str:
        return self.type.dtype


@dataclass
class Graph:
    nodes: dict[str, Node] = field(default_factory=dict)   # insertion order is a topological order
    outputs: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)     # what passes record (e.g. graph_pack's plan)

    @property
    def inputs(self) -> list[str]:
        return [n.name for n in self.nodes.values() if n.op == "input"]

    def __getitem__(self, name: str) -> Node:
        try:
            return self.nodes[name]
        except KeyError:
            raise GraphError(f"no node named {name!r}") from None

    def __iter__(self):
        return iter(self.nodes.values())

    def __len__(self) -> int:
        return len(self.nodes)

    def ops(self) -> list[Node]:
        """The operator nodes (not inputs or constants), in order."""
        return [n for n in self.nodes.values() if n.op not in ("input", "const")]

    def consumers(self) -> dict[str, list[str]]:
        """For each node, the nodes that read it (graph outputs count as a reader named '<output>')."""
        users: dict[str, list[str]] = {name: [] for name in self.nodes}
        for node in self.nodes.values():
            for i in node.inputs:
                users[i].append(node.name)
        for out in self.outputs:
            users[out].append("<output>")
        return users

    def copy(self) -> Graph:
        return Graph({k: replace(n, inputs=list(n.inputs), attrs=dict(n.attrs)) for k, n in self.nodes.items()},
                     list(self.outputs), dict(self.meta))

    def __str__(self) -> str:
        lines = []
        for n in self.nodes.values():
            if n.op == "input":
                lines.append(f"%{n.name}: input {n.type}")
            elif n.op == "const":
                lines.append(f"%{n.name}: const {n.type}")
            else:
                args = ", ".join(f"%{i}" for i in n.inputs)
                attrs = "".join(f", {k}={_fmt(v)}" for k, v in n.attrs.items() if not k.startswith("_"))
                lines.append(f"%{n.name} = {n.op}({args}{attrs}) : {n.type}")
        lines.append("outputs: " + ", ".join(f"%{o}" for o in self.outputs))
        return "\n".join(lines)


def _fmt(v: Any) -> str:
    return repr(v) if isinstance(v, str) else str(v)


class GraphBuilder:
    """Builds a graph node by node; ``finish`` returns ``(graph, params)``.

    >>> b = GraphBuilder()
    >>> x = b.input("data", (1, 3, 8, 8))
    >>> w = b.const("w", np.zeros((4, 3, 3, 3), np.float32))
    >>> y = b.op("nn.conv2d", [x, w], padding=1)
    >>> graph, params = b.finish([y])
    """

    def __init__(self, graph: Graph | None = None, params: dict[str, np.ndarray] | None = None):
        self.graph = graph if graph is not None else Graph()
        self.params = params if params is not None else {}
        self._counter = 0

    def _fresh(self, hint: str) -> str:
        base = hint.replace("nn.", "").replace(".", "_")
        while True:
            name = f"{base}_{self._counter}"
            self._counter += 1
            if name not in self.graph.nodes:
                return name

    def unique(self, name: str, taken=()) -> str:
        """``name``, or ``name.1``, ``name.2`` ... the first not yet in the graph (nor in ``taken``)."""
        base, i = name, 0
        while name in self.graph.nodes or name in taken:
            i += 1
            name = f"{base}.{i}"
        return name

    def _add(self, node: Node) -> str:
        if node.name in self.graph.nodes:
            raise GraphError(f"duplicate node name {node.name!r}")
        self.graph.nodes[node.name] = node
        return node.name

    def input(self, name: str, shape: Iterable[int], dtype: str = "float32") -> str:
        shape = tuple(int(s) for s in shape)
        if any(s <= 0 for s in shape):
            raise GraphError(f"input {name!r}: every dimension must be positive, got {shape}")
        return self._add(Node(name, "input", [], {}, TensorType(shape, np.dtype(dtype).name)))

    def const(self, name: str | None, value: np.ndarray | float, dtype: str | None = None) -> str:
        value = np.asarray(value, dtype=dtype)
        if value.dtype == np.float64 and dtype is None:
            value = value.astype(np.float32)
        name = name or self._fresh("const")
        self.params[name] = value
        return self._add(Node(name, "const", [], {}, TensorType(tuple(value.shape), value.dtype.name)))

    def op(self, op: str, inputs: list[str], name: str | None = None, **attrs) -> str:
        """Add ``op`` reading ``inputs``; attributes are normalised and the output type inferred now."""
        missing = [i for i in inputs if i not in self.graph.nodes]
        if missing:
            raise GraphError(f"{op}: input(s) {missing} are not nodes of this graph")
        in_types = [self.graph.nodes[i].type for i in inputs]
        attrs, out_type = infer(op, attrs, in_types, name or op)
        return self._add(Node(name or self._fresh(op), op, list(inputs), attrs, out_type))

    def finish(self, outputs: list[str]) -> tuple[Graph, dict[str, np.ndarray]]:
        for o in outputs:
            self.graph[o]
        self.graph.outputs = list(outputs)
        return self.graph, self.params


def infer(op: str, attrs: dict, in_types: list[TensorType], where: str) -> tuple[dict, TensorType]:
    """Normalised attributes and the output type of ``op`` on inputs of ``in_types``."""
    spec = opdefs.OPS.get(op)
    if spec is None:
        raise GraphError(f"{where}: unknown op {op!r}; known ops: {', '.join(sorted(opdefs.OPS))}")
    if spec.arity is not None and len(in_types) not in spec.arity:
        raise GraphError(f"{where}: {op} takes {' or '.join(map(str, spec.arity))} input(s), got {len(in_types)}")
    unknown = set(attrs) - set(spec.defaults)
    if unknown:
        raise GraphError(f"{where}: {op} has no attribute(s) {sorted(unknown)}; allowed: {sorted(spec.defaults)}")
    full = {**spec.defaults, **attrs}
    try:
        full = spec.normalize(full, in_types)
        shape, dtype = spec.infer(full, [t.shape for t in in_types], [t.dtype for t in in_types])
    except (ValueError, TypeError, IndexError) as e:
        raise GraphError(f"{where}: {op}: {e}") from None
    return full, TensorType(tuple(int(s) for s in shape), np.dtype(dtype).name)


def retype(graph: Graph) -> Graph:
    """Re-infer every node's type in order (after a pass changed shapes of inputs or constants)."""
    for node in graph.nodes.values():
        if node.op in ("input", "const"):
            continue
        in_types = [graph.nodes[i].type for i in node.inputs]
        node.attrs, node.type = infer(node.op, node.attrs, in_types, node.name)
    return graph


def topo_check(graph: Graph) -> None:
    """Raise unless every input of every node is defined before it and every output exists."""
    seen: set[str] = set()
    for node in graph.nodes.values():
        for i in node.inputs:
            if i not in seen:
                raise GraphError(f"node {node.name!r} reads {i!r} before it is defined")
        seen.add(node.name)
    for o in graph.outputs:
        if o not in seen:
            raise GraphError(f"graph output {o!r} is not a node")


def prune(graph: Graph, params: dict[str, np.ndarray]) -> tuple[Graph, dict[str, np.ndarray]]:
    """Drop nodes no output depends on (and their params)."""
    live: set[str] = set()
    stack = list(graph.outputs)
    while stack:
        name = stack.pop()
        if name not in live:
            live.add(name)
            stack.extend(graph.nodes[name].inputs)
    out = Graph({k: n for k, n in graph.nodes.items() if k in live}, list(graph.outputs), dict(graph.meta))
    return out, {k: v for k, v in params.items() if k in live}


def find_nodes(graph: Graph, selector: str | Callable[[Node], bool]) -> list[Node]:
    """Operator nodes chosen by op name (``"nn.conv2d"``), node name, or a predicate on the node."""
    if callable(selector):
        return [n for n in graph.ops() if selector(n)]
    by_name = graph.nodes.get(selector)
    if by_name is not None and by_name.op not in ("input", "const"):
        return [by_name]
    return [n for n in graph.ops() if n.op == selector]
