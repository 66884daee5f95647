"""The configs the analytic resource model is fitted to (TRAIN) and checked on (HELD_OUT), per Yosys family, and
those synthesised with and without DSP packing (PACKING).

Each is the pynq preset with overrides; they span BATCH 1-4, BLOCK 4-16, buses of 32-64 bits, SRAMs from a few
KiB to VTA's sizes, instruction queues of 4-512, token queues of 2-8, DRAM latencies of 10-32 cycles (the depth
of the DMA engines' FIFOs follows it), the capability sets of the Pynq and fsim (which ALU opcodes and loads are
built) and compute pipelines 4 and 9 deep. The held-out configs are none of TRAIN's.
"""

from __future__ import annotations

from hw_config import HwConfig, load_config

_K = ("LOG_BATCH", "LOG_BLOCK", "LOG_BUS_WIDTH", "LOG_UOP_BUFF_SIZE", "LOG_INP_BUFF_SIZE", "LOG_WGT_BUFF_SIZE",
      "LOG_ACC_BUFF_SIZE", "INSN_QUEUE_DEPTH", "TOKEN_QUEUE_DEPTH")


def _c(name: str, *values: int, preset: str = "pynq", **extra) -> tuple[str, dict]:
    return name, {"preset": preset, **dict(zip(_K, values, strict=True)), **extra}


FSIM = {"CAPABILITIES": "fsim"}        # the whole ISA: ALU MUL (DSPs per lane), ACC_8BIT loads, every padding


# name: (LOG_BATCH, LOG_BLOCK, LOG_BUS_WIDTH, LOG_UOP, LOG_INP, LOG_WGT, LOG_ACC, INSN_QUEUE_DEPTH, TOKEN_QUEUE_DEPTH)
# The compute pipeline's depth (COMPUTE_LATENCY, hardware/params.py ComputePipeline) at 4 (the shortest: no
# datapath register) and 9 (SRAM outputs, products, result and up to two adder-tree levels registered); "-d9"
# names the deeper ones. Depths 5-8 place a subset of the same registers (the model counts them by structure,
# unsampled). The set was cut to what Yosys could do in about 90 minutes on the shared 2-core machine at load
# 11-18 (2026-12-07: 6-7 minutes for a 1x4x4 core, 16-18 for pynq); the 2026-11-25 set had 17 configs, BLOCK
# 8 and 32 and buses of 128-512 bits among them, which the current fit has not seen.
D9 = {"COMPUTE_LATENCY": 9}
TRAIN = dict([
    _c("pynq", 0, 4, 6, 15, 15, 18, 17, 512, 8),
    _c("pynq-d9", 0, 4, 6, 15, 15, 18, 17, 512, 8, **D9),
    _c("b1k4-bus6", 0, 2, 6, 12, 9, 10, 11, 512, 8, **FSIM),
    _c("b1k4-bus6-d9", 0, 2, 6, 12, 9, 10, 11, 512, 8, **FSIM, **D9),
    _c("b4k4-bus5", 2, 2, 5, 11, 10, 9, 12, 16, 4, DRAM_LATENCY=10, **FSIM),
    _c("b4k4-bus5-d9", 2, 2, 5, 11, 10, 9, 12, 16, 4, DRAM_LATENCY=10, **FSIM, **D9),
])

# the test suite's tiny config (TINY of tests/test_fpga_estimate.py), at both depths
HELD_OUT = dict([
    _c("tiny", 0, 2, 6, 10, 8, 8, 10, 4, 2),
    _c("tiny-d9", 0, 2, 6, 10, 8, 8, 10, 4, 2, **D9),
])

# Synthesised with and without the generator's DSP packing (hardware/dsp_packing.py), for the LUTs and FFs
# packing adds per packed multiplier at each depth (pynq packed at depth 4 was not run: 16 minutes more).
PACKING = {**{name: HELD_OUT[name] for name in ("tiny", "tiny-d9")}, "pynq-d9": TRAIN["pynq-d9"]}

# Synthesised with -nodsp (bench/fpga_fit.py: the LUTs a multiplier costs without DSPs) beside their DSP runs.
NODSP = {"b1k4-bus6": TRAIN["b1k4-bus6"], "b2k8-bus8": _c("b2k8-bus8", 1, 3, 8, 12, 12, 14, 14, 4, 2, **FSIM)[1]}

# Which configs each family is synthesised for. xc7 (Pynq-Z1/Z2) only: xcup's (Ultra96, ZCU104) samples of the
# RTL before the output buffer, the counters, the arbiters' register slices and the pipelined datapath
# (2026-11-25) were not rerun; coefficients.py keeps that fit, completed as hardware/fpga/model.py says (LEGACY).
FAMILIES = {
    "xc7": {"train": list(TRAIN), "held_out": list(HELD_OUT), "packing": list(PACKING)},
}


def config(name: str) -> HwConfig:
    spec = dict({**NODSP, **PACKING, **TRAIN, **HELD_OUT}[name])
    preset = spec.pop("preset")
    return load_config(preset, **spec)
