"""numpy reference kernels: the meaning of every op on host (unpacked) tensors.

Integer ops are exact with 32-bit wrap-around, as the accelerator computes. Float reductions fix their
summation order (conv2d: over input channel, kernel row, kernel column; dense: over K; pooling: row-major
over the window) and never fuse multiply-add, so a compiled kernel that keeps the same order (host.jit)
gives bit-identical results and a quantized graph rounds the same way on every backend.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from graph_pack.opdefs import packed_factors
from host import numerics
from vta.numerics import (
    block_diagonal,
    conv2d_int,
    pack_batched_matrices,
    pack_batched_rows,
    pack_blocks,
    transposed_to_direct,
    unpack_batched_rows,
    unpack_blocks,
    wrap_int32,
)

Kernel = Callable[..., np.ndarray]
KERNELS: dict[str, Kernel] = {}


def kernel(name: str):
    def deco(fn: Kernel) -> Kernel:
        KERNELS[name] = fn
        return fn
    return deco


def _is_int(a: np.ndarray) -> bool:
    return np.issubdtype(a.dtype, np.integer)


def _padded(x: np.ndarray, padding, value=0) -> np.ndarray:
    pt, pl, pb, pr = padding
    if not any(padding):
        return x
    return np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=value)


# ---- convolutions -------------------------------------------------------------------------------------------

def _windows(xp: np.ndarray, kh: int, kw: int, oh: int, ow: int, strides, dilation) -> np.ndarray:
    """(N, C, KH, KW, OH, OW) view of every kernel tap's input positions."""
    (sh, sw), (dh, dw) = strides, dilation
    n, c = xp.shape[:2]
    s = xp.strides
    return np.lib.stride_tricks.as_strided(
        xp, (n, c, kh, kw, oh, ow), (s[0], s[1], s[2] * dh, s[3] * dw, s[2] * sh, s[3] * sw), writeable=False)


def conv2d_nchw(x: np.ndarray, w: np.ndarray, strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1),
                groups: int = 1, out_dtype: str | None = None) -> np.ndarray:
    """NCHW x OIHW convolution. Integers: exact, wrapped to int32 when out_dtype is int32."""
    n, _c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    (sh, sw), (dh, dw) = strides, dilation
    pt, pl, pb, pr = padding
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    xp = _padded(x, padding)
    og = o // groups
    out_dtype = np.dtype(out_dtype or x.dtype)
    if _is_int(x):
        out = conv2d_int(x, w, strides, padding, dilation, groups)
        return wrap_int32(out) if out_dtype == np.int32 else out.astype(out_dtype)
    acc = np.zeros((n, o, oh, ow), np.float32)
    xp = xp.astype(np.float32)
    w = w.astype(np.float32)
    for g in range(groups):
        win = _windows(xp[:, g * cg:(g + 1) * cg], kh, kw, oh, ow, strides, dilation)
        a = acc[:, g * og:(g + 1) * og]
        for ci in range(cg):
            for i in range(kh):
                for j in range(kw):
                    a += win[:, ci, i, j][:, None] * w[g * og:(g + 1) * og, ci, i, j][None, :, None, None]
    return acc.astype(out_dtype)


def conv2d_transpose_nchw(x: np.ndarray, w: np.ndarray, strides=(1, 1), padding=(0, 0, 0, 0),
                          output_padding=(0, 0), out_dtype: str | None = None) -> np.ndarray:
    """NCHW x IOHW transposed convolution = direct convolution of the stride-dilated input with the
    flipped, transposed kernel (so it shares conv2d_nchw's summation order)."""
    return conv2d_transpose_direct(x, transposed_to_direct(w), strides, padding, output_padding, out_dtype)


