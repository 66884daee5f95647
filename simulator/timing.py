"""The timing model's formulas that compilers and cost models reuse (docs/simulator.md, "Timing model")."""

from __future__ import annotations

import numpy as np

from hw_config import HwConfig


def dma_cycles(cfg: HwConfig, rows, row_bytes, transfers=1):
    """Cycles of ``transfers`` 2D DMA transfers of ``rows`` rows of ``row_bytes`` bytes each (a contiguous transfer
    is one row): per transfer the DRAM latency, then per row its bus beats plus a gap after every burst. Integers
    or numpy arrays (a float array of fractional bytes rounds each row up to whole beats, as the hardware does)."""
    beats = _row_beats(cfg, row_bytes)
    bursts = -(-beats // cfg.DMA_BURST_BEATS)
    return transfers * (cfg.DRAM_LATENCY + rows * (beats + bursts * cfg.DMA_BURST_GAP))


def dma_beats(cfg: HwConfig, rows, row_bytes, transfers=1):
    """Bus beats of ``transfers`` 2D DMA transfers (what ``dma_cycles`` counts besides latency and gaps)."""
    return transfers * rows * _row_beats(cfg, row_bytes)


def _row_beats(cfg: HwConfig, row_bytes):
    """Bus beats of a row: its bytes rounded up to whole beats."""
    return -(-np.asarray(row_bytes) // cfg.BUS_BYTES)


def shared_spans(a_beats, a_span, b_beats, b_span):
    """Two transfers that start together on the shared DRAM bus (docs/simulator.md, "The shared DRAM bus"):
    their spans (solo cycles without the DRAM latency) stretched by the max-min fair sharing until the first
    is done. A cost model's approximation of the simulator's rule for this one common case (a tile's store
    beside the next tile's loads); integers or numpy arrays."""
    a_beats, a_span = np.asarray(a_beats, np.float64), np.maximum(np.asarray(a_span, np.float64), 1.0)
    b_beats, b_span = np.asarray(b_beats, np.float64), np.maximum(np.asarray(b_span, np.float64), 1.0)
    ra, rb = a_beats / a_span, b_beats / b_span
    small = np.minimum(ra, rb)
    small_share = np.minimum(small, 0.5)
    level = 1.0 - small_share     # what the larger asker gets (at least half)
    crowded = ra + rb > 1.0
    fa = np.where(crowded, np.where(ra <= rb, small_share, level) / np.maximum(ra, 1e-12), 1.0)
    fb = np.where(crowded, np.where(rb < ra, small_share, level) / np.maximum(rb, 1e-12), 1.0)
    fa, fb = np.minimum(fa, 1.0), np.minimum(fb, 1.0)
    overlap = np.minimum(a_span / np.maximum(fa, 1e-12), b_span / np.maximum(fb, 1e-12))
    return a_span + overlap * (1.0 - fa), b_span + overlap * (1.0 - fb)
