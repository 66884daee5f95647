"""A clip with fractional bounds on integer data, offloaded to the accelerator, against numpy written here.

On integers, clip(a_min, a_max) keeps the integers in [a_min, a_max]: clip(-0.5, 6.5) is clip(0, 6) and
clip(-2.5, 3.5) is clip(-2, 3) (the lower bound rounds up, the upper one down; graph_pack's host kernel and
``vta.templates.epilogue.clip_bounds`` both say so). A lower bound rounded down instead would let -1 (or -3)
through: every negative input below the bound shows it.
"""

from __future__ import annotations

import numpy as np
import pytest

from graph_pack import GraphBuilder
from graph_pack.build import AccelStep, build
from graph_pack.pack import graph_pack
from hw_config import load_config
from vta import compile_op
from vta.runtime import ScheduleError
from vta.templates.epilogue import clip_bounds

SIM = load_config("sim")
SHAPE = (1, 16, 4, 4)


def _accel_ops(mod) -> list[str]:
    return [s.workload["op"] for s in mod.steps if isinstance(s, AccelStep)]


def test_conv_chain_with_a_fractional_clip_runs_on_the_accelerator():
    """int8 conv -> int32 -> right_shift 6 -> clip(-0.5, 6.5) -> int8, the clip fused into the conv's epilogue."""
    r = np.random.default_rng(221)
    x = r.integers(-128, 128, SHAPE).astype(np.int8)
    w = r.integers(-3, 4, (16, 16, 1, 1)).astype(np.int8)
    b = GraphBuilder()
    s = b.op("nn.max_pool2d", [b.input("x", SHAPE, "int8")], name="start", pool_size=1)   # the identity
    t = b.op("nn.conv2d", [s, b.const("w", w)], name="conv", out_dtype="int32")
    t = b.op("right_shift", [t, b.const("sh", np.int32(6))], name="shr")
    t = b.op("clip", [t], name="clip", a_min=-0.5, a_max=6.5)
    t = b.op("cast", [t], name="out8", dtype="int8")
    g, p = b.finish([b.op("cast", [t], name="stop", dtype="float32")])
    packed = graph_pack(g, SIM, start_name="start", stop_name="stop")
    assert "clip" in packed.meta["groups"]["conv"].members   # the clip runs on the accelerator
    mod = build(packed, SIM, p, cpu="numpy", fallback="error")
    assert _accel_ops(mod) == ["conv2d"]
    mod.run(x=x)
    got = mod.get_output(0)

    # numpy: a 1x1 conv is a channel contraction; >> 6 is floor division by 64; the integers in [-0.5, 6.5]
    acc = np.einsum("oc,nchw->nohw", w[:, :, 0, 0].astype(np.int64), x.astype(np.int64))
    shifted = acc >> 6
    want = np.clip(shifted, 0, 6).astype(np.float32)
    assert (shifted < 0).sum() > 20 and (shifted > 6).sum() > 20 and ((shifted > 0) & (shifted < 6)).sum() > 20
    np.testing.assert_array_equal(got, want)


def test_alu_clip_head_with_fractional_bounds_runs_on_the_accelerator():
    """int8 -> int32 -> clip(-2.5, 3.5) -> int8: the clip is the ALU group's head (its bounds in the workload)."""
    r = np.random.default_rng(222)
    x = r.integers(-8, 9, SHAPE).astype(np.int8)
    b = GraphBuilder()
    s = b.op("nn.max_pool2d", [b.input("x", SHAPE, "int8")], name="start", pool_size=1)
    t = b.op("clip", [b.op("cast", [s], name="xi", dtype="int32")], name="head", a_min=-2.5, a_max=3.5)
    t = b.op("cast", [t], name="out8", dtype="int8")
    g, p = b.finish([b.op("cast", [t], name="stop", dtype="float32")])
    packed = graph_pack(g, SIM, start_name="start", stop_name="stop")
    assert packed.meta["groups"]["head"].kind == "alu"
    mod = build(packed, SIM, p, cpu="numpy", fallback="error")
    assert _accel_ops(mod) == ["clip"]
    mod.run(x=x)
    want = np.clip(x.astype(np.int64), -2, 3).astype(np.float32)   # the integers in [-2.5, 3.5]
    assert (x == -3).any() and (x < -3).any() and (x == 4).any()
    np.testing.assert_array_equal(mod.get_output(0), want)


def test_compile_op_clip_takes_integer_bounds_only():
    """The operator path takes integer bounds (fractional ones are refused naming the value); the bounds
    ``clip_bounds`` gives for a fractional graph clip run there as numpy's clip on the integers inside."""
    with pytest.raises(ValueError, match="bounds: expected an integer, got -0.5"):
        compile_op("clip", SIM, data_shape=SHAPE, bounds=(-0.5, 6.5))
    with pytest.raises(ScheduleError, match=r"immediate 6\.5 must be an integer"):
        compile_op("conv2d", SIM, data_shape=SHAPE, kernel_shape=(16, 16, 1, 1), epilogue=[("clip", -0.5, 6.5)])
    assert clip_bounds(-0.5, 6.5) == ("clip", 0, 6) and clip_bounds(-2.5, 3.5) == ("clip", -2, 3)
    assert clip_bounds(1.5, 1.7) is None and clip_bounds(-np.inf, 0) is None
    x = np.arange(-40, 40, dtype=np.int32).reshape(1, 16, 1, 5) * 3
    op = compile_op("clip", SIM, data_shape=x.shape, bounds=clip_bounds(-0.5, 6.5)[1:])
    out = op.run(x)
    assert out.dtype == np.int8
    np.testing.assert_array_equal(out, np.clip(x, 0, 6))
