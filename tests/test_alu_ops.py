"""Element-wise ALU operators on the accelerator against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from hw_config import load_config
from vta.runtime import ScheduleError
from vta.templates import compile_op
from vta.templates.alu import alu_tiling, check_alu

SHAPE = (4, 48, 6, 10)  # channels not a whole number of blocks, batch not of BATCH on pynq
CASES = {  # name, workload kwargs, numpy model on int64 operands (before the int8 store)
    "add": ({}, lambda a, b: a + b),
    "multiply": ({}, lambda a, b: a * b),
    "minimum": ({}, np.minimum),
    "maximum": ({}, np.maximum),
    "add imm": ({"imm": -7}, lambda a, b: a - 7),
    "multiply imm": ({"imm": 3}, lambda a, b: a * 3),
    "right_shift imm": ({"imm": 2}, lambda a, b: a >> 2),
    "relu": ({}, lambda a, b: np.maximum(a, 0)),
    "clip": ({"bounds": (-20, 50)}, lambda a, b: np.clip(a, -20, 50)),
}


def _int8_store(v: np.ndarray) -> np.ndarray:
    return (v.astype(np.int64) & 0xFF).astype(np.uint8).view(np.int8)


@pytest.mark.parametrize("preset", ["pynq", "batch4", "block32"])
@pytest.mark.parametrize("case", list(CASES))
def test_alu_op_bit_exact(preset, case):
    kwargs, model = CASES[case]
    name = case.split()[0]
    cfg = load_config(preset)
    if name == "multiply":   # ALU MUL: in fsim's ISA, not in VTA's HLS hardware (test_capabilities.py)
        cfg = cfg.replace(CAPABILITIES="fsim")
    op = compile_op(name, cfg, data_shape=SHAPE, epilogue=[("clip", -100, 100)], **kwargs)
    rng = np.random.default_rng(len(case))
    a = rng.integers(-400, 400, SHAPE).astype(np.int32)
    b = rng.integers(-400, 400, SHAPE).astype(np.int32)
    out = op.run(a, b if op.geometry.tensor_rhs else None)
    want = _int8_store(np.clip(model(a.astype(np.int64), b.astype(np.int64)), -100, 100))
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(op.reference(a, b if op.geometry.tensor_rhs else None), want)
    # traffic and work computed independently: every padded element is loaded once per operand (int32), stored
    # once (int8), and each (BATCH x BLOCK_OUT) vector passes the op (clip: min + max) and the epilogue's clip
    cfg = load_config(preset)
    n, c, h, w = SHAPE
    padded = -(-n // cfg.BATCH) * cfg.BATCH * -(-c // cfg.BLOCK_OUT) * cfg.BLOCK_OUT * h * w
    alu_ops = (2 if name == "clip" else 1) + 2
    assert op.stats.out_store_nbytes == padded
    assert op.stats.acc_load_nbytes == padded * 4 * (2 if op.geometry.tensor_rhs else 1)
    assert op.stats.alu_counter == padded // (cfg.BATCH * cfg.BLOCK_OUT) * alu_ops


def test_every_valid_config_of_a_small_space_is_exact():
    cfg = load_config("pynq")
    shape = (1, 32, 4, 6)
    base = compile_op("add", cfg, data_shape=shape, epilogue=[("clip", 0, 127)])
    rng = np.random.default_rng(0)
    a, b = (rng.integers(-200, 200, shape).astype(np.int32) for _ in range(2))
    want = _int8_store(np.clip(a.astype(np.int64) + b, 0, 127))
    for config in base.space:
        op = compile_op("add", cfg, data_shape=shape, epilogue=[("clip", 0, 127)], config=config)
        np.testing.assert_array_equal(op.run(a, b), want)


def test_refusals_name_the_reason():
    cfg = load_config("pynq", LOG_ACC_BUFF_SIZE=12)  # 64 accumulator rows
    shape = (1, 64, 8, 8)
    with pytest.raises(ScheduleError, match="SRAM capacity"):
        compile_op("add", cfg, data_shape=shape, config={"tile_co": [1, 4], "tile_h": [1, 8], "tile_w": [1, 8]})
    op = compile_op("add", cfg, data_shape=shape)
    assert check_alu(cfg, op.geometry, alu_tiling(op.config)) is None
    with pytest.raises(ScheduleError, match="16-bit ALU immediate"):
        compile_op("add", cfg, data_shape=shape, imm=1 << 20)
    with pytest.raises(ValueError, match="rhs="):
        op.run(np.zeros(shape, np.int32))
    with pytest.raises(ValueError, match="bounds"):
        compile_op("clip", cfg, data_shape=shape)
