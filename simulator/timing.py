"""The timing model's formulas that compilers and cost models reuse (docs/simulator.md, "Timing model")."""

from __future__ import annotations

import numpy as np

from hw_config import HwConfig


def dma_cycles(cfg: HwConfig, rows, row_bytes, transfers=1):
    """Cycles of ``transfers`` 2D DMA transfers of ``rows`` rows of ``row_bytes`` bytes each (a contiguous transfer
    is one row): per transfer the DRAM latency, then per row its bus beats plus a gap after every burst. Integers
    or numpy arrays (a float array of fractional bytes rounds each row up to whole beats, as the hardware does)."""
    beats = -(-np.asarray(row_bytes) // cfg.BUS_BYTES)
    bursts = -(-beats // cfg.DMA_BURST_BEATS)
    return transfers * (cfg.DRAM_LATENCY + rows * (beats + bursts * cfg.DMA_BURST_GAP))
