"""host.numerics: the float32 exp and the lane-partial row reductions that softmax, layer norm, sigmoid, SiLU and
GELU-tanh compute, in numpy (graph_pack.kernels' references) and compiled (host.jit / the loop IR), bit for bit;
and how far both are from float64 (the stated bounds)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from extras import needs
from hypothesis import given, settings
from hypothesis import strategies as st

from graph_pack import build
from graph_pack import kernels as K
from graph_pack.graph import GraphBuilder
from graph_pack.reference import run_reference
from host import numerics as nm

EXP_MAX_ULP = 1   # against exp in float64 rounded to float32, normal and subnormal results (docs/benchmarks.md)
# softmax: each output within this many float32 ulps of 1.0 of the float64 softmax (exp's ulp, the sums' rounding)
SOFTMAX_ABS = 4e-7
# layer norm: of the largest output, for rows whose |mean| is within 10 standard deviations (float32 sums)
LAYER_NORM_BOUND = 1e-5
SPECIAL = np.array([0.0, -0.0, 1e-30, -1e-40, 1.0, -1.0, 88.72, 88.7228, 88.73, 89.0, 100.0, np.inf, -87.3, -87.4,
                    -100.0, -103.97, -104.0, -110.0, -np.inf, np.nan], np.float32)


def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The distance in float32 steps (sign-magnitude bits mapped onto a line)."""
    ia, ib = (x.view(np.int32).astype(np.int64) for x in (a, b))
    ia, ib = (np.where(i < 0, -(i & 0x7FFFFFFF), i) for i in (ia, ib))
    return np.abs(ia - ib)


def _exp_samples() -> np.ndarray:
    rng = np.random.default_rng(1)
    wide = rng.uniform(-104, 88.72, 200_000).astype(np.float32)
    small = (rng.standard_normal(50_000) * 1e-3).astype(np.float32)   # near 0: the polynomial's own range
    return np.concatenate([wide, small, SPECIAL])


def test_exp_is_within_one_ulp_of_float64_and_handles_the_edges():
    x = _exp_samples()
    got = nm.exp(x)
    with np.errstate(over="ignore"):
        want = np.exp(x.astype(np.float64)).astype(np.float32)
    finite = ~np.isnan(x)
    assert _ulps(got[finite], want[finite]).max() <= EXP_MAX_ULP
    e = dict(zip(SPECIAL.astype(np.float64).tolist(), nm.exp(SPECIAL).tolist(), strict=True))

    def at(v: float) -> float:
        return e[float(np.float32(v))]
    assert at(0.0) == 1.0 and at(np.inf) == np.inf and at(-np.inf) == 0.0 and at(89.0) == np.inf
    assert at(88.72) < np.inf and at(-110.0) == 0.0 and 0 < at(-100.0) < np.finfo(np.float32).tiny   # subnormal
    assert np.isnan(nm.exp(SPECIAL[-1:]))[0]
    assert got.dtype == np.float32


def _lane_sum_by_hand(row: list[float]) -> np.float32:
    f32 = np.float32
    parts = [f32(0)] * nm.LANES
    padded = row + [0.0] * (-len(row) % nm.LANES)
    for i, v in enumerate(padded):
        parts[i % nm.LANES] = f32(parts[i % nm.LANES] + f32(v))
    total = f32(0)
    for p in parts:
        total = f32(total + p)
    return total


@settings(max_examples=20, deadline=None)
@given(k=st.integers(1, 70), rows=st.integers(1, 3), seed=st.integers(0, 2**16))
def test_row_sum_and_max_follow_the_documented_order(k, rows, seed):
    x = (np.random.default_rng(seed).standard_normal((rows, k)) * 1e3).astype(np.float32)
    want = np.array([_lane_sum_by_hand(r.tolist()) for r in x], np.float32)
    assert np.array_equal(nm.row_sum(x), want)
    assert np.array_equal(nm.row_max(x), x.max(axis=1))


def _softmax64(x: np.ndarray) -> np.ndarray:
    z = x.astype(np.float64)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _layer_norm64(x, g, b, eps=1e-5):
    z = x.astype(np.float64)
    d = z - z.mean(axis=-1, keepdims=True)
    return d / np.sqrt((d * d).mean(axis=-1, keepdims=True) + eps) * g + b


def _row_kernel(op: str, shapes, attrs):
    from host import jit
    fn = jit.get_kernel(op, attrs, shapes, ["float32"] * len(shapes))
    assert fn is not None
    return fn


@needs("llvmlite")
@settings(max_examples=12, deadline=None)
@given(rows=st.integers(1, 5), k=st.integers(1, 70), scale=st.sampled_from([1.0, 30.0]), mask=st.booleans(),
       seed=st.integers(0, 2**16))