def conv2d_transpose_direct(x: np.ndarray, w_direct: np.ndarray, strides=(1, 1), padding=(0, 0, 0, 0),
                            output_padding=(0, 0), out_dtype: str | None = None) -> np.ndarray:
    """A transposed convolution given the OIHW kernel of its equivalent direct convolution (the layout
    graph_pack stores packed transposed weights in)."""
    n, c, h, wd = x.shape
    kh, kw = w_direct.shape[2:]
    sh, sw = strides
    pt, pl, pb, pr = padding
    oph, opw = output_padding
    dil = np.zeros((n, c, (h - 1) * sh + 1, (wd - 1) * sw + 1), x.dtype)
    dil[:, :, ::sh, ::sw] = x
    pad = (kh - 1 - pt, kw - 1 - pl, kh - 1 - pb + oph, kw - 1 - pr + opw)
    if min(pad) < 0:  # padding larger than the kernel: crop afterwards
        full = conv2d_nchw(dil, w_direct, padding=tuple(max(p, 0) for p in pad), out_dtype=out_dtype)
        ct, cl, cb, cr = (max(-p, 0) for p in pad)
        return full[:, :, ct:full.shape[2] - cb, cl:full.shape[3] - cr]
    return conv2d_nchw(dil, w_direct, padding=pad, out_dtype=out_dtype)


@kernel("nn.conv2d")
def _conv2d(a, x, w):
    _require_unpacked(a)
    return conv2d_nchw(x, w, a["strides"], a["padding"], a["dilation"], a["groups"], a["out_dtype"])


@kernel("nn.conv2d_transpose")
def _conv2d_transpose(a, x, w):
    _require_unpacked(a)
    return conv2d_transpose_nchw(x, w, a["strides"], a["padding"], a["output_padding"], a["out_dtype"])


def dense(x: np.ndarray, w: np.ndarray, out_dtype: str | None = None) -> np.ndarray:
    out_dtype = np.dtype(out_dtype or x.dtype)
    if _is_int(x):
        exact = x.dtype.itemsize == 1 and w.dtype.itemsize == 1
        calc = np.float64 if exact else np.int64
        out = (x.astype(calc) @ w.astype(calc).T).astype(np.int64)
        return wrap_int32(out) if out_dtype == np.int32 else out.astype(out_dtype)
    acc = np.zeros((x.shape[0], w.shape[0]), np.float32)
    x, w = x.astype(np.float32), w.astype(np.float32)
    for k in range(x.shape[1]):
        acc += x[:, k:k + 1] * w[None, :, k]
    return acc.astype(out_dtype)


@kernel("nn.dense")
def _dense(a, x, w):
    _require_unpacked(a)
    return dense(x, w, a["out_dtype"])


def _require_unpacked(a: dict) -> None:
    for key in ("data_layout", "kernel_layout"):
        if packed_factors(a.get(key, "")):
            raise ValueError(f"the numpy reference runs unpacked layouts only, got {key}={a[key]!r}")


# ---- element-wise -------------------------------------------------------------------------------------------

def _shift_count(s: np.ndarray) -> np.ndarray:
    if np.any(s < 0):
        raise ValueError("shift counts must be >= 0")
    return np.minimum(s, 31)


def _binary(fn):
    def run(a, x, y):
        out = fn(x.astype(np.int64), y.astype(np.int64)) if _is_int(x) else fn(x, y)
        return wrap_int32(out) if x.dtype == np.int32 else out.astype(x.dtype)
    return run


KERNELS["add"] = _binary(np.add)
KERNELS["subtract"] = _binary(np.subtract)
KERNELS["multiply"] = _binary(np.multiply)
KERNELS["maximum"] = _binary(np.maximum)
KERNELS["minimum"] = _binary(np.minimum)
KERNELS["right_shift"] = _binary(lambda x, s: x >> _shift_count(s))
KERNELS["left_shift"] = _binary(lambda x, s: x << _shift_count(s))


@kernel("divide")
def _divide(a, x, y):
    if _is_int(x):
        raise ValueError("divide is defined for floats only")
    return (x / y).astype(x.dtype)


@kernel("nn.relu")
def _relu(a, x):
    return np.maximum(x, np.zeros((), x.dtype))


@kernel("clip")
def _clip(a, x):
    lo, hi = a["a_min"], a["a_max"]
    if _is_int(x):
        info = np.iinfo(x.dtype)  # an infinite bound (ONNX Clip's default) leaves that side open
        lo = info.min if lo <= info.min else min(math.ceil(lo), info.max)
        hi = info.max if hi >= info.max else max(math.floor(hi), info.min)
        return np.clip(x, lo, hi).astype(x.dtype)
    return np.clip(x, np.float32(lo), np.float32(hi)).astype(x.dtype)


