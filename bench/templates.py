"""Operator templates on ResNet-18's conv layers C2..C11 (default configs): how fast programs are made and run.

Per layer: program generation time (compile_op, including the default-config search), instructions,
DRAM bytes moved, simulated cycles, GOPS at the preset's clock, and simulation wall time (data and
cycles, best of 3); then the totals. Reference in the same run: numpy's int64 direct convolution plus
epilogue of the same layer (``op.reference``, which every output is checked against bit for bit), timed
once per layer. No figure from elsewhere is printed: none was found for TVM-VTA's per-layer build time
or its functional simulator's wall time.

    python bench/templates.py [--config pynq]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _host import header, run_main

from hw_config import load_config
from vta.templates import compile_op, random_inputs
from vta.workloads import RESNET18

EPILOGUE = [("bias",), ("shr", 8), ("clip", 0, 127)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="pynq", help="preset name or JSON path (default: pynq)")
    args = ap.parse_args()
    cfg = load_config(args.config)
    print(header("templates", f"ResNet-18 C2..C11 on {cfg.model}, default configs, vs numpy's reference"))
    print(f"| layer | gen ms | insns | DRAM KiB | cycles | GOPS @{cfg.CLOCK_MHZ:g} MHz | sim ms | numpy ref ms "
          "| exact |")
    print("|---|---|---|---|---|---|---|---|---|")
    total = {"gen": 0.0, "sim": 0.0, "ref": 0.0, "cycles": 0, "insns": 0, "bytes": 0, "ops": 0}
    for name, (h, w, ci, co, k, pad, stride) in RESNET18.items():
        t = time.perf_counter()
        op = compile_op("conv2d", cfg, data_shape=(cfg.BATCH, ci, h, w), kernel_shape=(co, ci, k, k),
                        strides=stride, padding=pad, epilogue=EPILOGUE)
        gen = time.perf_counter() - t
        inputs = random_inputs(op, seed=1)
        out = op.run(**inputs)  # warm-up and correctness
        sim = float("inf")
        for _ in range(3):
            t = time.perf_counter()
            op.run(**inputs)
            sim = min(sim, time.perf_counter() - t)
        t = time.perf_counter()
        expect = op.reference(**inputs)
        ref = time.perf_counter() - t
        exact = np.array_equal(out, expect)
        st = op.stats
        moved = st.dram_bytes
        oh = (h + 2 * pad - k) // stride + 1
        ops = 2 * cfg.BATCH * oh * oh * k * k * ci * co
        print(f"| {name} | {gen * 1e3:.0f} | {op.num_insns} | {moved / 1024:.0f} | {st.cycles:,} | "
              f"{ops / st.seconds / 1e9:.1f} | {sim * 1e3:.1f} | {ref * 1e3:.0f} | {'yes' if exact else 'NO'} |")
        for key, v in (("gen", gen), ("sim", sim), ("ref", ref), ("cycles", st.cycles), ("insns", op.num_insns),
                       ("bytes", moved), ("ops", ops)):
            total[key] += v
    seconds = total["cycles"] / (cfg.CLOCK_MHZ * 1e6)
    gops = total["ops"] / seconds / 1e9
    print(f"| total | {total['gen'] * 1e3:.0f} | {total['insns']} | {total['bytes'] / 1024:.0f} | {total['cycles']:,} | "
          f"{gops:.1f} ({gops / cfg.peak_gops:.0%} of {cfg.peak_gops:g} peak) | {total['sim'] * 1e3:.1f} | "
          f"{total['ref'] * 1e3:.0f} | |")
    print(f"generation of all ten: {total['gen']:.2f} s (target < 1 s); simulation of all ten, data and cycles: "
          f"{total['sim']:.3f} s; numpy's reference of all ten: {total['ref']:.2f} s, "
          f"{total['ref'] / total['sim']:.1f}x the simulation")


if __name__ == "__main__":
    run_main(main)
