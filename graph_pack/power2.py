"""Power-of-two scales: VTA requantizes by shifts, so every quantized tensor stands for ``q * 2**exp``."""

from __future__ import annotations

import math

import numpy as np

INT8_MAX = 127


def power2_exponent(max_abs: float, levels: int = INT8_MAX) -> int:
    """The smallest e with max_abs / 2**e <= levels (so rounding never exceeds the int8 range)."""
    if not np.isfinite(max_abs) or max_abs <= 0:
        return 0
    e = math.ceil(math.log2(max_abs / levels))
    while max_abs / 2.0 ** e > levels:
        e += 1
    return e