@kernel("cast")
def _cast(a, x):
    return x.astype(a["dtype"])  # integers wrap (keep the low bits); floats truncate toward zero


KERNELS["tanh"] = lambda a, x: np.tanh(x).astype(x.dtype)
# exp as the host compiler's kernels compute it (host.numerics.exp, within 1 ulp), so a compiled sigmoid is bit-equal
KERNELS["sigmoid"] = lambda a, x: (np.float32(1) / (np.float32(1) + numerics.exp(-x))).astype(x.dtype)
KERNELS["nn.dropout"] = lambda a, x: x


@kernel("nn.bias_add")
def _bias_add(a, x, b):
    shape = [1] * x.ndim
    shape[a["axis"] % x.ndim] = b.shape[0]
    return KERNELS["add"](a, x, b.reshape(shape))


@kernel("nn.batch_norm")
def _batch_norm(a, x, gamma, beta, mean, var):
    shape = [1] * x.ndim
    shape[a["axis"]] = x.shape[a["axis"]]
    scale = (gamma / np.sqrt(var + np.float32(a["epsilon"]))).astype(np.float32)
    return ((x - mean.reshape(shape)) * scale.reshape(shape) + beta.reshape(shape)).astype(x.dtype)


@kernel("qnn.quantize")
def _quantize(a, x):
    info = np.iinfo(a["out_dtype"])
    q = np.divide(x, np.float32(a["scale"]), dtype=np.float32)   # floor(x / scale + 0.5), in place after this
    q += np.float32(0.5)
    np.floor(q, out=q)
    return np.clip(q, -info.max, info.max, out=q).astype(a["out_dtype"])


KERNELS["qnn.dequantize"] = lambda a, x: x.astype(np.float32) * np.float32(a["scale"])


# ---- pooling and shape ops ----------------------------------------------------------------------------------

def _pool_windows(a, x, fill):
    _n, _c, h, w = x.shape
    (kh, kw), (sh, sw), (pt, pl, pb, pr) = a["pool_size"], a["strides"], a["padding"]
    from graph_pack.opdefs import pool_out
    oh, ow = pool_out(h, kh, sh, pt, pb, a["ceil_mode"]), pool_out(w, kw, sw, pl, pr, a["ceil_mode"])
    # ceil mode may read past the bottom/right padding: extend with the fill value
    eb, er = max(0, (oh - 1) * sh + kh - h - pt - pb), max(0, (ow - 1) * sw + kw - w - pl - pr)
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb + eb), (pl, pr + er)), constant_values=fill)
    return _windows(xp, kh, kw, oh, ow, (sh, sw), (1, 1)), (oh, ow)


@kernel("nn.max_pool2d")
def _max_pool(a, x):
    fill = np.iinfo(x.dtype).min if _is_int(x) else -np.inf
    win, _ = _pool_windows(a, x, fill)
    return win.max(axis=(2, 3)).astype(x.dtype)


@kernel("nn.avg_pool2d")
def _avg_pool(a, x):
    if _is_int(x):
        raise ValueError("avg_pool2d is defined for floats only (dequantize first)")
    win, (oh, ow) = _pool_windows(a, x.astype(np.float32), 0)
    kh, kw = a["pool_size"]
    acc = np.zeros((*x.shape[:2], oh, ow), np.float32)
    for i in range(kh):
        for j in range(kw):
            acc += win[:, :, i, j]
    if a["count_include_pad"]:
        count = np.full((oh, ow), kh * kw, np.float32)
    else:
        ones = np.ones((1, 1, *x.shape[2:]), np.float32)
        cwin, _ = _pool_windows(a, ones, 0)
        count = cwin.sum(axis=(2, 3))[0, 0]
    return (acc / count).astype(x.dtype)


@kernel("nn.global_avg_pool2d")
def _global_avg_pool(a, x):
    if _is_int(x):
        raise ValueError("global_avg_pool2d is defined for floats only (dequantize first)")
    n, c, h, w = x.shape
    acc = np.zeros((n, c), np.float32)
    flat = x.astype(np.float32).reshape(n, c, h * w)
    for k in range(h * w):
        acc += flat[:, :, k]
    return (acc / np.float32(h * w)).reshape(n, c, 1, 1).astype(x.dtype)


