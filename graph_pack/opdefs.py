"""The operator table: each op's attributes (with defaults), arity, attribute normalisation and shape rule.

Attribute conventions (Relay's): ``padding`` is (top, left, bottom, right); ``strides``/``dilation`` are
(h, w); layouts are strings. Packed layouts ``NCHW{b}n{c}c`` (activations, 6-D: N/b, C/c, H, W, b, c),
``OIHW{c}o{c}i`` (weights) and ``NC{b}n{c}c`` (dense data) appear after ``graph_pack``; so do a batch_matmul's
``BNC{b}n{c}c`` (a batch of (N, C) matrices, 5-D: N/b, B, C/c, b, c; its data and output) and ``BOI{o}o{i}i``
(its weight-tile operand, 5-D: B, O/o, I/i, o, i), from the natural ``BNC`` (..., N, C) and ``BKN`` (..., K, N:
the right-hand side of a matmul, transposed by the packing).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from host.shapes import packed_factors, pair, pool_out, quad

Shape = tuple[int, ...]


@dataclass(frozen=True)
class OpSpec:
    defaults: dict
    infer: Callable[[dict, list[Shape], list[str]], tuple[Shape, str]]
    arity: tuple[int, ...] | None = (1,)
    normalize: Callable[[dict, list], dict] = lambda attrs, types: attrs


OPS: dict[str, OpSpec] = {}


def _register(name: str, defaults: dict, infer, arity: tuple[int, ...] | None = (1,), normalize=None) -> None:
    OPS[name] = OpSpec(defaults, infer, arity, normalize or (lambda a, t: a))


def _dtype(attrs: dict, key: str, default: str) -> str:
    return np.dtype(attrs.get(key) or default).name


# ---- convolutions -------------------------------------------------------------------------------------------

def _norm_conv(attrs: dict, types) -> dict:
    attrs["strides"] = pair(attrs["strides"], "strides")
    attrs["padding"] = quad(attrs["padding"], "padding")
    attrs["dilation"] = pair(attrs["dilation"], "dilation")
    attrs["groups"] = int(attrs["groups"])
    if "output_padding" in attrs:
        attrs["output_padding"] = pair(attrs["output_padding"], "output_padding")
    attrs["out_dtype"] = _dtype(attrs, "out_dtype", types[0].dtype)
    if min(attrs["strides"]) < 1 or min(attrs["dilation"]) < 1 or min(attrs["padding"]) < 0 or attrs["groups"] < 1:
        raise ValueError(f"strides/dilation must be >= 1, padding >= 0, groups >= 1; got {attrs}")
    return attrs


def _unpack_act(shape: Shape, layout: str) -> Shape:
    f = packed_factors(layout)
    if f is None:
        if len(shape) != 4:
            raise ValueError(f"data must be 4-D {layout}, got {shape}")
        return shape
    if len(shape) != 6 or shape[4:] != f:
        raise ValueError(f"data must be 6-D {layout}, got {shape}")
    return shape[0] * shape[4], shape[1] * shape[5], shape[2], shape[3]


def _pack_act(shape: Shape, layout: str) -> Shape:
    f = packed_factors(layout)
    if f is None:
        return shape
    n, c, h, w = shape
    return n // f[0], c // f[1], h, w, f[0], f[1]


def _unpack_wgt(shape: Shape, layout: str) -> Shape:
    f = packed_factors(layout)
    if f is None:
        if len(shape) != 4:
            raise ValueError(f"weight must be 4-D {layout}, got {shape}")
        return shape
    if len(shape) != 6 or shape[4:] != f:
        raise ValueError(f"weight must be 6-D {layout}, got {shape}")
    return shape[0] * shape[4], shape[1] * shape[5], shape[2], shape[3]


def conv_out(size: int, k: int, s: int, p0: int, p1: int, d: int = 1) -> int:
    return (size + p0 + p1 - d * (k - 1) - 1) // s + 1


def _infer_conv2d(a, shapes, dtypes):
    n, c, h, w = _unpack_act(shapes[0], a["data_layout"])
    o, i, kh, kw = _unpack_wgt(shapes[1], a["kernel_layout"])
    g = a["groups"]
    if c % g or o % g or i * g != c:
        raise ValueError(f"weight {shapes[1]} does not fit {c} input channels with groups={g}")
    (sh, sw), (pt, pl, pb, pr), (dh, dw) = a["strides"], a["padding"], a["dilation"]
    oh, ow = conv_out(h, kh, sh, pt, pb, dh), conv_out(w, kw, sw, pl, pr, dw)
    if oh <= 0 or ow <= 0:
        raise ValueError(f"the output would be empty ({oh} x {ow})")
    return _pack_act((n, o, oh, ow), a["data_layout"]), a["out_dtype"]


def _infer_conv2d_transpose(a, shapes, dtypes):
    n, c, h, w = _unpack_act(shapes[0], a["data_layout"])
    if packed_factors(a["kernel_layout"]):  # packed as the equivalent direct convolution (OIHW)
        o, i, kh, kw = _unpack_wgt(shapes[1], a["kernel_layout"])
    else:
        i, o, kh, kw = shapes[1]
    if i != c or a["groups"] != 1:
        raise ValueError(f"weight {shapes[1]} (IOHW) does not fit {c} input channels (groups must be 1)")
    if a["dilation"] != (1, 1):
        raise ValueError(f"dilation {a['dilation']} is not supported; allowed: (1, 1)")
    (sh, sw), (pt, pl, pb, pr), (oph, opw) = a["strides"], a["padding"], a["output_padding"]
    oh, ow = (h - 1) * sh - pt - pb + kh + oph, (w - 1) * sw - pl - pr + kw + opw
    if oh <= 0 or ow <= 0:
        raise ValueError(f"the output would be empty ({oh} x {ow})")
    return _pack_act((n, o, oh, ow), a["data_layout"]), a["out_dtype"]


_CONV = {"strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1, "out_dtype": "",
         "data_layout": "NCHW", "kernel_layout": "OIHW"}
_register("nn.conv2d", _CONV, _infer_conv2d, (2,), _norm_conv)
_register("nn.conv2d_transpose", {**_CONV, "kernel_layout": "IOHW", "output_padding": (0, 0)},
          _infer_conv2d_transpose, (2,), _norm_conv)


def _infer_dense(a, shapes, dtypes):
    f = packed_factors(a["data_layout"])
    if f is None:
        if len(shapes[0]) != 2 or len(shapes[1]) != 2:
            raise ValueError(f"data {shapes[0]} and weight {shapes[1]} must be 2-D (N, K) and (M, K)")
        (n, k), (m, k2) = shapes[0], shapes[1]
        if k != k2:
            raise ValueError(f"data (N, K) {shapes[0]} and weight (M, K) {shapes[1]} must agree on K")
        return (n, m), a["out_dtype"]
    nb, _kb, b, c = shapes[0]
    mb = shapes[1][0]
    return (nb, mb, b, c), a["out_dtype"]


_register("nn.dense", {"out_dtype": "", "data_layout": "NC", "kernel_layout": "OI"}, _infer_dense, (2,),
          lambda a, t: {**a, "out_dtype": _dtype(a, "out_dtype", t[0].dtype)})


# ---- element-wise -------------------------------------------------------------------------------------------

def _same(a, shapes, dtypes):
    return shapes[0], dtypes[0]


def _broadcast(a, shapes, dtypes):
    if dtypes[0] != dtypes[1]:
        raise ValueError(f"operand dtypes differ ({dtypes[0]} vs {dtypes[1]}); insert a cast")
    return tuple(np.broadcast_shapes(shapes[0], shapes[1])), dtypes[0]


def _int_broadcast(a, shapes, dtypes):
    if not np.issubdtype(np.dtype(dtypes[0]), np.integer):
        raise ValueError(f"shifts need integer operands, got {dtypes[0]}")
    return _broadcast(a, shapes, dtypes)


for _name in ("add", "subtract", "multiply", "divide", "maximum", "minimum"):
    _register(_name, {}, _broadcast, (2,))
for _name in ("right_shift", "left_shift"):
    _register(_name, {}, _int_broadcast, (2,))
for _name in ("nn.relu", "tanh", "sigmoid", "nn.dropout"):
    _register(_name, {}, _same)


def _norm_clip(a, t):
    if a["a_min"] is None or a["a_max"] is None:
        raise ValueError(f"clip needs a_min and a_max, got a_min={a['a_min']}, a_max={a['a_max']}")
    return {"a_min": float(a["a_min"]), "a_max": float(a["a_max"])}


def _norm_cast(a, t):
    if a["dtype"] is None:
        raise ValueError("cast needs dtype=")
    return {"dtype": np.dtype(a["dtype"]).name}


_register("clip", {"a_min": None, "a_max": None}, _same, normalize=_norm_clip)
_register("cast", {"dtype": None}, lambda a, s, d: (s[0], a["dtype"]), normalize=_norm_cast)


def _axis(axis: int, rank: int) -> int:
    """``axis`` in [0, rank) (negative counts from the end); out of range is an error, not a wrap."""
    if not -rank <= axis < rank:
        raise ValueError(f"axis {axis} is out of range for a {rank}-D tensor")
    return axis % rank


def _infer_bias_add(a, shapes, dtypes):
    axis = _axis(a["axis"], len(shapes[0]))
    if len(shapes[1]) != 1 or shapes[1][0] != shapes[0][axis]:
        raise ValueError(f"bias {shapes[1]} must be 1-D with {shapes[0][axis]} entries (axis {a['axis']})")
    return _same(a, shapes, dtypes)


_register("nn.bias_add", {"axis": 1}, _infer_bias_add, (2,))


def _infer_batch_norm(a, shapes, dtypes):
    c = shapes[0][_axis(a["axis"], len(shapes[0]))]
    for s in shapes[1:]:
        if s != (c,):
            raise ValueError(f"gamma/beta/mean/var must have shape ({c},), got {s}")
    return _same(a, shapes, dtypes)


_register("nn.batch_norm", {"epsilon": 1e-5, "axis": 1}, _infer_batch_norm, (5,))


def _quantize_norm(a, t):
    scale = float(a["scale"])
    if not scale > 0:
        raise ValueError(f"scale must be positive, got {scale}")
    return {**a, "scale": scale}


_register("qnn.quantize", {"scale": None, "out_dtype": "int8"}, lambda a, s, d: (s[0], a["out_dtype"]),
          normalize=_quantize_norm)
_register("qnn.dequantize", {"scale": None}, lambda a, s, d: (s[0], "float32"), normalize=_quantize_norm)


# ---- pooling and shape ops ----------------------------------------------------------------------------------

def _norm_pool(a, t):
    a = {**a, "pool_size": pair(a["pool_size"], "pool_size"), "padding": quad(a["padding"], "padding"),
         "ceil_mode": bool(a["ceil_mode"])}
    a["strides"] = pair(a["strides"] if a["strides"] is not None else a["pool_size"], "strides")
    if min(a["pool_size"]) < 1 or min(a["strides"]) < 1 or min(a["padding"]) < 0:
        raise ValueError(f"pool_size and strides must be >= 1, padding >= 0; got pool_size={a['pool_size']}, "
                         f"strides={a['strides']}, padding={a['padding']}")
    return a


def _need_4d(shape: Shape) -> None:
    if len(shape) != 4:
        raise ValueError(f"data must be 4-D NCHW, got {shape}")


def _infer_pool(a, shapes, dtypes):
    _need_4d(shapes[0])
    n, c, h, w = shapes[0]
    (kh, kw), (sh, sw), (pt, pl, pb, pr) = a["pool_size"], a["strides"], a["padding"]
    oh, ow = pool_out(h, kh, sh, pt, pb, a["ceil_mode"]), pool_out(w, kw, sw, pl, pr, a["ceil_mode"])
    if oh <= 0 or ow <= 0:
        raise ValueError(f"the output would be empty ({oh} x {ow})")
    return (n, c, oh, ow), dtypes[0]


_POOL = {"pool_size": (2, 2), "strides": None, "padding": (0, 0, 0, 0), "ceil_mode": False}
_register("nn.max_pool2d", _POOL, _infer_pool, normalize=_norm_pool)
_register("nn.avg_pool2d", {**_POOL, "count_include_pad": False}, _infer_pool, normalize=_norm_pool)


def _infer_global_pool(a, shapes, dtypes):
    _need_4d(shapes[0])
    return (*shapes[0][:2], 1, 1), dtypes[0]


_register("nn.global_avg_pool2d", {}, _infer_global_pool)
_register("nn.batch_flatten", {}, lambda a, s, d: ((s[0][0], math.prod(s[0][1:])), d[0]))


def reshape_target(shape: Shape, newshape: Sequence[int]) -> Shape:
    """ONNX/Relay reshape: 0 copies the input's dimension, one -1 takes what is left."""
    out = [shape[i] if v == 0 else int(v) for i, v in enumerate(newshape)]
    if out.count(-1) > 1:
        raise ValueError(f"newshape {tuple(newshape)} has more than one -1")
    total, known = math.prod(shape), math.prod(v for v in out if v != -1)
    if -1 in out:
        if known == 0 or total % known:
            raise ValueError(f"cannot reshape {shape} to {tuple(newshape)}")
        out[out.index(-1)] = total // known
    if math.prod(out) != total:
        raise ValueError(f"cannot reshape {shape} ({total} elements) to {tuple(out)}")
    return tuple(out)


