"""numpy only: VTA's packed layouts, 32-bit wrapping, and the integer convolutions every reference uses.

Nothing here knows about templates, devices or graphs, so the templates (their numpy references and
packing), graph_pack's reference kernels and the model zoo share one implementation of each.
"""

from __future__ import annotations

import numpy as np


def blocks(n: int, block: int) -> int:
    """Whole blocks of ``block`` needed for ``n`` (VTA pads batch and channels to whole blocks)."""
    return -(-n // block)


def pad_to(a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``a`` zero-padded at the end of each dimension to ``shape``."""
    if a.shape == shape:
        return a
    out = np.zeros(shape, dtype=a.dtype)
    out[tuple(slice(0, s) for s in a.shape)] = a
    return out


def padded_shape(shape: tuple[int, ...], outer: int, inner: int) -> tuple[int, ...]:
    """``shape`` with dims 0 and 1 rounded up to whole blocks of ``outer`` and ``inner`` (what packing pads)."""
    d0, d1, *rest = shape
    return (blocks(d0, outer) * outer, blocks(d1, inner) * inner, *rest)


def broadcast_channels(value: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """A per-channel constant (C,), (C, 1, 1) or (1, C, 1, 1) zero-padded to ``shape``'s channels and broadcast
    to ``shape`` (N, C, ...); a value of ``shape`` already passes through."""
    value = np.asarray(value)
    if value.shape == tuple(shape):
        return value
    per_channel = pad_to(value.reshape(-1), (shape[1],)).reshape(1, shape[1], *(1,) * (len(shape) - 2))
    return np.broadcast_to(per_channel, shape)


def safe_log2(x) -> np.ndarray:
    """log2 of positive quantities as float64, 0 and below clamped to 1e-9 (cost-model features)."""
    return np.log2(np.maximum(np.asarray(x, dtype=np.float64), 1e-9))


def wrap_int32(v: np.ndarray) -> np.ndarray:
    """Integers wrapped to int32 (two's complement), as the accelerator's 32-bit arithmetic wraps."""
    return (((np.asarray(v).astype(np.int64) + (1 << 31)) % (1 << 32)) - (1 << 31)).astype(np.int32)


# ---- packed layouts -------------------------------------------------------------------------------------------

def pack_blocks(a: np.ndarray, outer: int, inner: int) -> np.ndarray:
    """(D0, D1, ...) -> (D0/outer, D1/inner, ..., outer, inner), zero-padding D0 and D1 to whole blocks:
    VTA's NCHW{b}n{c}c activations (outer = BATCH, inner = BLOCK) and OIHW{o}o{i}i weights."""
    d0, d1, *rest = a.shape
    b0, b1 = blocks(d0, outer), blocks(d1, inner)
    a = pad_to(a, (b0 * outer, b1 * inner, *rest))
    k = len(rest)
    return np.ascontiguousarray(a.reshape(b0, outer, b1, inner, *rest).transpose(0, 2, *range(4, 4 + k), 1, 3))


def unpack_blocks(x: np.ndarray, d0: int, d1: int) -> np.ndarray:
    """The inverse of ``pack_blocks``, cropped to ``d0`` x ``d1``."""
    b0, b1, *rest, outer, inner = x.shape
    k = len(rest)
    y = x.transpose(0, 2 + k, 1, 3 + k, *range(2, 2 + k)).reshape(b0 * outer, b1 * inner, *rest)
    return np.ascontiguousarray(y[:d0, :d1])


def _matrix_blocks(a: np.ndarray, outer: int, inner: int) -> np.ndarray:
    """(B, D0, D1) zero-padded to whole blocks and viewed as (B, D0/outer, outer, D1/inner, inner)."""
    n, d0, d1 = a.shape
    b0, b1 = blocks(d0, outer), blocks(d1, inner)
    return pad_to(a, (n, b0 * outer, b1 * inner)).reshape(n, b0, outer, b1, inner)


def pack_batched_rows(a: np.ndarray, outer: int, inner: int) -> np.ndarray:
    """(B, D0, D1) -> (D0/outer, B, D1/inner, outer, inner), each matrix zero-padded to whole blocks: a batch of
    matrices as a grouped convolution's packed NCHW{b}n{c}c data (rows the batch axis, the B matrices the groups)
    reads it, each matrix's row blocks before the next matrix's."""
    return np.ascontiguousarray(_matrix_blocks(a, outer, inner).transpose(1, 0, 3, 2, 4))


def unpack_batched_rows(x: np.ndarray, d0: int, d1: int) -> np.ndarray:
    """The inverse of ``pack_batched_rows``, each matrix cropped to ``d0`` x ``d1``: (B, d0, d1)."""
    b0, n, b1, outer, inner = x.shape
    return np.ascontiguousarray(x.transpose(1, 0, 3, 2, 4).reshape(n, b0 * outer, b1 * inner)[:, :d0, :d1])


def pack_batched_matrices(a: np.ndarray, outer: int, inner: int) -> np.ndarray:
    """(B, D0, D1) -> (B, D0/outer, D1/inner, outer, inner): each matrix packed as a weight (OI{o}o{i}i), the
    matrices one after another, as a grouped convolution's packed kernel lays its groups out."""
    return np.ascontiguousarray(_matrix_blocks(a, outer, inner).transpose(0, 1, 3, 2, 4))


def unpack_batched_matrices(x: np.ndarray, d0: int, d1: int) -> np.ndarray:
    """The inverse of ``pack_batched_matrices``, each matrix cropped to ``d0`` x ``d1``."""
    n, b0, b1, outer, inner = x.shape
    return np.ascontiguousarray(x.transpose(0, 1, 3, 2, 4).reshape(n, b0 * outer, b1 * inner)[:, :d0, :d1])


def pack_bias(bias: np.ndarray, n_blocks: int, batch: int, block: int) -> np.ndarray:
    """A per-channel vector as the conv template loads it into the accumulator: (blocks, batch, block),
    zero-padded to whole channel blocks and repeated for every batch row."""
    b = pad_to(np.asarray(bias).reshape(-1), (n_blocks * block,)).reshape(n_blocks, 1, block)
    return np.ascontiguousarray(np.broadcast_to(b, (n_blocks, batch, block)))


def block_diagonal(w: np.ndarray, groups: int, block: int) -> np.ndarray:
    """A grouped OIHW kernel of ``groups`` groups narrower than ``block`` channels (``w``: (O, I/groups, KH, KW))
    as the kernel of ``block``-wide groups: (O, block, KH, KW), output channel o of natural group g reading its
    ``I/groups`` inputs at offset (g * I/groups) mod ``block`` of its block, zeros elsewhere. A convolution with
    groups of ``block`` channels and this kernel computes the grouped one exactly (the zeros add nothing); the
    caller checks that ``block`` is a multiple of the group's input channels."""
    o, cin_g = w.shape[:2]
    cout_g = o // groups
    out = np.zeros((o, block, *w.shape[2:]), w.dtype)
    offset = (np.arange(o) // cout_g * cin_g) % block
    for i in range(cin_g):
        out[np.arange(o), offset + i] = w[:, i]
    return out


def from_block_diagonal(bd: np.ndarray, groups: int, cin_g: int) -> np.ndarray:
    """The inverse of ``block_diagonal``: the (O, cin_g, KH, KW) grouped kernel from its block-wide form."""
    o, block = bd.shape[:2]
    offset = (np.arange(o) // (o // groups) * cin_g) % block
    return np.ascontiguousarray(np.stack([bd[np.arange(o), offset + i] for i in range(cin_g)], axis=1))


def transposed_to_direct(w: np.ndarray) -> np.ndarray:
    """IOHW conv2d_transpose kernel -> the OIHW kernel of the equivalent direct convolution (flipped):
    out = conv(stride-dilated input, flip(W)^T)."""
    return np.ascontiguousarray(w.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1])


# ---- convolutions ----------------------------------------------------------------------------------------------

def conv2d_im2col(x: np.ndarray, w: np.ndarray, strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1),
                  groups: int = 1, dtype=None) -> np.ndarray:
    """NCHW x OIHW convolution as one matrix product per group (im2col + BLAS), computed in ``dtype``
    (default: x's). int8 operands computed in float64 are exact (every window sum stays below 2^53); the
    summation order of a float computation is BLAS's, so float references that need a fixed order use their own."""
    n, _, h, wd = x.shape
    o, cg, kh, kw = w.shape
    (sh, sw), (pt, pl, pb, pr), (dh, dw) = strides, padding, dilation
    oh, ow = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1, (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    dtype = np.dtype(dtype or x.dtype)
    xp = np.pad(x.astype(dtype, copy=False), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    s = xp.strides
    win = np.lib.stride_tricks.as_strided(xp, (groups, cg, kh, kw, n, oh, ow),
                                          (s[1] * cg, s[1], s[2] * dh, s[3] * dw, s[0], s[2] * sh, s[3] * sw),
                                          writeable=False)
    cols = win.reshape(groups, cg * kh * kw, n * oh * ow)
    out = np.matmul(w.astype(dtype, copy=False).reshape(groups, o // groups, cg * kh * kw), cols)
    return np.ascontiguousarray(out.reshape(o, n, oh, ow).transpose(1, 0, 2, 3))


def conv2d_int(x: np.ndarray, w: np.ndarray, strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1),
               groups: int = 1) -> np.ndarray:
    """Exact integer NCHW x OIHW convolution in int64 (float64 BLAS for int8 operands, int64 otherwise)."""
    exact = x.dtype.itemsize == 1 and w.dtype.itemsize == 1
    out = conv2d_im2col(x, w, strides, padding, dilation, groups, np.float64 if exact else np.int64)
    return out.astype(np.int64)


def conv2d_transpose_scatter(x: np.ndarray, w: np.ndarray, strides=(1, 1), padding=(0, 0, 0, 0),
                             output_padding=(0, 0), dtype=None) -> np.ndarray:
    """NCHW x IOHW transposed convolution: every input pixel times every kernel tap (one tensordot),
    scatter-added at the stride, then cropped by the padding. Computed in ``dtype`` (default: x's)."""
    n, _, h, wd = x.shape
    _, o, kh, kw = w.shape
    (sh, sw), (pt, pl, pb, pr), (oph, opw) = strides, padding, output_padding
    dtype = np.dtype(dtype or x.dtype)
    taps = np.tensordot(w.astype(dtype, copy=False), x.astype(dtype, copy=False), axes=([0], [1]))
    full_h, full_w = (h - 1) * sh + kh + oph, (wd - 1) * sw + kw + opw
    out = np.zeros((n, o, full_h, full_w), dtype)
    for i in range(kh):
        for j in range(kw):
            rows, cols = slice(i, i + (h - 1) * sh + 1, sh), slice(j, j + (wd - 1) * sw + 1, sw)
            out[:, :, rows, cols] += taps[:, i, j].transpose(1, 0, 2, 3)
    return out[:, :, pt:full_h - pb, pl:full_w - pr]
