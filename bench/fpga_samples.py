"""The configs the analytic resource model is fitted to (TRAIN) and checked on (HELD_OUT), per Yosys family.

Each is the pynq preset with overrides; they span BATCH 1-4, BLOCK 4-32, buses of 32-512 bits, SRAMs from a few
KiB to VTA's sizes, instruction queues of 4-2048, token queues of 2-16, DRAM latencies of 10-100 cycles (the
depth of the DMA engines' FIFOs follows it) and the capability sets (which ALU opcodes and loads are built). The held-out configs are other
combinations of the same axes (and the ultra96 preset); none of them is in TRAIN.
"""

from __future__ import annotations

from hw_config import HwConfig, load_config

_K = ("LOG_BATCH", "LOG_BLOCK", "LOG_BUS_WIDTH", "LOG_UOP_BUFF_SIZE", "LOG_INP_BUFF_SIZE", "LOG_WGT_BUFF_SIZE",
      "LOG_ACC_BUFF_SIZE", "INSN_QUEUE_DEPTH", "TOKEN_QUEUE_DEPTH")


def _c(name: str, *values: int, preset: str = "pynq", **extra) -> tuple[str, dict]:
    return name, {"preset": preset, **dict(zip(_K, values, strict=True)), **extra}


FSIM = {"CAPABILITIES": "fsim"}        # the whole ISA: ALU MUL (DSPs per lane), ACC_8BIT loads, every padding


# name: (LOG_BATCH, LOG_BLOCK, LOG_BUS_WIDTH, LOG_UOP, LOG_INP, LOG_WGT, LOG_ACC, INSN_QUEUE_DEPTH, TOKEN_QUEUE_DEPTH)
TRAIN = dict([
    _c("b1k4-bus6", 0, 2, 6, 12, 9, 10, 11, 512, 8, **FSIM),
    _c("b1k8-bus7", 0, 3, 7, 13, 12, 14, 14, 64, 8, DRAM_LATENCY=64),
    _c("b2k8-bus8", 1, 3, 8, 12, 12, 14, 14, 4, 2, **FSIM),
    _c("pynq", 0, 4, 6, 15, 15, 18, 17, 512, 8),
    _c("b2k16-bus7", 1, 4, 7, 14, 14, 17, 16, 256, 8, CAPABILITIES="vta-hls", DMA_BURST_BEATS=64),
    _c("b4k4-bus5", 2, 2, 5, 11, 10, 9, 12, 16, 4, DRAM_LATENCY=10, **FSIM),
    _c("b4k8-bus9", 2, 3, 9, 15, 13, 15, 15, 1024, 8, DRAM_LATENCY=100, **FSIM),
    _c("b1k32-bus7", 0, 5, 7, 15, 16, 19, 18, 512, 8, CAPABILITIES="vta-hls"),
    _c("b1k16-bus8-small", 0, 4, 8, 10, 10, 12, 12, 32, 8, DMA_BURST_GAP=0, **FSIM),
    _c("b2k4-bus6", 1, 2, 6, 14, 12, 12, 13, 2048, 16, CAPABILITIES="vta-chisel"),
    _c("b1k8-bus6-big", 0, 3, 6, 15, 14, 16, 16, 512, 8, **FSIM),
])

HELD_OUT = dict([
    _c("b2k8-bus7", 1, 3, 7, 14, 13, 15, 15, 128, 4, **FSIM),
    _c("b2k16-bus6", 1, 4, 6, 15, 15, 18, 17, 512, 8),
    _c("b1k4-bus8", 0, 2, 8, 13, 11, 11, 12, 64, 2, DRAM_LATENCY=64, CAPABILITIES="vta-hls"),
    _c("b4k4-bus7", 2, 2, 7, 12, 12, 10, 14, 256, 8, **FSIM),
    _c("ultra96", 0, 4, 7, 15, 15, 18, 17, 512, 8, preset="ultra96"),
    _c("b1k32-bus8", 0, 5, 8, 13, 14, 17, 16, 128, 8, **FSIM),
])

# Which configs each family is synthesised for: xc7 (Pynq-Z1/Z2) all; xcup (Ultra96, ZCU104) a subset.
FAMILIES = {
    "xc7": {"train": list(TRAIN), "held_out": list(HELD_OUT)},
    "xcup": {"train": ["b1k4-bus6", "b1k8-bus7", "b2k8-bus8", "pynq", "b2k16-bus7", "b4k4-bus5", "b4k8-bus9",
                       "b1k32-bus7"],
             "held_out": ["ultra96", "b2k8-bus7", "b1k4-bus8", "b4k4-bus7", "b1k32-bus8"]},
}


def config(name: str) -> HwConfig:
    spec = dict({**TRAIN, **HELD_OUT}[name])
    preset = spec.pop("preset")
    return load_config(preset, **spec)
