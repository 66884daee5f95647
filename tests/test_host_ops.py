"""erf (GELU's) on the host runs as the host compiler's kernel under its default schedule in every build (issue 40
item 3), bit-equal to graph_pack.kernels' (both libm's erf in double, rounded to float32); layer norm and softmax
run compiled too (host.jit, host.row_ops' schedule), and under any schedule a tuning log gives them: every one
bit-equal to graph_pack.kernels' reference, which computes host.numerics' operations in the same order
(tests/test_host_numerics.py states the bounds against float64; bench/host_ops.py has the times)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from extras import needs

from graph_pack import build
from graph_pack.graph import GraphBuilder
from graph_pack.host_auto import AutoSchedules
from graph_pack.reference import run_reference
from graph_pack.schedule_log import LoggedSchedules
from host.sketch import generate_sketches, sample
from host.templates import host

pytestmark = needs("llvmlite")


def _net(shape, offset: float):
    rng = np.random.default_rng(0)
    b = GraphBuilder()
    x = b.input("x", shape, "float32")
    g = b.const("g", rng.standard_normal(shape[-1]).astype(np.float32))
    beta = b.const("beta", rng.standard_normal(shape[-1]).astype(np.float32))
    ln = b.op("nn.layer_norm", [x, g, beta], name="ln", axis=len(shape) - 1, epsilon=1e-5)
    e = b.op("erf", [ln], name="erf")
    s = b.op("nn.softmax", [e], name="sm", axis=-1)
    graph, params = b.finish([ln, e, s])
    return graph, params, (rng.standard_normal(shape) * 2 + offset).astype(np.float32)


@pytest.mark.parametrize(("shape", "offset"), [((2, 16, 64), 0.0), ((1, 17, 32), 20.0), ((4, 768), 5.0)])
def test_erf_layer_norm_and_softmax_run_compiled_bit_exactly(shape, offset):
    graph, params, x = _net(shape, offset)
    mod = build(graph, "pynq", params)
    assert {s.name: s.backend for s in mod.steps} == {"ln": "jit", "erf": "auto", "sm": "jit"}
    mod.run(x=x)
    assert all(np.array_equal(mod.get_output(i), want) for i, want in enumerate(run_reference(graph, params, {"x": x})))


@pytest.mark.parametrize(("shape", "offset"), [((2, 16, 64), 0.0), ((1, 17, 32), 10.0), ((4, 768), 5.0)])
def test_logged_layer_norm_and_softmax_schedules_are_bit_exact_too(shape, offset):
    graph, params, x = _net(shape, offset)

    class Sampled(AutoSchedules):   # a log that gives every DAG a schedule: one sampled from its first sketch
        def __call__(self, dag):
            return sample(dag, generate_sketches(dag)[0], random.Random(0))
    mod = build(graph, "pynq", params, auto_schedules=Sampled(LoggedSchedules("(test)", host())))
    assert {s.name: s.backend for s in mod.steps} == {"ln": "auto", "erf": "auto", "sm": "auto"}
    mod.run(x=x)
    assert all(np.array_equal(mod.get_output(i), want) for i, want in enumerate(run_reference(graph, params, {"x": x})))


def test_cpu_numpy_keeps_numpy_kernels():
    graph, params, x = _net((2, 8, 16), 0.0)
    mod = build(graph, "pynq", params, cpu="numpy")
    assert {s.backend for s in mod.steps} == {"numpy"}
    mod.run(x=x)
    assert all(np.array_equal(mod.get_output(i), want) for i, want in enumerate(run_reference(graph, params, {"x": x})))


@needs("onnx")
def test_bert_tiny_runs_its_erf_compiled_and_matches_the_numpy_reference():
    import onnx_models

    from graph_pack.frontend_onnx import from_onnx
    model = onnx_models.load("bert_tiny")
    feeds = onnx_models.inputs(model)
    graph, params = from_onnx(model)
    mod = build(graph, "pynq", params)
    assert sum(s.backend == "auto" and s.op == "erf" for s in mod.steps) == 2   # GELU's erf in both layers
    mod.run(**feeds)
    assert np.array_equal(mod.get_output(0), run_reference(graph, params, feeds))   # erf and softmax exact


@pytest.mark.parametrize(("m", "k", "units"), [(1, 37, 21), (3, 64, 48)])
def test_dense_of_a_constant_weight_runs_with_the_weight_packed_once_and_bit_exactly(m, k, units):
    rng = np.random.default_rng(1)
    b = GraphBuilder()
    x = b.input("x", (m, k), "float32")
    w = b.const("w", rng.standard_normal((units, k)).astype(np.float32))
    y = b.op("nn.dense", [x, w], name="fc")
    graph, params = b.finish([y])
    mod = build(graph, "pynq", params)
    step = next(s for s in mod.steps if s.name == "fc")
    assert step.backend == "jit" and "get_packed_dense" in step.fn.__qualname__
    xv = rng.standard_normal((m, k)).astype(np.float32)
    mod.run(x=xv)
    assert np.array_equal(mod.get_output(0), run_reference(graph, params, {"x": xv}))   # one output: an array
