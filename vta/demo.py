"""The built-in demo: a blocked int8 GEMM with a requantising ReLU epilogue, run on the simulator.

``out = clip((A @ W.T) >> shift, 0, 127)`` with A (M, K) and W (N, K) int8, computed by one
instruction stream (micro-op load, input/weight DMA, GEMM over micro-op loops, three ALU ops, store),
checked bit-exactly against numpy. It is the main job until the graph pipeline exists.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hw_config import ALU_OPCODES, MEM_TYPES, HwConfig
from simulator.core import Simulator
from simulator.stats import RunStats, format_stats
from vta.isa import AluInsn, FinishInsn, GemmInsn, MemInsn, Uop, assemble, uops_to_bytes


@dataclass
class DemoResult:
    cfg: HwConfig
    shape: tuple[int, int, int]
    out: np.ndarray
    ref: np.ndarray
    stats: RunStats
    insns: np.ndarray

    @property
    def correct(self) -> bool:
        return bool(np.array_equal(self.out, self.ref))


def reference(a: np.ndarray, w: np.ndarray, shift: int) -> np.ndarray:
    """numpy model of the demo's computation."""
    acc = a.astype(np.int32) @ w.astype(np.int32).T
    return np.clip(acc >> shift, 0, 127).astype(np.int8)


def _fit_tiles(cfg: HwConfig, m: int, k: int, n: int) -> tuple[int, int, int]:
    if m % cfg.BATCH or k % cfg.BLOCK_IN or n % cfg.BLOCK_OUT:
        raise ValueError(f"demo shape M={m}, K={k}, N={n} must be multiples of BATCH={cfg.BATCH}, "
                         f"BLOCK_IN={cfg.BLOCK_IN}, BLOCK_OUT={cfg.BLOCK_OUT}")
    mt, kt, nt = m // cfg.BATCH, k // cfg.BLOCK_IN, n // cfg.BLOCK_OUT
    for what, need, depth in (("input", mt * kt, cfg.INP_BUFF_DEPTH), ("weight", nt * kt, cfg.WGT_BUFF_DEPTH),
                              ("accumulator", mt * nt, cfg.ACC_BUFF_DEPTH)):
        if need > depth:
            raise ValueError(f"demo shape M={m}, K={k}, N={n} needs {need} {what} tiles but the {what} SRAM "
                             f"holds {depth}: choose smaller matrices")
    return mt, kt, nt


def build_program(cfg: HwConfig, mt: int, kt: int, nt: int, shift: int,
                  addr: dict[str, int]) -> tuple[np.ndarray, bytes]:
    """The instruction stream and its micro-ops (uop 0: reset, 1..kt: GEMM over K tiles, kt+1: ALU)."""
    uops = [Uop()] + [Uop(dst_idx=0, src_idx=t, wgt_idx=t) for t in range(kt)] + [Uop()]
    alu = kt + 1
    loops = {"iter_out": mt, "iter_in": nt, "dst_factor_out": nt, "dst_factor_in": 1}

    def load(mem: str, count: int, base: int, **flags: int) -> MemInsn:
        return MemInsn(memory_type=MEM_TYPES[mem], dram_base=base // cfg.elem_bytes(mem), y_size=1, x_size=count,
                       x_stride=count, **flags)

    def alu_op(op: str, imm: int, **flags: int) -> AluInsn:
        return AluInsn(uop_bgn=alu, uop_end=alu + 1, alu_opcode=ALU_OPCODES[op], use_imm=1, imm=imm, **loops,
                       **flags)

    program = [
        load("UOP", len(uops), addr["uop"]),
        load("INP", mt * kt, addr["inp"]),
        load("WGT", nt * kt, addr["wgt"], push_next_dep=1),           # load -> compute: data is in
        GemmInsn(reset_reg=1, uop_bgn=0, uop_end=1, pop_prev_dep=1, **loops),
        GemmInsn(uop_bgn=1, uop_end=1 + kt, src_factor_out=kt, wgt_factor_in=kt, **loops),
        alu_op("SHR", shift),
        alu_op("MAX", 0),
        alu_op("MIN", 127, push_next_dep=1),                           # compute -> store: result ready
        MemInsn(opcode=1, memory_type=MEM_TYPES["OUT"], dram_base=addr["out"] // cfg.OUT_ELEM_BYTES, y_size=1,
                x_size=mt * nt, x_stride=mt * nt, pop_prev_dep=1, push_prev_dep=1),
        MemInsn(memory_type=MEM_TYPES["UOP"], pop_next_dep=1),         # compute NOP: wait for the store
        FinishInsn(),
    ]
    return assemble(program, cfg), uops_to_bytes(uops, cfg)


def run_demo(cfg: HwConfig, m: int = 64, k: int = 256, n: int = 256, shift: int = 8, seed: int = 0,
             trace: bool = False) -> DemoResult:
    mt, kt, nt = _fit_tiles(cfg, m, k, n)
    b, bi, bo = cfg.BATCH, cfg.BLOCK_IN, cfg.BLOCK_OUT
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    w = rng.integers(-128, 128, (n, k), dtype=np.int8)
    sim = Simulator(cfg)
    # DRAM layouts of the tiles: inputs [M/B][K/BI][B][BI], weights [N/BO][K/BI][BO][BI], output [M/B][N/BO][B][BO].
    inp = a.reshape(mt, b, kt, bi).transpose(0, 2, 1, 3)
    wgt = w.reshape(nt, bo, kt, bi).transpose(0, 2, 1, 3)
    addr = {"inp": sim.alloc(a.nbytes), "wgt": sim.alloc(w.nbytes), "out": sim.alloc(m * n),
            "uop": sim.alloc(4 * (kt + 2))}
    sim.write(addr["inp"], np.ascontiguousarray(inp))
    sim.write(addr["wgt"], np.ascontiguousarray(wgt))
    insns, uops = build_program(cfg, mt, kt, nt, shift, addr)
    sim.write(addr["uop"], uops)
    stats = sim.run(insns, trace=trace)
    out = sim.read(addr["out"], m * n).view(np.int8).reshape(mt, nt, b, bo).transpose(0, 2, 1, 3).reshape(m, n)
    return DemoResult(cfg, (m, k, n), out, reference(a, w, shift), stats, insns)


def format_report(r: DemoResult) -> str:
    m, k, n = r.shape
    gops = 2 * m * k * n / r.stats.seconds / 1e9 if r.stats.seconds else 0.0
    return "\n".join([
        (f"VTA simulator demo on {r.cfg.model} ({r.cfg.CLOCK_MHZ:g} MHz, {r.cfg.BATCH}x{r.cfg.BLOCK_IN}x"
        f"{r.cfg.BLOCK_OUT} GEMM core)"),
        f"  out = clip((A @ W.T) >> 8, 0, 127), A {m}x{k} int8, W {n}x{k} int8: {len(r.insns)} instructions",
        f"  bit-exact against numpy: {'yes' if r.correct else 'NO'}",
        f"  throughput {gops:.2f} GOPS (peak {r.cfg.peak_gops:.1f})",
        format_stats(r.stats, r.cfg),
    ])