_register("reshape", {"newshape": None}, lambda a, s, d: (reshape_target(s[0], a["newshape"]), d[0]),
          normalize=lambda a, t: {"newshape": tuple(int(v) for v in a["newshape"])})


def _infer_transpose(a, shapes, dtypes):
    if sorted(a["axes"]) != list(range(len(shapes[0]))):
        raise ValueError(f"axes {a['axes']} must be a permutation of the {len(shapes[0])} axes of {shapes[0]}")
    return tuple(shapes[0][i] for i in a["axes"]), dtypes[0]


_register("transpose", {"axes": None}, _infer_transpose,
          normalize=lambda a, t: {"axes": tuple(int(v) for v in a["axes"])})


def _infer_softmax(a, shapes, dtypes):
    _axis(a["axis"], len(shapes[0]))
    return _same(a, shapes, dtypes)


_register("nn.softmax", {"axis": -1}, _infer_softmax)


def _infer_concat(a, shapes, dtypes):
    axis = _axis(a["axis"], len(shapes[0]))
    for s, d in zip(shapes[1:], dtypes[1:], strict=True):
        if len(s) != len(shapes[0]) or any(x != y for i, (x, y) in enumerate(zip(s, shapes[0])) if i != axis):
            raise ValueError(f"shapes {shapes} differ outside axis {a['axis']}")
        if d != dtypes[0]:
            raise ValueError(f"dtypes differ: {dtypes}")
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    return tuple(out), dtypes[0]


