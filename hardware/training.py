"""The training run of the profile-guided build (hardware/build.py): a fixed program that exercises every path of the
RTL's model the way a network does, run on the instrumented library in a process of its own so its counts are
written when that process exits.

The program is one synchronised tile, repeated: padded input and weight loads (the load module), micro-op and
accumulator loads, GEMM loops with a reset and back-to-back accumulation, ALU ops with immediates and with a tensor
operand (compute), and a strided store (the store module), tokens passed as VTA's runtime passes them, FINISH last.
Its data is seeded, so two builds of one config train on the same cycles and produce the same library.

    python -m hardware.training LIBRARY CONFIG_JSON
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from hw_config import HwConfig, load_config
from hw_config.layout import ALU_OPCODES, MEM_TYPES, OPCODES

PAGE = 1 << 12
TILES = 64        # repeats of the tile: ~65,000 cycles on pynq, a second or so of the instrumented model
ROWS, COLS = 4, 8  # the tile's input: ROWS x COLS elements, padded by one on each side


def _mem(cfg: HwConfig, opcode: str, mem: str, sram: int, dram: int, y: int, x: int, stride: int,
         pad: int = 0, **tokens: int) -> np.ndarray:
    return cfg.insn_formats["mem"].encode_rows({
        "opcode": [OPCODES[opcode]], "memory_type": [MEM_TYPES[mem]], "sram_base": [sram], "dram_base": [dram],
        "y_size": [y], "x_size": [x], "x_stride": [stride], "y_pad_0": [pad], "y_pad_1": [pad], "x_pad_0": [pad],
        "x_pad_1": [pad], **{k: [v] for k, v in tokens.items()}})


def _loop(cfg: HwConfig, kind: str, uops: int, extents: tuple[int, int], dst: tuple[int, int],
          src: tuple[int, int], **fields: int) -> np.ndarray:
    columns = {"opcode": [OPCODES[kind]], "uop_bgn": [0], "uop_end": [uops], "iter_out": [extents[0]],
               "iter_in": [extents[1]], "dst_factor_out": [dst[0]], "dst_factor_in": [dst[1]],
               "src_factor_out": [src[0]], "src_factor_in": [src[1]], **{k: [v] for k, v in fields.items()}}
    return cfg.insn_formats["gemm" if kind == "GEMM" else "alu"].encode_rows(columns)


def training_program(cfg: HwConfig) -> tuple[list[tuple[int, np.ndarray]], np.ndarray, int]:
    """(DRAM segments as (byte address, bytes), the instruction stream, its byte address) of the training run."""
    rng = np.random.default_rng(0)
    taps = 3                                               # weights (and micro-ops) per output
    uop_words = cfg.insn_formats["uop"].encode_rows(
        {"dst_idx": np.zeros(taps, np.int64), "src_idx": np.arange(taps), "wgt_idx": np.arange(taps)},
        cfg.elem_bytes("UOP"))
    regions = {"UOP": uop_words.reshape(-1),
               "INP": rng.integers(0, 256, ROWS * COLS * cfg.elem_bytes("INP"), dtype=np.uint8),
               "WGT": rng.integers(0, 256, taps * cfg.elem_bytes("WGT"), dtype=np.uint8),
               "ACC": rng.integers(0, 256, COLS * cfg.elem_bytes("ACC"), dtype=np.uint8),
               "OUT": np.zeros(ROWS * COLS * cfg.elem_bytes("OUT"), np.uint8)}
    segments, base = [], PAGE
    dram = {}
    for name, data in regions.items():
        segments.append((base, data))
        dram[name] = base // cfg.elem_bytes(name)
        base += -(-data.size // PAGE) * PAGE
    outputs = ROWS * COLS
    gemm = {k: 0 for k in ("wgt_factor_out", "wgt_factor_in") if k in cfg.insn_formats["gemm"].names}
    insns = [_mem(cfg, "LOAD", "UOP", 0, dram["UOP"], 1, taps, taps)]
    for tile in range(TILES):
        first, last = tile == 0, tile == TILES - 1
        insns += [
            # load: the padded input and the weights, then a token to compute (after the first tile, once the
            # store has handed back the previous tile's token: compute -> load)
            _mem(cfg, "LOAD", "INP", 0, dram["INP"], ROWS, COLS, COLS, 1, pop_next_dep=int(not first)),
            _mem(cfg, "LOAD", "WGT", 0, dram["WGT"], 1, taps, taps, push_next_dep=1),
            # compute: bias rows, a reset GEMM, two accumulating ones, ALU with immediates and a tensor operand
            _mem(cfg, "LOAD", "ACC", outputs, dram["ACC"], 1, COLS, COLS, pop_prev_dep=1,
                 pop_next_dep=int(not first)),
            _loop(cfg, "GEMM", taps, (ROWS, COLS), (COLS, 1), (COLS + 2, 1), reset_reg=1, **gemm),
            _loop(cfg, "GEMM", taps, (ROWS, COLS), (COLS, 1), (COLS + 2, 1), **gemm),
            _loop(cfg, "GEMM", taps, (ROWS, COLS), (COLS, 1), (COLS + 2, 1), **gemm),
            _loop(cfg, "ALU", 1, (ROWS, COLS), (COLS, 1), (COLS, 1), alu_opcode=ALU_OPCODES["ADD"], use_imm=0),
            _loop(cfg, "ALU", 1, (ROWS, COLS), (COLS, 1), (COLS, 1), alu_opcode=ALU_OPCODES["SHR"], use_imm=1,
                  imm=5),
            _loop(cfg, "ALU", 1, (ROWS, COLS), (COLS, 1), (COLS, 1), alu_opcode=ALU_OPCODES["MAX"], use_imm=1,
                  imm=-100),
            _loop(cfg, "ALU", 1, (ROWS, COLS), (COLS, 1), (COLS, 1), alu_opcode=ALU_OPCODES["MIN"], use_imm=1,
                  imm=100, push_prev_dep=int(not last), push_next_dep=1),
            # store: the tile, strided, then the token back to compute
            _mem(cfg, "STORE", "OUT", 0, dram["OUT"], ROWS, COLS, COLS, pop_prev_dep=1, push_prev_dep=1),
        ]
    insns.append(cfg.insn_formats["finish"].encode_rows({"opcode": [OPCODES["FINISH"]], "pop_next_dep": [1]}))
    return segments, np.concatenate(insns), base


def train(library: Path, cfg: HwConfig) -> int:
    """Run the training program on ``library`` (an instrumented build); returns its cycles."""
    from hardware.device import RtlDevice

    dev = RtlDevice(cfg, library=library)
    segments, insns, insn_addr = training_program(cfg)
    for addr, data in segments:
        dev.write(addr, data)
    return dev.run_program(insns, insn_addr)


def main(argv: list[str] | None = None) -> int:
    library, config = (argv if argv is not None else sys.argv[1:])
    print(train(Path(library), load_config(Path(config))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