def test_compiled_softmax_is_the_reference_bit_for_bit_and_near_float64(rows, k, scale, mask, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, k)) * scale).astype(np.float32)
    x[:, 0] -= 1e4 * scale     # a large negative: exp underflows to 0
    if mask and k > 2:
        x[:, 1::3] = -np.inf   # an attention mask
    attrs = {"axis": -1}
    want = K.KERNELS["nn.softmax"](attrs, x)
    got = _row_kernel("nn.softmax", [x.shape], attrs)(attrs, x)
    assert np.array_equal(got, want)
    assert np.abs(want - _softmax64(x)).max() <= SOFTMAX_ABS


@needs("llvmlite")
@settings(max_examples=12, deadline=None)
@given(rows=st.integers(1, 5), k=st.integers(1, 70), offset=st.sampled_from([0.0, 10.0]), seed=st.integers(0, 2**16))
def test_compiled_layer_norm_is_the_reference_bit_for_bit_and_near_float64(rows, k, offset, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, k)) + offset).astype(np.float32)
    x[0] = np.float32(3.25)                        # a zero-variance row: y = beta exactly
    g, b = (rng.standard_normal(k).astype(np.float32) for _ in range(2))
    attrs = {"axis": -1, "epsilon": 1e-5}
    want = K.KERNELS["nn.layer_norm"](attrs, x, g, b)
    got = _row_kernel("nn.layer_norm", [x.shape, g.shape, b.shape], attrs)(attrs, x, g, b)
    assert np.array_equal(got, want)
    assert np.array_equal(want[0], b)
    if k > 1 and rows > 1:
        ref = _layer_norm64(x[1:], g, b)
        assert np.abs(want[1:] - ref).max() <= LAYER_NORM_BOUND * max(np.abs(ref).max(), 1.0)


@needs("llvmlite")
def test_compiled_sigmoid_silu_and_gelu_tanh_use_the_same_exp_vectorised_and_scalar():
    from host import compile_schedule, default_schedule, ops
    from host.schedule import Schedule, StageSchedule
    x = np.resize(np.concatenate([_exp_samples()[:4000] / 4, -SPECIAL, SPECIAL]), (8, 512)).astype(np.float32)
    f32 = np.float32
    with np.errstate(all="ignore"):   # inf and NaN inputs, on purpose
        sig = f32(1) / (f32(1) + nm.exp(-x))
        u = f32(2 * math.sqrt(2 / math.pi)) * (x + f32(0.044715) * x * x * x)
        silu, gelu_tanh = x * sig, x / (f32(1) + nm.exp(-u))
        sig64 = 1 / (1 + np.exp(-x.astype(np.float64)))
    for chain, want in (([("sigmoid",)], sig), ([("silu",)], silu), ([("gelu_tanh",)], gelu_tanh)):
        dag = ops.elementwise(x.shape, chain)
        name = dag.stages[0].name
        vector = Schedule("v", (StageSchedule(name, "SS", ((8, 1), (32, 16)), (0, 1), vectorize=True),))
        scalar = default_schedule(dag)
        for sched in (vector, scalar):
            kernel = compile_schedule(dag, sched)
            assert np.array_equal(kernel(x), want, equal_nan=True), (chain, sched.sketch)
        assert "@exp" not in kernel.ir   # no libm call left
    assert np.nanmax(np.abs(sig - sig64)) <= 2 ** -23


def _net(shape):
    rng = np.random.default_rng(0)
    b = GraphBuilder()
    x = b.input("x", shape, "float32")
    g = b.const("g", rng.standard_normal(shape[-1]).astype(np.float32))
    beta = b.const("beta", rng.standard_normal(shape[-1]).astype(np.float32))
    ln = b.op("nn.layer_norm", [x, g, beta], name="ln", axis=len(shape) - 1, epsilon=1e-5)
    s = b.op("nn.softmax", [ln], name="sm", axis=-1)
    sig = b.op("sigmoid", [s], name="sig")
    graph, params = b.finish([ln, s, sig])
    return graph, params, (rng.standard_normal(shape) * 2 + 3).astype(np.float32)


@needs("llvmlite")
@pytest.mark.parametrize("shape", [(2, 16, 64), (1, 17, 33)])
def test_build_runs_softmax_and_layer_norm_compiled_bit_equal_to_the_reference(shape):
    graph, params, x = _net(shape)
    mod = build(graph, "pynq", params)
    assert {s.name: s.backend for s in mod.steps}["ln"] == "jit"
    assert {s.name: s.backend for s in mod.steps}["sm"] == "jit"
    mod.run(x=x)
    for i, want in enumerate(run_reference(graph, params, {"x": x})):
        assert np.array_equal(mod.get_output(i), want), i