_register("concatenate", {"axis": 1}, _infer_concat, None)


def _infer_pad(a, shapes, dtypes):
    if len(a["pad_width"]) != len(shapes[0]):
        raise ValueError(f"pad_width needs one (before, after) pair per dimension of {shapes[0]}")
    if min(p for pair_ in a["pad_width"] for p in pair_) < 0:
        raise ValueError(f"pad_width entries must be >= 0, got {a['pad_width']}")
    return tuple(s + p0 + p1 for s, (p0, p1) in zip(shapes[0], a["pad_width"], strict=True)), dtypes[0]


_register("nn.pad", {"pad_width": None, "pad_value": 0.0}, _infer_pad,
          normalize=lambda a, t: {"pad_width": tuple((int(p[0]), int(p[1])) for p in a["pad_width"]),
                                  "pad_value": float(a["pad_value"])})


def _infer_upsampling(a, shapes, dtypes):
    _need_4d(shapes[0])
    n, c, h, w = shapes[0]
    return (n, c, h * a["scale_h"], w * a["scale_w"]), dtypes[0]


def _norm_upsampling(a, t):
    if a["method"] != "nearest_neighbor":
        raise ValueError(f"method {a['method']!r} is not supported; allowed: 'nearest_neighbor'")
    sh, sw = int(a["scale_h"]), int(a["scale_w"])
    if sh != a["scale_h"] or sw != a["scale_w"] or min(sh, sw) < 1:
        raise ValueError(f"scales must be positive integers, got {a['scale_h']}, {a['scale_w']}")
    return {**a, "scale_h": sh, "scale_w": sw}