KERNELS["nn.batch_flatten"] = lambda a, x: x.reshape(x.shape[0], -1)
KERNELS["transpose"] = lambda a, x: np.ascontiguousarray(x.transpose(a["axes"]))


@kernel("reshape")
def _reshape(a, x):
    from graph_pack.opdefs import reshape_target
    return x.reshape(reshape_target(x.shape, a["newshape"]))


@kernel("nn.softmax")
def _softmax(a, x):
    """In float32, in ``host.numerics``' order (the row's max and sum over lane partials, its exp): the
    definition host.ops' softmax compiles, so a compiled run is bit-equal to this reference."""
    xs = np.moveaxis(np.asarray(x, np.float32), a["axis"], -1)
    rows = xs.reshape(-1, xs.shape[-1]) if xs.size else xs.reshape(0, xs.shape[-1])
    k = rows.shape[1]
    padded = numerics.lane_chunks(rows, -np.inf).reshape(rows.shape[0], -1)   # exp(-inf - m) = 0 past the row
    e = numerics.exp(padded - numerics.row_max(rows)[:, None])
    y = e[:, :k] / numerics.row_sum(e)[:, None]
    return np.moveaxis(y.reshape(xs.shape), -1, a["axis"]).astype(x.dtype)


KERNELS["concatenate"] = lambda a, *xs: np.concatenate(xs, axis=a["axis"])
KERNELS["nn.pad"] = lambda a, x: np.pad(x, a["pad_width"], constant_values=np.asarray(a["pad_value"]).astype(x.dtype))
KERNELS["nn.upsampling"] = lambda a, x: x.repeat(a["scale_h"], axis=2).repeat(a["scale_w"], axis=3)


@kernel("layout_transform")
def _layout_transform(a, x):
    f = packed_factors(a["dst_layout"])
    src = a["src_layout"]
    if f and src == "OIHW" and a["groups"] > 1:   # groups narrower than a block: the block-diagonal kernel
        return pack_blocks(block_diagonal(x, a["groups"], f[1]), *f)
    if f and src == "BNC":
        return pack_batched_rows(x.reshape(-1, *x.shape[-2:]), *f)
    if f and src == "BKN":   # the right-hand side (..., K, N) as (N, K) weight matrices
        return pack_batched_matrices(np.swapaxes(x.reshape(-1, *x.shape[-2:]), 1, 2), *f)
    if a["dst_layout"] == "BNC":
        return unpack_batched_rows(x, a["batch"], a["channels"]).reshape(*a["lead"], a["batch"], a["channels"])
    if f and src in ("NCHW", "NC", "OIHW", "OI"):
        return pack_blocks(x, *f)
    if f and src == "IOHW":
        return pack_blocks(transposed_to_direct(x), *f)
    return unpack_blocks(x, a["batch"], a["channels"])


# ---- ops of today's exported networks (host only) -----------------------------------------------------------

def _float_unary(fn):
    return lambda a, x: fn(x).astype(x.dtype)


KERNELS["sqrt"] = _float_unary(np.sqrt)
KERNELS["round"] = lambda a, x: np.round(x) if not _is_int(x) else x   # half to even, as ONNX Round
KERNELS["erf"] = _float_unary(lambda x: _erf(x.astype(np.float64)))
KERNELS["nn.leaky_relu"] = lambda a, x: np.where(x >= 0, x, x * x.dtype.type(a["alpha"])).astype(x.dtype)
KERNELS["power"] = _binary(np.power)
KERNELS["equal"] = lambda a, x, y: np.equal(x, y)
KERNELS["less"] = lambda a, x, y: np.less(x, y)
KERNELS["greater"] = lambda a, x, y: np.greater(x, y)
KERNELS["where"] = lambda a, c, x, y: np.where(c, x, y)
KERNELS["mean"] = lambda a, x: x.mean(axis=a["axes"], keepdims=a["keepdims"], dtype=np.float64).astype(x.dtype)
KERNELS["broadcast_to"] = lambda a, x: np.ascontiguousarray(np.broadcast_to(x, np.broadcast_shapes(x.shape, a["shape"])))


