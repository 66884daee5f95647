"""The host compiler's loop IR and code generation (host/): every op's compute definition, compiled by llvmlite
under its default schedule and under schedules sampled and mutated from its sketches, gives exactly the numpy
reference's bits. The references are written here, independently: graph_pack.kernels where it fixes the same
order (conv2d, dense, pooling), otherwise numpy loops in the definition's order (softmax and layer norm: the lane
partials of host.numerics, written out element by element) with libm's erf/tanh (Python's math module) rounded to
float32 and host.numerics.exp (itself checked against float64 in tests/test_host_numerics.py)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graph_pack import kernels as K
from host import compile_schedule, default_schedule, ops
from host import numerics as nm
from host.loop_ir import Affine, Axis, ComputeDag, Load, Stage, Tensor, inline, rfactor
from host.numerics import LANES
from host.schedule import Schedule, StageSchedule, check
from host.sketch import crossover, generate_sketches, mutate, sample

RNG = np.random.default_rng(7)


def _libm(name: str, x: np.ndarray) -> np.ndarray:
    f = np.frompyfunc(getattr(math, name), 1, 1)
    return f(x.astype(np.float64)).astype(np.float64).astype(np.float32)


def _lane_sum(x: np.ndarray) -> np.ndarray:
    """Each row's sum as host.numerics defines it, one float32 addition at a time: lane j adds elements j, j + 16,
    ... (the row padded with zeros to whole chunks of 16), then the 16 partials are added in lane order."""
    f32 = np.float32
    rows, k = x.shape
    out = np.empty(rows, f32)
    for i in range(rows):
        parts = [f32(0)] * LANES
        for idx in range(-(-k // LANES) * LANES):
            parts[idx % LANES] = f32(parts[idx % LANES] + (x[i, idx] if idx < k else f32(0)))
        total = f32(0)
        for p in parts:
            total = f32(total + p)
        out[i] = total
    return out


def _softmax(x):
    m = x.max(axis=-1, keepdims=True)   # (a max does not depend on the order for these finite inputs)
    e = nm.exp(x - m)
    return e / _lane_sum(e)[:, None]


def _layer_norm(x, g, b, eps=1e-5):
    k = x.shape[1]
    mean = _lane_sum(x) / np.float32(k)
    d = x - mean[:, None]
    var = _lane_sum(d * d) / np.float32(k)
    inv = np.float32(1) / np.sqrt(var + np.float32(eps))
    return d * inv[:, None] * g + b


def _gelu(x):
    return np.float32(0.5) * x * (np.float32(1) + _libm("erf", x / np.float32(math.sqrt(2))))


def _sigmoid(x):
    return np.float32(1) / (np.float32(1) + nm.exp(-x))


def _gelu_tanh(x):
    u = np.float32(2 * math.sqrt(2 / math.pi)) * (x + np.float32(0.044715) * x * x * x)
    return x / (np.float32(1) + nm.exp(-u))


def _bmm(a, b):
    acc = np.zeros((a.shape[0], a.shape[1], b.shape[2]), np.float32)
    for k in range(a.shape[2]):
        acc += a[:, :, k:k + 1] * b[:, k:k + 1, :]
    return acc


def _pool(kind, **a):
    attrs = {"pool_size": a["pool_size"], "strides": a["strides"], "padding": a["padding"],
             "ceil_mode": a["ceil_mode"], "count_include_pad": a.get("count_include_pad", False), "layout": "NCHW"}
    return lambda x: K.KERNELS[f"nn.{kind}_pool2d"](attrs, x)


POOL = {"pool_size": (3, 3), "strides": (2, 2), "padding": (1, 1, 0, 1), "ceil_mode": True}
CASES = {
    "conv2d_bias_relu": (
        lambda: ops.conv2d((1, 4, 9, 8), (6, 2, 3, 3), strides=(2, 1), padding=(1, 1, 1, 0), groups=2,
                           consumers=[("add", "channel"), ("relu",)]),
        [(1, 4, 9, 8), (6, 2, 3, 3), (6,)],
        lambda x, w, b: np.maximum(K.conv2d_nchw(x, w, (2, 1), (1, 1, 1, 0), (1, 1), 2) + b[None, :, None, None], 0)),
    "conv2d_dilated_residual": (
        lambda: ops.conv2d((2, 3, 7, 7), (4, 3, 3, 3), padding=(2, 2, 2, 2), dilation=(2, 2),
                           producers=[("relu",)], consumers=[("add", "full")]),
        [(2, 3, 7, 7), (4, 3, 3, 3), (2, 4, 7, 7)],
        lambda x, w, r: K.conv2d_nchw(np.maximum(x, 0), w, (1, 1), (2, 2, 2, 2), (2, 2), 1) + r),
    "depthwise": (
        lambda: ops.conv2d((1, 4, 6, 6), (4, 1, 3, 3), padding=(1, 1, 1, 1), groups=4, consumers=[("clip", 0, 6)]),
        [(1, 4, 6, 6), (4, 1, 3, 3)],
        lambda x, w: np.clip(K.conv2d_nchw(x, w, (1, 1), (1, 1, 1, 1), (1, 1), 4), 0, 6)),
    "dense_gelu": (
        lambda: ops.dense((3, 24), (10, 24), consumers=[("add", "channel"), ("gelu",)]),
        [(3, 24), (10, 24), (10,)],
        lambda x, w, b: _gelu(K.dense(x, w) + b)),
    "batch_matmul": (lambda: ops.batch_matmul((2, 5, 6), (2, 6, 7)), [(2, 5, 6), (2, 6, 7)], _bmm),
    "batch_matmul_t": (
        lambda: ops.batch_matmul((2, 4, 6), (2, 3, 6), transpose_b=True, consumers=[("mul_const", 0.125)]),
        [(2, 4, 6), (2, 3, 6)], lambda a, b: _bmm(a, b.transpose(0, 2, 1)) * np.float32(0.125)),
    "max_pool": (lambda: ops.pool2d("max", (1, 3, 7, 8), **POOL), [(1, 3, 7, 8)], _pool("max", **POOL)),
    "avg_pool": (lambda: ops.pool2d("avg", (1, 3, 7, 8), **POOL), [(1, 3, 7, 8)], _pool("avg", **POOL)),
    "avg_pool_with_pad": (lambda: ops.pool2d("avg", (1, 2, 6, 6), **POOL, count_include_pad=True), [(1, 2, 6, 6)],
                          _pool("avg", **POOL, count_include_pad=True)),
    "global_avg_pool": (lambda: ops.global_avg_pool2d((2, 3, 4, 5)), [(2, 3, 4, 5)],
                        lambda x: K.KERNELS["nn.global_avg_pool2d"]({}, x)),
    "softmax": (lambda: ops.softmax((3, 2, 17)), [(6, 17)], lambda x: _softmax(x).reshape(3, 2, 17)),
    "layer_norm": (lambda: ops.layer_norm((5, 16)), [(5, 16), (16,), (16,)], _layer_norm),
    "gelu": (lambda: ops.gelu((2, 3, 10)), [(2, 3, 10)], _gelu),
    "silu_gelu_tanh": (lambda: ops.elementwise((2, 3, 19), [("silu",), ("mul_const", 8.0), ("gelu_tanh",)]),
                       [(2, 3, 19)], lambda x: _gelu_tanh(x * _sigmoid(x) * np.float32(8))),
    "elementwise_chain": (
        lambda: ops.elementwise((2, 3, 4, 5), [("add", "channel"), ("sigmoid",), ("mul", "full"), ("tanh",),
                                               ("add_const", 1.5), ("relu",)]),
        [(2, 3, 4, 5), (3,), (2, 3, 4, 5)],
        lambda x, b, m: np.maximum(_libm("tanh", _sigmoid(x + b[None, :, None, None]) * m) + np.float32(1.5), 0)),
}


def _inputs(shapes):
    return [RNG.standard_normal(s).astype(np.float32) for s in shapes]


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_op_is_exact_under_its_default_schedule_and_sampled_schedules(name):
    make, shapes, reference = CASES[name]
    dag = make()
    xs = _inputs(shapes)
    want = reference(*xs).astype(np.float32).reshape(dag.output_shape)
    got = compile_schedule(dag, default_schedule(dag))(*xs)
    assert got.shape == want.shape and np.array_equal(got, want), np.abs(got - want).max()
    rng = random.Random(name)
    for sketch in generate_sketches(dag):
        sched = sample(dag, sketch, rng)
        sched = mutate(dag, sched, rng) or sched
        out = compile_schedule(dag, sched)(*xs, threads=2)
        assert np.array_equal(out, want), f"{sketch.name}: {sched}"


@settings(max_examples=8, deadline=None)
@given(n=st.integers(1, 2), c=st.integers(1, 4), hw=st.integers(3, 7), o=st.integers(1, 5),
       k=st.sampled_from([1, 3]), stride=st.integers(1, 2), pad=st.integers(0, 1), seed=st.integers(0, 2**16))
def test_conv2d_random_shapes_and_schedules_match_the_reference(n, c, hw, o, k, stride, pad, seed):
    dag = ops.conv2d((n, c, hw, hw), (o, c, k, k), strides=(stride, stride), padding=(pad,) * 4)
    x, w = _inputs([(n, c, hw, hw), (o, c, k, k)])
    want = K.conv2d_nchw(x, w, (stride, stride), (pad,) * 4, (1, 1), 1)
    rng = random.Random(seed)
    sched = sample(dag, rng.choice(generate_sketches(dag)), rng)
    assert np.array_equal(compile_schedule(dag, sched)(x, w), want), sched


def test_a_reduction_tiled_out_of_order_is_refused_and_a_bad_split_is_named():
    dag = ops.conv2d((1, 4, 5, 5), (2, 4, 3, 3))
    space = ((1, 1, 1, 1), (1, 1, 1, 1), (1, 1, 1, 2), (1, 1, 1, 3), (1, 1, 1, 3))   # n, g, oc, oh, ow
    tiles = (*space, (2, 2), (3, 1), (1, 3))   # rc split, then ry in the outer level
    bad = Schedule("x", (*[s for s in default_schedule(dag).stages if s.stage != "conv"],
                         StageSchedule("conv", "SSRSRS", tiles, (0, 1, 2, 3, 4))))
    assert "out of order" in check(dag, bad)
    tiles = (*space, (4, 1), (3, 1), (1, 3))   # rc, ry outer; rx inner: lexicographic
    ok = Schedule("x", bad.stages[:-1] + (StageSchedule("conv", "SSRSRS", tiles, (0, 1, 2, 3, 4)),))
    assert check(dag, ok) is None
    wrong = Schedule("x", bad.stages[:-1] + (StageSchedule("conv", "SR", ((1,), (1,), (2,), (3,), (2,), (4,),
                                                                          (3,), (3,)), (0, 1, 2, 3, 4)),))
    assert "ow (3) split as (2,)" in check(dag, wrong)
    with pytest.raises(ValueError, match="invalid schedule"):
        compile_schedule(dag, wrong)


def test_inline_and_rfactor_rewrite_the_dag_as_documented():
    dag = ops.conv2d((1, 2, 4, 4), (3, 2, 3, 3), padding=(1, 1, 1, 1))
    inlined = inline(dag, "pad")
    assert [s.name for s in inlined.stages] == ["conv"]
    x, w = _inputs([(1, 2, 4, 4), (3, 2, 3, 3)])
    assert np.array_equal(compile_schedule(inlined, default_schedule(inlined))(x, w),
                          compile_schedule(dag, default_schedule(dag))(x, w))
    sm = ops.softmax((1, 96))
    rf = rfactor(sm, "rsum_lanes", 2)   # the lanes' 6 chunks as 3 x 2
    assert [s.name for s in rf.stages] == ["rmax_lanes", "rmax", "rexp", "rsum_lanes_rf", "rsum_lanes", "rsum",
                                           "softmax"]
    assert rf.stage("rsum_lanes_rf").shape == (1, 16, 2) and rf.stage("rsum_lanes").reduce[0].extent == 2
    x = _inputs([(1, 96)])[0]
    got = compile_schedule(rf, default_schedule(rf))(x)
    np.testing.assert_allclose(got, _softmax(x), rtol=1e-6)   # reassociated: close, not bit-equal


def test_sketch_rules_inline_fuse_and_tile_as_ansor_does():
    dag = ops.conv2d((1, 4, 6, 6), (8, 4, 3, 3), padding=(1, 1, 1, 1), consumers=[("add", "channel"), ("relu",)])
    sketches = {s.name: s for s in generate_sketches(dag)}
    assert set(sketches) == {"tiled", "tiled+inline_pad"}
    plain = sketches["tiled"]
    assert plain.inlined == ()                                 # the consumers right after a reduction are fused
    conv = next(p for p in plain.plans if p.stage == "conv")
    assert conv.structure == "SSRSRS" and conv.fused == ("post0_add", "post1_relu")
    chain = ops.elementwise((2, 8), [("relu",), ("add_const", 1.0), ("sigmoid",), ("mul_const", 2.0)])
    ew = generate_sketches(chain)[0]
    assert ew.inlined == ("ew0_relu", "ew1_add_const")      # cheap elementwise stages substituted into readers
    assert [(p.stage, p.fused) for p in ew.plans] == [("ew2_sigmoid", ("ew3_mul_const",))]
    assert "pad" in sketches["tiled+inline_pad"].inlined
    pool = ops.pool2d("max", (1, 2, 6, 6), (2, 2), (2, 2))
    assert next(p for p in generate_sketches(pool)[0].plans if p.stage == "pool").structure == "SRS"
    sm = ops.softmax((1, 4096))   # lane partials over 256 chunks: long reductions over a space of 16
    assert all(not s.rfactors for s in generate_sketches(sm))                 # exact: never reassociates
    rfs = [s for s in generate_sketches(sm, exact=False) if s.rfactors]
    assert rfs and set(dict(rfs[0].rfactors)) == {"rmax_lanes", "rsum_lanes"}
    assert "rexp" not in generate_sketches(sm)[0].inlined                    # exp is not inlined


def test_crossover_mixes_stage_schedules_of_one_sketch_only():
    dag = ops.layer_norm((4, 32))
    sketch = generate_sketches(dag)[0]
    rng = random.Random(3)
    a, b = sample(dag, sketch, rng), sample(dag, sketch, rng)
    kids = [crossover(dag, a, b, rng) for _ in range(20)]
    assert all(k is not None for k in kids)
    for kid in kids:
        assert all(s in (x, y) for s, x, y in zip(kid.stages, a.stages, b.stages, strict=True))
    other = Schedule("other", a.stages)
    assert crossover(dag, a, other, rng) is None


def test_schedules_round_trip_through_json_and_bad_json_is_named():
    dag = ops.dense((2, 8), (4, 8))
    s = sample(dag, generate_sketches(dag)[0], random.Random(1))
    assert Schedule.from_json(s.to_json()) == s
    with pytest.raises(ValueError, match="not a host schedule"):
        Schedule.from_json('{"stages": []}')


def test_bad_definitions_are_refused_with_what_is_allowed():
    with pytest.raises(ValueError, match="out of bounds"):
        ComputeDag("bad", (Tensor("x", (4,)),), (Stage("y", (Axis("i", 5),), Load("x", (Affine.of("i"),))),), (5,))
    with pytest.raises(ValueError, match="groups"):
        ops.conv2d((1, 3, 4, 4), (4, 2, 3, 3), groups=2)
    with pytest.raises(ValueError, match="not one of"):
        ops.elementwise((2, 2), [("swish",)])
    with pytest.raises(ValueError, match="axis"):
        ops.softmax((2, 3), axis=0)
    k = compile_schedule(ops.gelu((2, 2)), default_schedule(ops.gelu((2, 2))))
    with pytest.raises(ValueError, match="float32"):
        k(np.zeros((2, 2), np.float64))


@pytest.mark.parametrize(("m", "k", "units"), [(1, 37, 21), (4, 64, 48), (3, 5, 16)])
def test_dense_with_its_weight_packed_is_dense_bit_for_bit(m, k, units):
    from host.row_ops import packed_dense_schedule
    x, w = _inputs([(m, k), (units, k)])
    dag = ops.dense_packed((m, k), units)
    wp = ops.pack_dense_weight(w)
    assert wp.shape == (-(-units // LANES), k, LANES) and np.array_equal(wp[0, :, 1], w[1])
    for sched in (packed_dense_schedule(dag), default_schedule(dag)):
        assert np.array_equal(compile_schedule(dag, sched)(x, wp)[:, :units], K.dense(x, w)), sched.sketch
