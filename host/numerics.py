"""The float32 primitives the host compiler's kernels compute, defined here in numpy operation by operation, so a
compiled kernel and this reference agree bit for bit.

- ``exp``: range reduction and a polynomial (Cephes' expf, float32, no fused multiply-add), written with the
  arithmetic a SIMD unit has, so a vector loop computes 16 lanes at once instead of calling libm's double ``exp``
  per element. Max error 1 ulp against the correctly rounded exp over the normal range
  (``bench/host_ops.py --exp-ulp`` measures it against numpy's float32 exp and float64 exp; docs/benchmarks.md).
- Row reductions (``row_sum``, ``row_max``): a row of K values is read in ``LANES``-wide chunks; lane j keeps
  the partial over elements j, j + LANES, j + 2 * LANES, ... (in that order, the row padded with the identity),
  then the partials are combined in lane order. A vector loop keeps the partials in one register, so the sum of
  a row vectorises without reassociating anything.

``host.ops``' softmax and layer norm are written in these terms, and ``graph_pack.kernels`` computes them with
these functions: the numpy reference a compiled run is checked against bit for bit.
"""

from __future__ import annotations

import numpy as np

LANES = 16   # partials per row reduction: one AVX-512 register, two AVX2 ones (part of the definition of a sum)

F32 = np.float32
# the input range exp computes: above HI the result overflows to inf, below LO it underflows to 0 (exact there:
# exp(-104) < 2**-150, half the smallest subnormal)
EXP_HI, EXP_LO = F32(88.75), F32(-104.0)
LOG2E = F32(1.44269504088896341)
ROUND_MAGIC = F32(12582912.0)   # 1.5 * 2**23: (t + M) - M is t rounded to the nearest integer, ties to even
LN2_HI, LN2_LO = F32(0.693359375), F32(-2.12194440e-4)   # ln 2 = HI + LO; n * HI is exact for |n| < 2**15
# Cephes expf's minimax polynomial: exp(r) ~= 1 + r + r*r * P(r) on |r| <= ln(2) / 2
EXP_POLY = tuple(F32(c) for c in (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
                                  1.6666665459e-1, 5.0000001201e-1))


def exp(x: np.ndarray) -> np.ndarray:
    """exp of float32 ``x`` as the compiled kernels compute it, in the same order of float32 operations:

        c = clamp(x, LO, HI)            (NaN goes to HI here and is put back at the end)
        n = round(c * log2 e)           (as (t + M) - M)
        r = (c - n * LN2_HI) - n * LN2_LO
        p = ((((P0 r + P1) r + P2) r + P3) r + P4) r + P5
        y = ((p * (r * r) + r) + 1) * 2**(n >> 1) * 2**(n - (n >> 1))

    The two scale factors are powers of two with normal exponents, so results down to the subnormals round once.
    """
    x = np.asarray(x, F32)
    with np.errstate(over="ignore"):   # exp(x > 88.72) is inf, as compiled
        return _exp(x)


def _exp(x: np.ndarray) -> np.ndarray:
    # in place on three buffers: the same float32 operations, without a fresh array (and page faults) per step
    c = np.where(x <= EXP_HI, x, EXP_HI)
    np.maximum(c, EXP_LO, out=c)                # NaN was replaced by HI above, so this max sees none
    n = np.multiply(c, LOG2E)
    n += ROUND_MAGIC
    n -= ROUND_MAGIC
    r = np.multiply(n, LN2_HI)
    np.subtract(c, r, out=r)
    np.multiply(n, LN2_LO, out=c)
    r -= c                                      # r = (c - n * HI) - n * LO
    p = np.multiply(r, EXP_POLY[0])
    for coef in EXP_POLY[1:-1]:
        p += coef
        p *= r
    p += EXP_POLY[-1]
    np.multiply(r, r, out=c)
    p *= c
    p += r
    p += F32(1)                                 # p = (P(r) * r * r + r) + 1
    ni = n.astype(np.int32)
    n1 = ni >> 1
    ni -= n1
    for half in (n1, ni):                       # 2**(n >> 1), then 2**(n - (n >> 1))
        half += 127
        half <<= 23
        p *= half.view(F32)
    return np.where(np.isnan(x), x, p)


def lane_chunks(x: np.ndarray, fill: float) -> np.ndarray:
    """(rows, K) -> (rows, ceil(K / LANES), LANES): the row in lane-wide chunks, padded with ``fill``."""
    rows, k = x.shape
    chunks = -(-k // LANES)
    out = np.full((rows, chunks * LANES), fill, F32)
    out[:, :k] = x
    return out.reshape(rows, chunks, LANES)


def row_sum(x: np.ndarray) -> np.ndarray:
    """The sum of each row of (rows, K) float32 ``x`` in the lane-partial order (module docstring)."""
    parts = np.zeros((x.shape[0], LANES), F32)
    for chunk in np.moveaxis(lane_chunks(x, 0.0), 1, 0):
        parts = parts + chunk
    total = np.zeros(x.shape[0], F32)
    for j in range(LANES):
        total = total + parts[:, j]
    return total


def _max(acc: np.ndarray, v: np.ndarray) -> np.ndarray:
    return np.where(acc > v, acc, v)   # the compiled max: the accumulator when greater, else the value


def row_max(x: np.ndarray) -> np.ndarray:
    """The maximum of each row of (rows, K) float32 ``x`` in the lane-partial order (NaN handling as compiled:
    a comparison with NaN keeps the new value)."""
    parts = np.full((x.shape[0], LANES), -np.inf, F32)
    for chunk in np.moveaxis(lane_chunks(x, -np.inf), 1, 0):
        parts = _max(parts, chunk)
    total = np.full(x.shape[0], -np.inf, F32)
    for j in range(LANES):
        total = _max(total, parts[:, j])
    return total
