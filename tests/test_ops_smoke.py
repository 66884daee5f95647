"""compile_op on one workload of each operator kind, bit-exact against the numpy references."""

from __future__ import annotations

import numpy as np
import pytest

from hw_config import load_config
from vta.environment import Environment, get_env
from vta.numerics import conv2d_int
from vta.runtime import ScheduleError
from vta.space import KnobError
from vta.templates import compile_op

EPILOGUE = (("bias",), ("shr", 8), ("clip", 0, 127))
CASES = {
    "conv2d 3x3": ("conv2d", (1, 32, 14, 14), (32, 32, 3, 3), {"strides": 1, "padding": 1}),
    "conv2d 1x1 s2": ("conv2d", (1, 32, 14, 14), (64, 32, 1, 1), {"strides": 2, "padding": 0}),
    "conv2d odd channels": ("conv2d", (1, 3, 12, 12), (20, 3, 3, 3), {"strides": 1, "padding": 1}),
    "group_conv2d": ("conv2d", (1, 64, 14, 14), (64, 16, 3, 3), {"strides": 1, "padding": 1, "groups": 4}),
    "conv2d_transpose": ("conv2d_transpose", (1, 32, 4, 4), (32, 16, 4, 4), {"strides": 2, "padding": 1}),
    "dense": ("dense", (16, 64), (48, 64), {}),
}


def _inputs(rng, name, data_shape, kernel_shape):
    x = rng.integers(-128, 128, data_shape, dtype=np.int8)
    w = rng.integers(-128, 128, kernel_shape, dtype=np.int8)
    co = kernel_shape[1] if name == "conv2d_transpose" else kernel_shape[0]
    return x, w, rng.integers(-3000, 3000, co, dtype=np.int32)


@pytest.mark.parametrize("preset", ["pynq", "batch4", "block32"])
@pytest.mark.parametrize("case", list(CASES))
def test_default_config_is_bit_exact(preset, case):
    name, data_shape, kernel_shape, kw = CASES[case]
    # (on block32 the groups of 16 channels are not whole 32-channel blocks: they run block-diagonally, two a block)
    op = compile_op(name, load_config(preset), data_shape=data_shape, kernel_shape=kernel_shape, epilogue=EPILOGUE,
                    **kw)
    x, w, b = _inputs(np.random.default_rng(1), name, data_shape, kernel_shape)
    out = op.run(x, w, bias=b)
    np.testing.assert_array_equal(out, op.reference(x, w, bias=b))
    assert op.stats.gemm_counter > 0 and op.cycles > 0


def test_reference_conv_matches_a_plain_loop():
    rng = np.random.default_rng(2)
    x = rng.integers(-5, 5, (1, 4, 5, 6)).astype(np.int64)
    w = rng.integers(-5, 5, (2, 2, 3, 3)).astype(np.int64)
    got = conv2d_int(x, w, (2, 1), (1, 1, 1, 1), groups=2)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros_like(got)
    for o in range(2):
        for i in range(got.shape[2]):
            for j in range(got.shape[3]):
                c0 = (o // 1) * 2
                want[0, o, i, j] = (xp[0, c0:c0 + 2, 2 * i:2 * i + 3, j:j + 3] * w[o]).sum()
    np.testing.assert_array_equal(got, want)


def test_issue_example_config_and_refusals():
    cfg = load_config("pynq")
    c2 = {"tile_b": [1, 1], "tile_h": [14, 4], "tile_w": [2, 28], "tile_ci": [2, 2], "tile_co": [4, 1],
          "oc_nthread": 2, "h_nthread": 1}
    op = compile_op("conv2d", cfg, data_shape=(1, 64, 56, 56), kernel_shape=(64, 64, 3, 3), strides=(1, 1),
                    padding=(1, 1), epilogue=EPILOGUE, config=c2)
    assert op.config == c2 and len(op.space) == 2304
    with pytest.raises(ScheduleError, match="SRAM capacity"):
        compile_op("conv2d", cfg, data_shape=(1, 64, 56, 56), kernel_shape=(64, 64, 3, 3), padding=1,
                   config={**c2, "tile_h": [1, 56], "tile_w": [1, 56], "tile_ci": [1, 4]})
    with pytest.raises(ScheduleError, match="tile_w"):
        compile_op("conv2d", cfg, data_shape=(1, 64, 56, 56), kernel_shape=(64, 64, 3, 3), padding=1,
                   config={**c2, "tile_w": [3, 19]})
    with pytest.raises(ScheduleError, match="pipeline hazard"):
        compile_op("conv2d", cfg, data_shape=(1, 64, 56, 56), kernel_shape=(64, 64, 3, 3), padding=1,
                   config={**c2, "tile_h": [56, 1], "tile_w": [28, 2], "tile_co": [4, 1]})
    with pytest.raises(ValueError, match="unknown operator"):
        compile_op("conv3d", cfg, data_shape=(1, 16, 4, 4), kernel_shape=(16, 16, 1, 1))
    assert issubclass(ScheduleError, ValueError) and issubclass(KnobError, ValueError)


def test_environment_context():
    assert get_env().cfg.model == load_config().model
    with Environment("batch4") as env:
        assert get_env() is env and env.BATCH == 4
        with Environment("pynq", LOG_BLOCK=5, LOG_WGT_BUFF_SIZE=19):
            assert get_env().BLOCK_IN == 32
        assert get_env() is env
    assert get_env().BATCH == 1
