"""Operator templates on ResNet-18's conv layers C2..C11 (default configs): how fast programs are made and run.

Per layer: program generation time (compile_op, including the default-config search), instructions,
DRAM bytes moved, simulated cycles, GOPS at the preset's clock, and simulation wall time; then the
totals. References in the same run: numpy's int64 direct convolution of the same layer (the check),
and the figures TVM-VTA is documented to need (0.4-4.5 s per layer to build; ~0.1 s to simulate all ten
tuned layers in its functional simulator on 2 cores).

    python bench/templates.py [--config pynq]
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np

from hw_config import load_config
from vta.ops import compile_op, random_inputs
from vta.workloads import RESNET18

EPILOGUE = [("bias",), ("shr", 8), ("clip", 0, 127)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="pynq", help="preset name or JSON path (default: pynq)")
    args = ap.parse_args()
    cfg = load_config(args.config)
    print(f"# templates on {cfg.model}, {platform.machine()}, {time.strftime('%Y-%m-%d')}")
    print("| layer | gen ms | insns | DRAM KiB | cycles | GOPS | sim ms | exact |")
    print("|---|---|---|---|---|---|---|---|")
    total = {"gen": 0.0, "sim": 0.0, "cycles": 0, "insns": 0, "bytes": 0, "ops": 0}
    for name, (h, w, ci, co, k, pad, stride) in RESNET18.items():
        t = time.perf_counter()
        op = compile_op("conv2d", cfg, data_shape=(cfg.BATCH, ci, h, w), kernel_shape=(co, ci, k, k),
                        strides=stride, padding=pad, epilogue=EPILOGUE)
        gen = time.perf_counter() - t
        inputs = random_inputs(op, seed=1)
        out = op.run(**inputs)  # warm-up and correctness
        t = time.perf_counter()
        op.run(**inputs)
        sim = time.perf_counter() - t
        exact = np.array_equal(out, op.reference(**inputs))
        st = op.stats
        moved = st.dram_bytes
        oh = (h + 2 * pad - k) // stride + 1
        ops = 2 * cfg.BATCH * oh * oh * k * k * ci * co
        print(f"| {name} | {gen * 1e3:.0f} | {op.num_insns} | {moved / 1024:.0f} | {st.cycles:,} | "
              f"{ops / st.seconds / 1e9:.1f} | {sim * 1e3:.1f} | {'yes' if exact else 'NO'} |")
        for key, v in (("gen", gen), ("sim", sim), ("cycles", st.cycles), ("insns", op.num_insns),
                       ("bytes", moved), ("ops", ops)):
            total[key] += v
    seconds = total["cycles"] / (cfg.CLOCK_MHZ * 1e6)
    print(f"| total | {total['gen'] * 1e3:.0f} | {total['insns']} | {total['bytes'] / 1024:.0f} | {total['cycles']:,} | "
          f"{total['ops'] / seconds / 1e9:.1f} | {total['sim'] * 1e3:.1f} | |")
    print(f"generation of all ten: {total['gen']:.2f} s (target < 1 s; TVM-VTA 0.4-4.5 s per layer); "
          f"simulation of all ten: {total['sim']:.3f} s (VTA's functional simulator: ~0.1 s, no cycles)")


if __name__ == "__main__":
    main()