_register("nn.upsampling", {"scale_h": 2, "scale_w": 2, "method": "nearest_neighbor"}, _infer_upsampling,
          normalize=_norm_upsampling)


# ---- layout transforms (made by graph_pack) -----------------------------------------------------------------

def _infer_layout(a, shapes, dtypes):
    src, dst = a["src_layout"], a["dst_layout"]
    f = packed_factors(dst)
    if src == "BNC" and f and dst.startswith("BNC"):   # (..., M, K) -> (M/b, B, K/c, b, c)
        b, c = f
        *lead, m, k = shapes[0]
        return (-(-m // b), math.prod(lead), -(-k // c), b, c), dtypes[0]
    if src == "BKN" and f and dst.startswith("BOI"):   # (..., K, N) -> (B, N/o, K/i, o, i)
        bo, bi = f
        *lead, k, n = shapes[0]
        return (math.prod(lead), -(-n // bo), -(-k // bi), bo, bi), dtypes[0]
    if dst == "BNC" and packed_factors(src) and src.startswith("BNC"):
        b, c = packed_factors(src)
        mb, n, cb = shapes[0][:3]
        if len(shapes[0]) != 5 or shapes[0][-2:] != (b, c) or math.prod(a["lead"]) != n or \
                not 0 < a["batch"] <= mb * b or not 0 < a["channels"] <= cb * c:
            raise ValueError(f"{src} data {shapes[0]} does not hold lead={a['lead']}, batch={a['batch']}, "
                             f"channels={a['channels']}")
        return (*a["lead"], a["batch"], a["channels"]), dtypes[0]
    if src in ("NCHW", "NC") and f:
        b, c = f
        n, ch, *rest = shapes[0]
        return (-(-n // b), -(-ch // c), *rest, b, c), dtypes[0]
    if src in ("OIHW", "IOHW", "OI") and f:  # weights; IOHW (conv2d_transpose) becomes its direct-conv OIHW
        bo, bi = f
        o, i, *rest = shapes[0] if src != "IOHW" else (shapes[0][1], shapes[0][0], *shapes[0][2:])
        if a["groups"] > 1:   # narrow groups as one block-diagonal block of inputs (kernels.block_diagonal)
            i = bi
        return (-(-o // bo), -(-i // bi), *rest, bo, bi), dtypes[0]
    if dst in ("NCHW", "NC") and packed_factors(src):
        b, c = packed_factors(src)
        rank = 6 if dst == "NCHW" else 4
        if len(shapes[0]) != rank or shapes[0][-2:] != (b, c):
            raise ValueError(f"{src} data must be {rank}-D ending in ({b}, {c}), got {shapes[0]}")
        if not 0 < a["batch"] <= shapes[0][0] * b or not 0 < a["channels"] <= shapes[0][1] * c:
            raise ValueError(f"batch={a['batch']} and channels={a['channels']} must be positive and fit the "
                             f"packed {shapes[0]}")
        return (a["batch"], a["channels"], *shapes[0][2:-2]), dtypes[0]
    raise ValueError(f"layout_transform supports NCHW/NC/BNC <-> packed and OIHW/IOHW/OI/BKN -> packed, got {src} -> "
                     f"{dst}")


_register("layout_transform", {"src_layout": None, "dst_layout": None, "batch": 0, "channels": 0, "lead": (),
                               "groups": 1}, _infer_layout, normalize=lambda a, t: {**a, "lead": tuple(int(d) for d in a["lead"])})


# ---- ops of today's exported networks (transformers, segmentation, detection): host ops ---------------------

for _name in ("erf", "sqrt", "round"):
    _register(_name, {}, _same)
_register("nn.leaky_relu", {"alpha": 0.01}, _same, normalize=lambda a, t: {"alpha": float(a["alpha"])})
_register("power", {}, _broadcast, (2,))


def _infer_compare(a, shapes, dtypes):
    _broadcast(a, shapes, dtypes)
    return tuple(np.broadcast_shapes(shapes[0], shapes[1])), "bool"


for _name in ("equal", "less", "greater"):
    _register(_name, {}, _infer_compare, (2,))


def _infer_where(a, shapes, dtypes):
    if dtypes[0] != "bool":
        raise ValueError(f"the condition must be bool, got {dtypes[0]}")
    if dtypes[1] != dtypes[2]:
        raise ValueError(f"operand dtypes differ ({dtypes[1]} vs {dtypes[2]}); insert a cast")
    return tuple(np.broadcast_shapes(*shapes)), dtypes[1]


_register("where", {}, _infer_where, (3,))


def _norm_axes(a, t):
    rank = len(t[0].shape)
    axes = a["axes"] if a["axes"] is not None else tuple(range(rank))
    return {"axes": tuple(sorted(_axis(int(x), rank) for x in axes)), "keepdims": bool(a["keepdims"])}


def _infer_reduce(a, shapes, dtypes):
    if len(set(a["axes"])) != len(a["axes"]):
        raise ValueError(f"axes {a['axes']} repeat an axis")
    out = [1 if k in a["axes"] else s for k, s in enumerate(shapes[0])]
    if not a["keepdims"]:
        out = [s for k, s in enumerate(shapes[0]) if k not in a["axes"]]
    return tuple(out), dtypes[0]


_register("mean", {"axes": None, "keepdims": True}, _infer_reduce, normalize=_norm_axes)


def _infer_take(a, shapes, dtypes):
    axis = _axis(a["axis"], len(shapes[0]))
    if not np.issubdtype(np.dtype(dtypes[1]), np.integer):
        raise ValueError(f"indices must be integers, got {dtypes[1]}")
    return (*shapes[0][:axis], *shapes[1], *shapes[0][axis + 1:]), dtypes[0]


_register("take", {"axis": 0}, _infer_take, (2,), normalize=lambda a, t: {"axis": int(a["axis"])})


def slice_ranges(shape: Shape, begin, end, axes, steps) -> list[range]:
    """The index range of every axis a strided slice (ONNX Slice / numpy ``x[b:e:s]``) keeps."""
    ranges = [range(s) for s in shape]
    for b, e, ax, st in zip(begin, end, axes, steps, strict=True):
        if st == 0:
            raise ValueError("a slice step must not be 0")
        ax = _axis(ax, len(shape))
        ranges[ax] = range(shape[ax])[slice(b, e, st)]
    return ranges


def _norm_slice(a, t):
    out = {k: tuple(int(v) for v in a[k]) for k in ("begin", "end", "axes", "strides")}
    if not len(out["begin"]) == len(out["end"]) == len(out["axes"]) == len(out["strides"]):
        raise ValueError(f"begin, end, axes and strides must have one value per sliced axis, got {out}")
    return out


def _infer_slice(a, shapes, dtypes):
    return tuple(len(r) for r in slice_ranges(shapes[0], a["begin"], a["end"], a["axes"], a["strides"])), dtypes[0]


_register("strided_slice", {"begin": None, "end": None, "axes": None, "strides": None}, _infer_slice,
          normalize=_norm_slice)


def _infer_broadcast_to(a, shapes, dtypes):
    return tuple(np.broadcast_shapes(shapes[0], a["shape"])), dtypes[0]


_register("broadcast_to", {"shape": None}, _infer_broadcast_to,
          normalize=lambda a, t: {"shape": tuple(int(v) for v in a["shape"])})


def _infer_batch_matmul(a, shapes, dtypes):
    x, y = shapes
    if packed_factors(a["data_layout"]):   # (M/b, B, K/c, b, c) x (B, N/o, K/i, o, i) -> (M/b, B, N/o, b, o)
        return (x[0], x[1], y[1], x[3], y[3]), a["out_dtype"]
    if len(x) < 2 or len(y) < 2:
        raise ValueError(f"both operands must be at least 2-D, got {x} and {y}")
    if x[-1] != y[-2]:
        raise ValueError(f"{x} @ {y}: the inner dimensions differ ({x[-1]} vs {y[-2]})")
    if dtypes[0] != dtypes[1]:
        raise ValueError(f"operand dtypes differ ({dtypes[0]} vs {dtypes[1]}); insert a cast")
    return (*np.broadcast_shapes(x[:-2], y[:-2]), x[-2], y[-1]), a["out_dtype"]


_register("nn.batch_matmul", {"out_dtype": "", "data_layout": "BNC", "kernel_layout": "BKN"}, _infer_batch_matmul, (2,),
          lambda a, t: {**a, "out_dtype": _dtype(a, "out_dtype", t[0].dtype)})


def _infer_layer_norm(a, shapes, dtypes):
    axis = _axis(a["axis"], len(shapes[0]))
    for s in shapes[1:]:
        if math.prod(s) != math.prod(shapes[0][axis:]) or len(s) > len(shapes[0]) - axis:
            raise ValueError(f"scale/bias {s} must have the shape of the normalised axes {shapes[0][axis:]}")
    return _same(a, shapes, dtypes)


_register("nn.layer_norm", {"axis": -1, "epsilon": 1e-5}, _infer_layer_norm, (1, 2, 3),
          lambda a, t: {"axis": int(a["axis"]), "epsilon": float(a["epsilon"])})


def _norm_resize(a, t):
    if a["method"] not in ("linear", "nearest"):
        raise ValueError(f"method {a['method']!r} is not supported; allowed: 'linear', 'nearest'")
    if a["coordinate_transformation_mode"] not in RESIZE_COORDINATES:
        raise ValueError(f"coordinate_transformation_mode {a['coordinate_transformation_mode']!r} is not "
                         f"supported; allowed: {', '.join(RESIZE_COORDINATES)}")
    return {**a, "size": pair(a["size"], "size"), "scales": tuple(float(s) for s in pair_float(a["scales"]))}


def pair_float(v) -> tuple[float, float]:
    v = tuple(float(x) for x in v)
    if len(v) != 2 or min(v) <= 0:
        raise ValueError(f"scales need 2 positive values, got {v}")
    return v  # type: ignore[return-value]


RESIZE_COORDINATES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")


def _infer_resize(a, shapes, dtypes):
    _need_4d(shapes[0])
    return (*shapes[0][:2], *a["size"]), dtypes[0]


_register("image.resize2d", {"size": None, "scales": None, "method": "linear",
                             "coordinate_transformation_mode": "half_pixel"}, _infer_resize, normalize=_norm_resize)
