"""Simulator speed: a compute-bound blocked GEMM replayed end to end, against numpy in the same run.

The program holds A (M x K) and W (N x K) in SRAM and repeats one GEMM instruction over all tiles,
so almost all time is the GEMM inner loop. Reports simulated int8 MACs per host second next to
numpy's int32 matmul of the same matrices, simulated cycles per host second (with data and
timing-only), and the ratio to the pure-Python reference executor on a smaller program.

    python bench/sim_speed.py [--config pynq] [--repeat 20]
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np

from hw_config import MEM_TYPES, load_config
from simulator.core import Simulator
from simulator.reference import ReferenceSimulator
from vta.isa import FinishInsn, GemmInsn, MemInsn, Uop, assemble, uops_to_bytes


def gemm_program(sim, m: int, k: int, n: int, repeat: int, seed: int = 0):
    """Load A, W and micro-ops, reset the accumulators, then `repeat` GEMMs over every tile."""
    cfg = sim.cfg
    mt, kt, nt = m // cfg.BATCH, k // cfg.BLOCK_IN, n // cfg.BLOCK_OUT
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    w = rng.integers(-128, 128, (n, k), dtype=np.int8)
    a_addr, w_addr, u_addr = sim.alloc(a.nbytes), sim.alloc(w.nbytes), sim.alloc(4 * (kt + 1))
    sim.write(a_addr, np.ascontiguousarray(a.reshape(mt, cfg.BATCH, kt, cfg.BLOCK_IN).transpose(0, 2, 1, 3)))
    sim.write(w_addr, np.ascontiguousarray(w.reshape(nt, cfg.BLOCK_OUT, kt, cfg.BLOCK_IN).transpose(0, 2, 1, 3)))
    sim.write(u_addr, uops_to_bytes([Uop()] + [Uop(src_idx=t, wgt_idx=t) for t in range(kt)], cfg))
    loops = {"iter_out": mt, "iter_in": nt, "dst_factor_out": nt, "dst_factor_in": 1}

    def load(mem: str, count: int, addr: int, **flags: int) -> MemInsn:
        return MemInsn(memory_type=MEM_TYPES[mem], dram_base=addr // cfg.elem_bytes(mem), y_size=1, x_size=count,
                       x_stride=count, **flags)

    program = [load("UOP", kt + 1, u_addr), load("INP", mt * kt, a_addr), load("WGT", nt * kt, w_addr, push_next_dep=1),
               GemmInsn(reset_reg=1, uop_bgn=0, uop_end=1, pop_prev_dep=1, **loops)]
    program += [GemmInsn(uop_bgn=1, uop_end=kt + 1, src_factor_out=kt, wgt_factor_in=kt, **loops)] * repeat
    program.append(FinishInsn())
    return assemble(program, cfg), a, w


def best_of(fn, runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="pynq", help="preset name or JSON path (default: pynq)")
    ap.add_argument("--repeat", type=int, default=20, help="GEMM instructions in the stream (default: 20)")
    args = ap.parse_args()
    cfg = load_config(args.config)
    m, k = 32 * cfg.BATCH, 256
    # As many output columns (up to 1024) as the weight and accumulator SRAMs hold.
    n_tiles = min(cfg.WGT_BUFF_DEPTH // (k // cfg.BLOCK_IN), cfg.ACC_BUFF_DEPTH // (m // cfg.BATCH),
                  1024 // cfg.BLOCK_OUT)
    n = n_tiles * cfg.BLOCK_OUT
    sim = Simulator(cfg)
    insns, a, w = gemm_program(sim, m, k, n, args.repeat)
    stats = sim.run(insns)
    acc = sim.read_sram("acc", 0, (m // cfg.BATCH) * (n // cfg.BLOCK_OUT))
    got = acc.reshape(m // cfg.BATCH, n // cfg.BLOCK_OUT, cfg.BATCH, cfg.BLOCK_OUT).transpose(0, 2, 1, 3).reshape(m, n)
    a32, w32t = a.astype(np.int32), w.astype(np.int32).T
    assert np.array_equal(got, (a32 @ w32t) * args.repeat), "simulator result differs from numpy"

    macs = m * k * n * args.repeat
    t_sim = best_of(lambda: sim.run(insns))
    t_timing = best_of(lambda: sim.run(insns, compute=False))
    t_np = best_of(lambda: a32 @ w32t)
    sim_rate, np_rate = macs / t_sim, m * k * n / t_np

    # The readable reference executor on a 1-GEMM version of the same program.
    small_ref, small_c = ReferenceSimulator(cfg), Simulator(cfg)
    small_insns, _, _ = gemm_program(small_ref, m, k, n, 1)
    gemm_program(small_c, m, k, n, 1)
    t_ref = best_of(lambda: small_ref.run(small_insns), runs=1)
    t_c_small = best_of(lambda: small_c.run(small_insns))

    print(f"# sim_speed on {cfg.model}, {platform.processor() or platform.machine()}, {time.strftime('%Y-%m-%d')}")
    print(f"GEMM {m}x{k} by {k}x{n} int8, {args.repeat} GEMM instructions, {stats.cycles:,} simulated cycles")
    print("| measure | value |")
    print("|---|---|")
    print(f"| simulated int8 MACs per host second | {sim_rate / 1e9:.2f} G |")
    print(f"| numpy int32 matmul MACs per second (same matrices) | {np_rate / 1e9:.2f} G |")
    print(f"| ratio simulator / numpy | {sim_rate / np_rate:.1f}x |")
    print(f"| simulated cycles per host second, data computed | {stats.cycles / t_sim / 1e6:.1f} M |")
    print(f"| simulated cycles per host second, timing only | {stats.cycles / t_timing / 1e6:.1f} M |")
    print(f"| C simulator vs pure-Python reference (1 GEMM) | {t_ref / t_c_small:.0f}x faster |")


if __name__ == "__main__":
    main()
