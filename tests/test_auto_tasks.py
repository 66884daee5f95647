"""Every host operator of the zoo's ResNet-18 and MobileNet (float, batch 1, 32 x 32 images to keep it cheap)
becomes an auto-scheduler task (tuning/auto_tasks.py), and each task's kernel, compiled under its default
schedule, computes exactly what graph_pack.kernels computes for the same graph nodes (softmax: to float
tolerance, graph_pack's uses numpy's float32 exp and a pairwise sum)."""

from __future__ import annotations

import numpy as np
import pytest

from graph_pack import kernels as K
from graph_pack import zoo
from graph_pack.opdefs import OPS
from host import compile_schedule, default_schedule
from tuning.auto_tasks import extract_auto_tasks


@pytest.mark.parametrize("model", ["resnet-18", "mobilenet"])
def test_every_host_op_of_the_network_is_an_exact_auto_task(model):
    graph, _ = zoo.get_model(model, batch_size=1, image_shape=(3, 32, 32))
    tasks, skipped = extract_auto_tasks(graph)
    assert skipped == []
    computed = {n for t in tasks for nodes, _ in t.occurrences for n in nodes}
    free = {"nn.batch_flatten", "reshape", "nn.dropout"}
    assert computed == {n.name for n in graph.ops() if n.op not in free}
    rng = np.random.default_rng(0)
    for task in tasks:
        env = {name: rng.standard_normal(graph[name].shape).astype(np.float32) for name in task.inputs}
        for name in task.nodes:
            node = graph[name]
            env[name] = K.KERNELS[node.op]({**OPS[node.op].defaults, **node.attrs}, *[env[i] for i in node.inputs])
        want = env[task.nodes[-1]]
        got = compile_schedule(task.dag, default_schedule(task.dag))(*[env[i] for i in task.inputs])
        if graph[task.nodes[0]].op == "nn.softmax":
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
        else:
            assert np.array_equal(got, want), task.nodes
    assert sum(t.weight for t in tasks) > len(tasks)   # repeated layers are one task, weighted


def test_a_node_no_task_covers_is_reported_not_dropped():
    from graph_pack.graph import GraphBuilder
    b = GraphBuilder()
    x = b.input("data", (1, 4, 3, 3))
    y = b.op("transpose", [x], axes=(0, 2, 3, 1))
    graph, _ = b.finish([y])
    tasks, skipped = extract_auto_tasks(graph)
    assert tasks == [] and skipped == [y]
