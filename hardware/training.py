"""The training run of the profile-guided build (hardware/build.py, VTA_RTL_PGO=1): a fixed program that exercises every path of the
RTL's model the way a network does, run on the instrumented library in a process of its own so its counts are
written when that process exits.

The program is a 3x3 convolution's tile, repeated and double-buffered as VTA's runtime runs two virtual threads, so
the three modules overlap as in a network's layers: padded input and weight loads (the load module), micro-op and
accumulator loads, GEMM loops with a reset and back-to-back accumulation, ALU ops with a tensor operand and with
immediates (compute), and strided stores (the store module), tokens passed as VTA's runtime passes them, FINISH
last. (A first version ran the tiles one after another, the modules never overlapping: the library trained on it
took 1.17x the CPU time of a plain build on ResNet-18, where one trained on ResNet-18 itself took 0.875x.)
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
TILES = 64        # tiles: ~87,000 cycles on pynq, a second or so of the instrumented model
ROWS, COLS = 4, 8  # the tile's input: ROWS x COLS elements, padded by one on each side


def _mem(cfg: HwConfig, opcode: str, mem: str, sram: int, dram: int, y: int, x: int, stride: int,
         pad: int = 0, **tokens: int) -> np.ndarray:
    return cfg.insn_formats["mem"].encode_rows({
        "opcode": [OPCODES[opcode]], "memory_type": [MEM_TYPES[mem]], "sram_base": [sram], "dram_base": [dram],
        "y_size": [y], "x_size": [x], "x_stride": [stride], "y_pad_0": [pad], "y_pad_1": [pad], "x_pad_0": [pad],
        "x_pad_1": [pad], **{k: [v] for k, v in tokens.items()}})


def _loop(cfg: HwConfig, kind: str, uops: tuple[int, int], extents: tuple[int, int], dst: tuple[int, int],
          src: tuple[int, int], **fields: int) -> np.ndarray:
    columns = {"opcode": [OPCODES[kind]], "uop_bgn": [uops[0]], "uop_end": [uops[1]], "iter_out": [extents[0]],
               "iter_in": [extents[1]], "dst_factor_out": [dst[0]], "dst_factor_in": [dst[1]],
               "src_factor_out": [src[0]], "src_factor_in": [src[1]], **{k: [v] for k, v in fields.items()}}
    return cfg.insn_formats["gemm" if kind == "GEMM" else "alu"].encode_rows(columns)


def training_program(cfg: HwConfig) -> tuple[list[tuple[int, np.ndarray]], np.ndarray, int]:
    """(DRAM segments as (byte address, bytes), the instruction stream, its byte address) of the training run:
    TILES tiles of a 3x3 convolution over a padded ROWS x COLS input, double-buffered as VTA's runtime runs two
    virtual threads (tile t in SRAM half t % 2), so loads, compute and stores overlap as in a network's layers."""
    rng = np.random.default_rng(0)
    taps, half = 9, 64                                     # 3x3 kernel taps; SRAM rows between the two halves
    wgt_half = 16
    tap_y, tap_x = np.divmod(np.arange(taps), 3)
    src = tap_y * (COLS + 2) + tap_x                       # each tap's input row in the padded tile
    uop_words = cfg.insn_formats["uop"].encode_rows(
        {"dst_idx": np.repeat([0, half], taps), "src_idx": np.concatenate([src, src + half]),
         "wgt_idx": np.concatenate([np.arange(taps), np.arange(taps) + wgt_half])}, cfg.elem_bytes("UOP"))
    regions = {"UOP": uop_words.reshape(-1),
               "INP": rng.integers(0, 256, ROWS * COLS * cfg.elem_bytes("INP"), dtype=np.uint8),
               "WGT": rng.integers(0, 256, taps * cfg.elem_bytes("WGT"), dtype=np.uint8),
               "ACC": rng.integers(0, 256, COLS * cfg.elem_bytes("ACC"), dtype=np.uint8),
               "OUT": np.zeros(2 * ROWS * COLS * cfg.elem_bytes("OUT"), np.uint8)}
    segments, base = [], PAGE
    dram = {}
    for name, data in regions.items():
        segments.append((base, data))
        dram[name] = base // cfg.elem_bytes(name)
        base += -(-data.size // PAGE) * PAGE
    gemm = {k: 0 for k in ("wgt_factor_out", "wgt_factor_in") if k in cfg.insn_formats["gemm"].names}
    tile_loop = {"extents": (ROWS, COLS), "dst": (COLS, 1)}
    insns = [_mem(cfg, "LOAD", "UOP", 0, dram["UOP"], 1, 2 * taps, 2 * taps)]
    for tile in range(TILES):
        h = tile % 2
        uops, alu_uop = (h * taps, (h + 1) * taps), (h * taps, h * taps + 1)
        waits, hands_back = tile >= 2, tile + 2 < TILES   # the half's previous user: tile - 2
        insns += [
            # load: the padded input and the weights into this tile's half, once compute is done with the tile
            # that used it before (compute -> load), then a token to compute (load -> compute)
            _mem(cfg, "LOAD", "INP", h * half, dram["INP"], ROWS, COLS, COLS, 1, pop_next_dep=int(waits)),
            _mem(cfg, "LOAD", "WGT", h * wgt_half, dram["WGT"], 1, taps, taps, push_next_dep=1),
            # compute: bias rows, once the store is done with the half's previous tile (store -> compute); a reset
            # GEMM, two accumulating ones, ALU with a tensor operand and immediates
            _mem(cfg, "LOAD", "ACC", h * half + ROWS * COLS, dram["ACC"], 1, COLS, COLS, pop_prev_dep=1,
                 pop_next_dep=int(waits)),
            _loop(cfg, "GEMM", uops, src=(COLS + 2, 1), reset_reg=1, **tile_loop, **gemm),
            _loop(cfg, "GEMM", uops, src=(COLS + 2, 1), **tile_loop, **gemm),
            _loop(cfg, "GEMM", uops, src=(COLS + 2, 1), **tile_loop, **gemm),
            _loop(cfg, "ALU", alu_uop, src=(COLS, 1), alu_opcode=ALU_OPCODES["ADD"], use_imm=0, **tile_loop),
            _loop(cfg, "ALU", alu_uop, src=(COLS, 1), alu_opcode=ALU_OPCODES["SHR"], use_imm=1, imm=5, **tile_loop),
            _loop(cfg, "ALU", alu_uop, src=(COLS, 1), alu_opcode=ALU_OPCODES["MAX"], use_imm=1, imm=-100,
                  **tile_loop),
            _loop(cfg, "ALU", alu_uop, src=(COLS, 1), alu_opcode=ALU_OPCODES["MIN"], use_imm=1, imm=100,
                  push_prev_dep=int(hands_back), push_next_dep=1, **tile_loop),
            # store: the tile, strided, then the half back to compute (store -> compute)
            _mem(cfg, "STORE", "OUT", h * half, dram["OUT"] + h * ROWS * COLS, ROWS, COLS, COLS, pop_prev_dep=1,
                 push_prev_dep=1),
        ]
    # the last two stores' tokens: one taken by a one-row reset GEMM, the other by FINISH (so it waits for both)
    insns.append(_loop(cfg, "GEMM", (0, 1), (1, 1), (0, 0), (0, 0), reset_reg=1, pop_next_dep=1, **gemm))
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
