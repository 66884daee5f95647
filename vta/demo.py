"""The built-in demo: a blocked int8 GEMM with a requantising ReLU epilogue, run on the simulator.

``out = clip((A @ W.T) >> 8, 0, 127)`` with A (M, K) and W (N, K) int8, compiled by the dense
template with its default (double-buffered) schedule and checked bit-exactly against numpy. It is the
main job until the graph pipeline exists.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hw_config import HwConfig
from simulator.stats import RunStats, format_stats
from vta.templates import compile_op


@dataclass
class DemoResult:
    cfg: HwConfig
    shape: tuple[int, int, int]
    out: np.ndarray
    ref: np.ndarray
    stats: RunStats
    insns: np.ndarray
    config: dict

    @property
    def correct(self) -> bool:
        return bool(np.array_equal(self.out, self.ref))


def reference(a: np.ndarray, w: np.ndarray, shift: int) -> np.ndarray:
    """numpy model of the demo's computation."""
    acc = a.astype(np.int64) @ w.astype(np.int64).T
    return np.clip(acc >> shift, 0, 127).astype(np.int8)


def run_demo(cfg: HwConfig, m: int = 64, k: int = 256, n: int = 256, shift: int = 8, seed: int = 0,
             trace: bool = False) -> DemoResult:
    op = compile_op("dense", cfg, data_shape=(m, k), kernel_shape=(n, k), epilogue=[("shr", shift), ("clip", 0, 127)])
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    w = rng.integers(-128, 128, (n, k), dtype=np.int8)
    out = op.run(a, w)
    if trace:  # rerun traced (the program and its inputs are in place)
        op.stats = op.program.run(trace=True)
    return DemoResult(cfg, (m, k, n), out, reference(a, w, shift), op.stats, op.program.streams[0].insns, op.config)


def format_report(r: DemoResult) -> str:
    m, k, n = r.shape
    gops = 2 * m * k * n / r.stats.seconds / 1e9 if r.stats.seconds else 0.0
    return "\n".join([
        (f"VTA simulator demo on {r.cfg.model} ({r.cfg.CLOCK_MHZ:g} MHz, {r.cfg.BATCH}x{r.cfg.BLOCK_IN}x"
        f"{r.cfg.BLOCK_OUT} GEMM core)"),
        (f"  out = clip((A @ W.T) >> 8, 0, 127), A {m}x{k} int8, W {n}x{k} int8: dense template, config {r.config}, "
        f"{len(r.insns)} instructions"),
        f"  bit-exact against numpy: {'yes' if r.correct else 'NO'}",
        f"  throughput {gops:.2f} GOPS (peak {r.cfg.peak_gops:.1f})",
        format_stats(r.stats, r.cfg),
    ])
