"""The accelerator paths issue 40 added, run on the generated RTL (Verilator) against the C simulator: a dilated
conv2d, block-diagonal narrow groups (a depthwise layer of 24 channels padded to two 16-wide blocks, and groups of 8
channels), per-channel shifts (the ``channel_shr`` epilogue: ALU SHR with a tensor operand) and the batch_matmul
template. Each op small, on the pynq preset (the suite's RTL build): the RTL's output equals the C simulator's and
a numpy reference written here, VTA's counters are equal and the RTL's cycles are within the bound the other RTL
tests hold the timing model to (tests/test_hardware_rtl.py CYCLE_TOLERANCE).

One difference is measured and named rather than hidden: batch_matmul's output rows are interleaved across the
batch entries, so a store of a narrow product writes many 2-beat rows. The harness's DRAM port takes 3 write bursts
at a time, each held until its acknowledgement 29 cycles later (the ACP's write acceptance as docs/hardware.md
estimates it), which the timing model (latency once per transfer) does not charge: 1.23x the model's cycles on
(3, 16, 32) x (3, 32, 32). With the port taking 16 (the HLS m_axi adapter's default ``num_write_outstanding``,
what VTA's store module itself allows) the RTL is within the bound.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_conv_dilation_groups import direct_conv
from test_hardware_rtl import CYCLE_TOLERANCE, device

from hw_config.layout import ALU_OPCODES, OPCODES
from vta.templates import compile_op

pytestmark = pytest.mark.slow
HLS_WRITES_OUTSTANDING = 16   # Vivado HLS's m_axi default num_write_outstanding (VTA's vta.cc sets none)


def _both(name: str, inputs: dict[str, np.ndarray], rtl_device, **workload):
    """(the C simulator's op, the RTL's op, their outputs) of one compiled op run on both with ``inputs``."""
    sim = compile_op(name, rtl_device.cfg, **workload)
    rtl = compile_op(name, rtl_device.cfg, device=rtl_device, **workload)
    try:
        return sim, rtl, sim.run(**inputs), rtl.run(**inputs)
    finally:
        rtl.close()   # the session's device outlives the op


def _assert_same_run(sim, rtl, sim_out: np.ndarray, rtl_out: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_array_equal(sim_out, want)
    np.testing.assert_array_equal(rtl_out, sim_out)
    assert rtl.stats.vta_counters() == sim.stats.vta_counters()
    ratio = rtl.stats.cycles / sim.stats.cycles
    assert abs(ratio - 1) <= CYCLE_TOLERANCE, (rtl.stats.cycles, sim.stats.cycles, round(ratio, 3))


def _conv_inputs(rng: np.random.Generator, ci: int, co: int, groups: int, hw: int, bias: bool) -> dict:
    inputs = {"data": rng.integers(-128, 128, (1, ci, hw, hw), dtype=np.int8),
              "kernel": rng.integers(-128, 128, (co, ci // groups, 3, 3), dtype=np.int8)}
    if bias:
        inputs["bias"] = rng.integers(-(1 << 12), 1 << 12, co).astype(np.int32)
    return inputs


# (op, channels in, channels out, groups, height = width, padding, dilation): 3x3 kernels, stride 1
CONVS = {
    "dilated": ("conv2d", 16, 32, 1, 10, 2, 2),
    "depthwise-24": ("group_conv2d", 24, 24, 24, 9, 1, 1),
    "groups-of-8": ("group_conv2d", 32, 32, 4, 8, 1, 1),
}


@pytest.mark.parametrize("case", list(CONVS))
def test_dilated_and_block_diagonal_convs_on_the_rtl(case: str) -> None:
    op, ci, co, groups, hw, pad, dilation = CONVS[case]
    rng = np.random.default_rng(len(case))
    inputs = _conv_inputs(rng, ci, co, groups, hw, bias=True)
    epilogue = [("bias",), ("shr", 7), ("clip", -127, 127)]
    sim, rtl, a, b = _both(op, inputs, device("pynq"), epilogue=epilogue, data_shape=(1, ci, hw, hw),
                           kernel_shape=(co, ci // groups, 3, 3), padding=pad, dilation=dilation, groups=groups)
    acc = direct_conv(inputs["data"], inputs["kernel"], 1, pad, dilation, groups)
    want = np.clip((acc + inputs["bias"][None, :, None, None]) >> 7, -127, 127).astype(np.int8)
    assert rtl.template.narrow_groups == (groups > 1)   # groups narrower than a block: block-diagonal GEMMs
    _assert_same_run(sim, rtl, a, b, want)


def test_per_channel_shifts_through_the_alus_tensor_shr_on_the_rtl() -> None:
    """A depthwise layer with ("bias",), ("channel_shr",): ALU SHR with a tensor operand (each channel's staged
    amount, 0..15, every one of them used) after the per-channel add, on the RTL as on the C simulator."""
    rng = np.random.default_rng(5)
    inputs = _conv_inputs(rng, 40, 40, 40, 9, bias=True)
    inputs["bias"] >>= 2
    inputs["channel_shr"] = np.resize(np.arange(16, dtype=np.int32), 40)
    rng.shuffle(inputs["channel_shr"])
    epilogue = [("bias",), ("channel_shr",), ("shr", 1), ("clip", -127, 127)]
    sim, rtl, a, b = _both("group_conv2d", inputs, device("pynq"), epilogue=epilogue, data_shape=(1, 40, 9, 9),
                           kernel_shape=(40, 1, 3, 3), padding=1, groups=40)
    alu = rtl.cfg.insn_formats["alu"].decode_rows(rtl.program.streams[0].insns)
    tensor_shr = (alu["opcode"] == OPCODES["ALU"]) & (alu["alu_opcode"] == ALU_OPCODES["SHR"]) & (alu["use_imm"] == 0)
    assert tensor_shr.any(), "the per-channel shift is an ALU SHR with a tensor operand"
    acc = direct_conv(inputs["data"], inputs["kernel"], 1, 1, 1, 40) + inputs["bias"][None, :, None, None]
    want = np.clip((acc >> inputs["channel_shr"][None, :, None, None]) >> 1, -127, 127).astype(np.int8)
    _assert_same_run(sim, rtl, a, b, want)


def _batch_matmul_want(data: np.ndarray, kernel: np.ndarray, shift: int) -> np.ndarray:
    acc = np.einsum("bmk,bnk->bmn", data.astype(np.int64), kernel.astype(np.int64))
    return np.clip(acc >> shift, -127, 127).astype(np.int8)


@pytest.mark.parametrize("data_shape, kernel_shape, max_writes", [
    ((2, 16, 64), (2, 64, 64), None),                        # 4-block output rows: the ACP-like port's default
    ((3, 16, 32), (3, 32, 32), HLS_WRITES_OUTSTANDING),      # 1-block rows: the port takes HLS's 16 writes
])
def test_batch_matmul_on_the_rtl(data_shape, kernel_shape, max_writes) -> None:
    from hardware import RtlDevice
    from hardware.device import DramSettings

    session = device("pynq")
    dev = session if max_writes is None else RtlDevice(
        session.cfg, dram=DramSettings.for_config(session.cfg, max_writes=max_writes))
    rng = np.random.default_rng(sum(data_shape))
    inputs = {"data": rng.integers(-128, 128, data_shape, dtype=np.int8),
              "kernel": rng.integers(-128, 128, kernel_shape, dtype=np.int8)}
    sim, rtl, a, b = _both("batch_matmul", inputs, dev, epilogue=[("shr", 6), ("clip", -127, 127)],
                           data_shape=data_shape, kernel_shape=kernel_shape)
    _assert_same_run(sim, rtl, a, b, _batch_matmul_want(inputs["data"], inputs["kernel"], 6))

