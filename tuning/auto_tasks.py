"""A network's host operators as auto-scheduler tasks: each float32 anchor node with the elementwise nodes that
alone read it fused (``graph_pack.host_auto.fused_op``, the rule ``build`` applies too), every other float
elementwise node as its own, deduplicated by workload and weighted by how often the network runs it. Reshape-like
nodes (batch_flatten, reshape, dropout) compute nothing.

    tasks, skipped = extract_auto_tasks(graph)
    for task in tasks: result = auto_schedule(task.dag, n_trial=64)

``tuning.auto_network`` tunes them across the network with the task scheduler (``vta tune --scheduler auto``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from graph_pack.graph import Graph
from graph_pack.host_auto import FREE, fused_op
from host.loop_ir import ComputeDag


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


def extract_auto_tasks(graph: Graph) -> tuple[list[AutoTask], list[str]]:
    """The tasks of ``graph``'s float32 host operators, and the names of the operator nodes none covers."""
    users = graph.consumers()
    order = {name: i for i, name in enumerate(graph.nodes)}
    covered: set[str] = set()
    tasks: dict[str, AutoTask] = {}
    skipped = []
    for node in graph.ops():
        if node.name in covered or node.op in FREE:
            continue
        found = fused_op(graph, node, users,
                         ready=lambda v, at=order[node.name]: graph[v].op in ("input", "const") or order[v] < at)
        if found is None:
            skipped.append(node.name)
            continue
        covered.update(found.nodes)
        task = tasks.setdefault(found.dag.key, AutoTask(found.dag, found.nodes, found.inputs))
        task.occurrences.append((found.nodes, found.inputs))
    return list(tasks.values()), skipped