def _erf(x: np.ndarray) -> np.ndarray:
    """erf in float64 (math.erf per element: numpy has none), so float32 results are correctly rounded."""
    return np.vectorize(math.erf, otypes=[np.float64])(x) if x.size else x


@kernel("take")
def _take(a, x, idx):
    size = x.shape[a["axis"]]
    if idx.size and (idx.min() < -size or idx.max() >= size):
        raise ValueError(f"index out of range [-{size}, {size}) on axis {a['axis']}")
    return np.take(x, np.where(idx < 0, idx + size, idx), axis=a["axis"])


@kernel("strided_slice")
def _strided_slice(a, x):
    index = [slice(None)] * x.ndim
    for b, e, ax, st in zip(a["begin"], a["end"], a["axes"], a["strides"], strict=True):
        index[ax % x.ndim] = slice(b, e, st)
    return np.ascontiguousarray(x[tuple(index)])


@kernel("nn.batch_matmul")
def _batch_matmul(a, x, y):
    out_dtype = np.dtype(a["out_dtype"] or x.dtype)
    if _is_int(x):
        out = np.matmul(x.astype(np.int64), y.astype(np.int64))
        return wrap_int32(out) if out_dtype == np.int32 else out.astype(out_dtype)
    return np.matmul(x.astype(np.float32), y.astype(np.float32)).astype(out_dtype)


@kernel("nn.layer_norm")
def _layer_norm(a, x, scale=None, bias=None):
    """Over the axes from ``axis`` on, in float32, each sum in ``host.numerics``' lane-partial order: mean = sum / K,
    d = x - mean, var = sum(d * d) / K, y = d * (1 / sqrt(var + eps)) * scale + bias (host.ops' layer norm, which
    compiles to the same bits)."""
    tail = x.shape[a["axis"] % x.ndim:]
    k = math.prod(tail)
    rows = np.asarray(x, np.float32).reshape(-1, k)
    f32 = np.float32
    mean = numerics.row_sum(rows) / f32(k)
    d = rows - mean[:, None]
    var = numerics.row_sum(d * d) / f32(k)
    y = d * (f32(1) / np.sqrt(var + f32(a["epsilon"])))[:, None]
    if scale is not None:
        y = y * scale.astype(np.float32).reshape(k)
    if bias is not None:
        y = y + bias.astype(np.float32).reshape(k)
    return y.reshape(x.shape).astype(x.dtype)


def _resize_source(out: int, size: int, scale: float, mode: str) -> np.ndarray:
    """The (fractional) input coordinate of each output index, as ONNX Resize defines it."""
    i = np.arange(out, dtype=np.float64)
    if mode == "half_pixel":
        return (i + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (i + 0.5) / scale - 0.5 if out > 1 else np.zeros_like(i)
    if mode == "align_corners":
        return i * (size - 1) / (out - 1) if out > 1 else np.zeros_like(i)
    return i / scale   # asymmetric


def _linear_taps(out: int, size: int, scale: float, mode: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = np.clip(_resize_source(out, size, scale, mode), 0, size - 1)
    lo = np.floor(x).astype(np.int64)
    hi = np.minimum(lo + 1, size - 1)
    return lo, hi, (x - lo).astype(np.float32)


@kernel("image.resize2d")
def _resize2d(a, x):
    (oh, ow), (sh, sw), mode = a["size"], a["scales"], a["coordinate_transformation_mode"]
    h, w = x.shape[2:]
    if a["method"] == "nearest":   # asymmetric / floor (nn.upsampling covers the integer-scale cases)
        rows = np.minimum(np.floor(_resize_source(oh, h, sh, mode)).astype(np.int64), h - 1)
        cols = np.minimum(np.floor(_resize_source(ow, w, sw, mode)).astype(np.int64), w - 1)
        return np.ascontiguousarray(x[:, :, rows][:, :, :, cols])
    r0, r1, fr = _linear_taps(oh, h, sh, mode)
    c0, c1, fc = _linear_taps(ow, w, sw, mode)
    xf = x.astype(np.float32)
    top = xf[:, :, r0] * (1 - fr)[:, None] + xf[:, :, r1] * fr[:, None]
    return (top[:, :, :, c0] * (1 - fc) + top[:, :, :, c1] * fc).astype(x.dtype)
