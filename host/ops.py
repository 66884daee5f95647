"""Compute definitions of the host operators (float32, NCHW), each a ``ComputeDag`` for one workload.

An anchor op (conv2d, dense, batch_matmul, pooling) takes elementwise ``producers`` applied to its data input
and ``consumers`` applied to its output, as stages of the same DAG: the sketch rules inline the producers and
fuse the consumers into the anchor's tile. An elementwise op is one of

    ("relu",) ("sigmoid",) ("silu",) ("tanh",) ("erf",) ("gelu",) ("gelu_tanh",) ("clip", lo, hi)
    ("add_const", c) ("mul_const", c)
    ("add", "channel" | "full") ("mul", "channel" | "full")   # with another input: a bias or a same-shape tensor

Reductions fix their order as graph_pack.kernels does (conv2d: input channel, kernel row, kernel column; dense
and batch_matmul: over K; pooling: row-major over the window; softmax and layer norm: ``host.numerics``' lane
partials along the row). exp is ``host.numerics.exp`` (a polynomial that vectorises), erf and tanh libm's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from host.loop_ir import (
    Affine,
    Axis,
    ComputeDag,
    Const,
    Expr,
    Load,
    Stage,
    Tensor,
    call,
    maximum,
    minimum,
)
from host.numerics import LANES
from host.shapes import pool_out

Elementwise = tuple
_SQRT2 = float(np.float32(math.sqrt(2.0)))
_GELU_C = float(np.float32(0.044715))
_SQRT_2_OVER_PI2 = float(np.float32(2 * math.sqrt(2 / math.pi)))   # 2 * sqrt(2 / pi): the sigmoid's argument is 2u
UNARY = ("relu", "sigmoid", "silu", "tanh", "erf", "gelu", "gelu_tanh", "clip", "add_const", "mul_const")
BINARY = ("add", "mul")


def apply_elementwise(op: Elementwise, v: Expr, other: Expr | None = None) -> Expr:
    """The expression of elementwise ``op`` on ``v`` (and the other input's value for add/mul)."""
    name = op[0]
    if name == "relu":
        return maximum(v, 0.0)
    if name == "clip":
        return minimum(maximum(v, float(op[1])), float(op[2]))
    if name == "sigmoid":
        return Const(1.0) / (Const(1.0) + call("exp", -v))
    if name == "silu":
        return v * (Const(1.0) / (Const(1.0) + call("exp", -v)))
    if name == "gelu_tanh":   # 0.5 x (1 + tanh(u)) written as x * sigmoid(2u): no cancellation, one exp
        u = Const(_SQRT_2_OVER_PI2) * (v + Const(_GELU_C) * v * v * v)
        return v / (Const(1.0) + call("exp", -u))
    if name == "tanh":
        return call("tanh", v)
    if name == "erf":
        return call("erf", v)
    if name == "gelu":
        return Const(0.5) * v * (Const(1.0) + call("erf", v / Const(_SQRT2)))
    if name == "add_const":
        return v + float(op[1])
    if name == "mul_const":
        return v * float(op[1])
    if name in BINARY:
        if other is None or len(op) != 2 or op[1] not in ("channel", "full"):
            raise ValueError(f"elementwise {name} needs another input, 'channel' or 'full': got {op!r}")
        return v + other if name == "add" else v * other
    raise ValueError(f"elementwise op {name!r} is not one of {', '.join((*UNARY, *BINARY))}")


def _check_chain(ops: Sequence[Elementwise]) -> None:
    for op in ops:
        if not isinstance(op, tuple) or not op or op[0] not in (*UNARY, *BINARY):
            raise ValueError(f"elementwise op {op!r} is not one of {', '.join((*UNARY, *BINARY))} (as a tuple)")


def _chain(prefix: str, src: str, axes: tuple[Axis, ...], logical: tuple[Affine, ...], logical_shape: tuple,
           channel_axis: int, ops: Sequence[Elementwise]) -> tuple[list[Stage], list[Tensor], str]:
    """One elementwise stage per op over ``axes``, reading ``src`` at its own point; extra inputs (bias or
    same-shape) are read at the logical index. Returns the stages, the extra inputs and the last tensor."""
    _check_chain(ops)
    stages, extra = [], []
    ident = tuple(Affine.of(a.name) for a in axes)
    for k, op in enumerate(ops):
        other = None
        if op[0] in BINARY:
            tname = f"{prefix}{k}_{op[1]}"
            if op[1] == "channel":
                extra.append(Tensor(tname, (logical_shape[channel_axis],)))
                other = Load(tname, (logical[channel_axis],))
            else:
                extra.append(Tensor(tname, tuple(logical_shape)))
                other = Load(tname, logical)
        name = f"{prefix}{k}_{op[0]}"
        stages.append(Stage(name, axes, apply_elementwise(op, Load(src, ident), other)))
        src = name
    return stages, extra, src


def _dag(name: str, inputs: list[Tensor], stages: list[Stage], out_shape: tuple, attrs: dict,
         constants: dict | None = None) -> ComputeDag:
    return ComputeDag(name, tuple(inputs), tuple(stages), tuple(out_shape), constants or {}, attrs)


def _axes(prefix: str, shape: Sequence[int]) -> tuple[Axis, ...]:
    return tuple(Axis(f"{prefix}{i}", int(n)) for i, n in enumerate(shape))


def _producers(x: str, shape: tuple, producers: Sequence[Elementwise], channel_axis: int
               ) -> tuple[list[Stage], list[Tensor], str]:
    axes = _axes("p", shape)
    return _chain("pre", x, axes, tuple(Affine.of(a.name) for a in axes), shape, channel_axis, producers)


def conv2d(x_shape: Sequence[int], w_shape: Sequence[int], strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1),
           groups: int = 1, producers: Sequence[Elementwise] = (), consumers: Sequence[Elementwise] = ()
           ) -> ComputeDag:
    """NCHW x OIHW -> NCHW, padding (top, left, bottom, right). Stages: the padded input (read as 0 outside x),
    then conv[n, g, oc, oh, ow] = sum over (rc, ry, rx) (the output's channel is g * O/groups + oc)."""
    n, c, h, w = map(int, x_shape)
    o, cg, kh, kw = map(int, w_shape)
    (sh, sw), (dh, dw) = tuple(strides), tuple(dilation)
    pt, pl, pb, pr = tuple(padding)
    if groups < 1 or c != cg * groups or o % groups:
        raise ValueError(f"conv2d: {c} input channels, weights {tuple(w_shape)} and groups={groups} do not fit "
                         "(C must be groups * weight's dim 1 and O a multiple of groups)")
    oh, ow = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1, (w + pl + pr - dw * (kw - 1) - 1) // sw + 1
    if min(oh, ow, sh, sw, dh, dw) < 1 or min(padding) < 0:
        raise ValueError(f"conv2d: no output for input {tuple(x_shape)}, kernel {kh}x{kw}, strides {strides}, "
                         f"padding {padding}, dilation {dilation}")
    og = o // groups
    pre, extra, src = _producers("x", (n, c, h, w), producers, 1)
    hp, wp = h + pt + pb, w + pl + pr
    pax = _axes("i", (n, c, hp, wp))
    pad = Stage("pad", pax, Load(src, (Affine.of("i0"), Affine.of("i1"), Affine.of("i2") - pt, Affine.of("i3") - pl),
                                 fill=0.0))
    axes = (Axis("n", n), Axis("g", groups), Axis("oc", og), Axis("oh", oh), Axis("ow", ow))
    red = (Axis("rc", cg), Axis("ry", kh), Axis("rx", kw))
    v = Affine.of
    body = (Load("pad", (v("n"), v("g") * cg + "rc", v("oh") * sh + v("ry") * dh, v("ow") * sw + v("rx") * dw))
            * Load("w", (v("g") * og + "oc", v("rc"), v("ry"), v("rx"))))
    conv = Stage("conv", axes, body, red, "sum")
    logical = (v("n"), v("g") * og + "oc", v("oh"), v("ow"))
    post, extra2, _ = _chain("post", "conv", axes, logical, (n, o, oh, ow), 1, consumers)
    attrs = {"w": [o, cg, kh, kw], "strides": [sh, sw], "padding": [pt, pl, pb, pr], "dilation": [dh, dw],
             "groups": groups, "producers": [list(p) for p in producers], "consumers": [list(p) for p in consumers]}
    return _dag("conv2d", [Tensor("x", (n, c, h, w)), Tensor("w", (o, cg, kh, kw)), *extra, *extra2],
                [*pre, pad, conv, *post], (n, o, oh, ow), attrs)


def dense(x_shape: Sequence[int], w_shape: Sequence[int], producers: Sequence[Elementwise] = (),
          consumers: Sequence[Elementwise] = ()) -> ComputeDag:
    """y[i, j] = sum_k x[i, k] * w[j, k] (w is (units, K), as graph_pack's nn.dense)."""
    m, k = map(int, x_shape)
    units, k2 = map(int, w_shape)
    if k != k2:
        raise ValueError(f"dense: x {tuple(x_shape)} and w {tuple(w_shape)} disagree on K ({k} != {k2})")
    pre, extra, src = _producers("x", (m, k), producers, 1)
    axes = (Axis("i", m), Axis("j", units))
    body = Load(src, (Affine.of("i"), Affine.of("k"))) * Load("w", (Affine.of("j"), Affine.of("k")))
    st = Stage("dense", axes, body, (Axis("k", k),), "sum")
    post, extra2, _ = _chain("post", "dense", axes, st.identity_index, (m, units), 1, consumers)
    attrs = {"w": [units, k], "producers": [list(p) for p in producers], "consumers": [list(p) for p in consumers]}
    return _dag("dense", [Tensor("x", (m, k)), Tensor("w", (units, k)), *extra, *extra2], [*pre, st, *post],
                (m, units), attrs)


def pack_dense_weight(w: np.ndarray) -> np.ndarray:
    """A dense weight (units, K) rewritten as (ceil(units / LANES), K, LANES) for ``dense_packed``: block b, row k
    holds w[b * LANES : (b + 1) * LANES, k] (zero rows past ``units``), so a vector over output units is one
    contiguous load. Done once per constant weight (Ansor's layout rewrite)."""
    units, k = w.shape
    blocks = -(-units // LANES)
    padded = np.zeros((blocks * LANES, k), np.float32)
    padded[:units] = w
    return np.ascontiguousarray(padded.reshape(blocks, LANES, k).transpose(0, 2, 1))


def dense_packed(x_shape: Sequence[int], units: int) -> ComputeDag:
    """y[i, j] = sum_k x[i, k] * w[j, k] as ``dense``, the weight given as ``pack_dense_weight(w)``: the same
    products summed in the same order over k, so the same bits. The output is (M, blocks * LANES): the columns
    past ``units`` (zero weights) are the caller's to drop."""
    m, k = map(int, x_shape)
    blocks = -(-int(units) // LANES)
    v = Affine.of
    axes = (Axis("i", m), Axis("jb", blocks), Axis("jl", LANES))
    body = Load("x", (v("i"), v("k"))) * Load("wp", (v("jb"), v("k"), v("jl")))
    st = Stage("dense", axes, body, (Axis("k", k),), "sum")
    return _dag("dense_packed", [Tensor("x", (m, k)), Tensor("wp", (blocks, k, LANES))], [st],
                (m, blocks * LANES), {"units": int(units)})


def batch_matmul(a_shape: Sequence[int], b_shape: Sequence[int], transpose_b: bool = False,
                 consumers: Sequence[Elementwise] = ()) -> ComputeDag:
    """y[b, i, j] = sum_k a[b, i, k] * B[b, k, j] (B = b transposed when ``transpose_b``: b is (batch, N, K))."""
    bs, m, k = map(int, a_shape)
    bs2, *rest = map(int, b_shape)
    nn_, k2 = (rest[0], rest[1]) if transpose_b else (rest[1], rest[0])
    if bs != bs2 or k != k2:
        raise ValueError(f"batch_matmul: a {tuple(a_shape)} and b {tuple(b_shape)} (transpose_b={transpose_b}) "
                         "disagree on batch or K")
    axes = (Axis("b", bs), Axis("i", m), Axis("j", nn_))
    v = Affine.of
    rhs = Load("b", (v("b"), v("j"), v("k"))) if transpose_b else Load("b", (v("b"), v("k"), v("j")))
    st = Stage("bmm", axes, Load("a", (v("b"), v("i"), v("k"))) * rhs, (Axis("k", k),), "sum")
    post, extra, _ = _chain("post", "bmm", axes, st.identity_index, (bs, m, nn_), 2, consumers)
    attrs = {"b": list(b_shape), "transpose_b": transpose_b, "consumers": [list(p) for p in consumers]}
    return _dag("batch_matmul", [Tensor("a", (bs, m, k)), Tensor("b", tuple(map(int, b_shape))), *extra],
                [st, *post], (bs, m, nn_), attrs)


def pool2d(kind: str, x_shape: Sequence[int], pool_size=(2, 2), strides=(2, 2), padding=(0, 0, 0, 0),
           ceil_mode: bool = False, count_include_pad: bool = False,
           consumers: Sequence[Elementwise] = ()) -> ComputeDag:
    """max or avg pooling as graph_pack.kernels: the input padded (max: -inf, avg: 0), extended past the
    bottom/right padding in ceil mode; avg divides the window's sum by its count (of real inputs unless
    ``count_include_pad``)."""
    if kind not in ("max", "avg"):
        raise ValueError(f"pool2d kind {kind!r} is not one of max, avg")
    n, c, h, w = map(int, x_shape)
    (kh, kw), (sh, sw), (pt, pl, pb, pr) = tuple(pool_size), tuple(strides), tuple(padding)
    oh, ow = pool_out(h, kh, sh, pt, pb, ceil_mode), pool_out(w, kw, sw, pl, pr, ceil_mode)
    if min(oh, ow) < 1:
        raise ValueError(f"{kind}_pool2d: no output for input {tuple(x_shape)}, window {kh}x{kw}")
    hp, wp = (oh - 1) * sh + kh, (ow - 1) * sw + kw
    fill = -math.inf if kind == "max" else 0.0
    pax = _axes("i", (n, c, hp, wp))
    pad = Stage("pad", pax, Load("x", (Affine.of("i0"), Affine.of("i1"), Affine.of("i2") - pt, Affine.of("i3") - pl),
                                 fill=fill))
    axes = (Axis("n", n), Axis("c", c), Axis("oh", oh), Axis("ow", ow))
    v = Affine.of
    body = Load("pad", (v("n"), v("c"), v("oh") * sh + "ry", v("ow") * sw + "rx"))
    pool = Stage("pool", axes, body, (Axis("ry", kh), Axis("rx", kw)), "max" if kind == "max" else "sum")
    stages, constants = [pad, pool], {}
    if kind == "avg":
        if count_include_pad:
            count: Expr = Const(float(kh * kw))
        else:
            ones = np.pad(np.ones((h, w), np.float32), ((pt, max(0, hp - h - pt)), (pl, max(0, wp - w - pl))))
            counts = np.array([[ones[i * sh:i * sh + kh, j * sw:j * sw + kw].sum() for j in range(ow)]
                               for i in range(oh)], np.float32)
            constants["count"] = counts
            count = Load("count", (v("oh"), v("ow")))
        stages.append(Stage("avg", axes, Load("pool", pool.identity_index) / count))
    post, extra, _ = _chain("post", stages[-1].name, axes, pool.identity_index, (n, c, oh, ow), 1, consumers)
    attrs = {"kind": kind, "pool_size": [kh, kw], "strides": [sh, sw], "padding": [pt, pl, pb, pr],
             "ceil_mode": ceil_mode, "count_include_pad": count_include_pad,
             "consumers": [list(p) for p in consumers]}
    return _dag(f"{kind}_pool2d", [Tensor("x", (n, c, h, w)), *extra], [*stages, *post], (n, c, oh, ow), attrs,
                constants)


def global_avg_pool2d(x_shape: Sequence[int], consumers: Sequence[Elementwise] = ()) -> ComputeDag:
    """y[n, c] = (sum over the image, row-major) / (H * W), shaped (N, C, 1, 1)."""
    n, c, h, w = map(int, x_shape)
    axes = (Axis("n", n), Axis("c", c))
    v = Affine.of
    s = Stage("gsum", axes, Load("x", (v("n"), v("c"), v("ry"), v("rx"))), (Axis("ry", h), Axis("rx", w)), "sum")
    mean = Stage("gavg", axes, Load("gsum", s.identity_index) / Const(float(h * w)))
    post, extra, _ = _chain("post", "gavg", axes, s.identity_index, (n, c), 1, consumers)
    return _dag("global_avg_pool2d", [Tensor("x", (n, c, h, w)), *extra], [s, mean, *post], (n, c, 1, 1),
                {"consumers": [list(p) for p in consumers]})


def _rows(shape: Sequence[int], axis: int, what: str) -> tuple[int, int]:
    shape = tuple(map(int, shape))
    if axis not in (-1, len(shape) - 1):
        raise ValueError(f"{what}: axis {axis} is not supported (allowed: the last axis, -1 or {len(shape) - 1})")
    return math.prod(shape[:-1]), shape[-1]


def _lane_partials(name: str, rows: Axis, source: str, k: int, body, combiner: str, fill: float
                   ) -> tuple[Stage, Stage]:
    """A row reduction in ``host.numerics``' lane-partial order: ``name_lanes[r, j]`` combines ``body(load)`` over
    the chunks c of the row (the load of ``source[r, c * LANES + j]``, ``fill`` past the row's end), then
    ``name[r]`` combines the LANES partials in lane order."""
    v = Affine.of
    chunks = -(-k // LANES)
    ld = Load(source, (v("r"), v("c") * LANES + "j"), fill=fill)
    parts = Stage(f"{name}_lanes", (rows, Axis("j", LANES)), body(ld), (Axis("c", chunks),), combiner)
    total = Stage(name, (rows,), Load(parts.name, (v("r"), v("j"))), (Axis("j", LANES),), combiner)
    return parts, total


def softmax(shape: Sequence[int], axis: int = -1) -> ComputeDag:
    """Along the last axis, in ``host.numerics``' order (graph_pack.kernels' reference): m = the row's max
    (lane partials), e = exp(x - m) over the row padded to whole chunks (-inf: exp gives 0 there), s = the sum of
    e (lane partials), y = e / s; exp is ``host.numerics.exp``."""
    rows, k = _rows(shape, axis, "softmax")
    v = Affine.of
    r = Axis("r", rows)
    padded = -(-k // LANES) * LANES
    mp, m = _lane_partials("rmax", r, "x", k, lambda ld: ld, "max", -math.inf)
    e = Stage("rexp", (r, Axis("k", padded)),
              call("exp", Load("x", (v("r"), v("k")), fill=-math.inf) - Load("rmax", (v("r"),))))
    sp, s = _lane_partials("rsum", r, "rexp", padded, lambda ld: ld, "sum", 0.0)
    y = Stage("softmax", (r, Axis("k", k)), Load("rexp", (v("r"), v("k"))) / Load("rsum", (v("r"),)))
    return _dag("softmax", [Tensor("x", (rows, k))], [mp, m, e, sp, s, y], tuple(shape), {"shape": list(shape)})


def layer_norm(shape: Sequence[int], axis: int = -1, epsilon: float = 1e-5) -> ComputeDag:
    """ONNX LayerNormalization along the last axis, in ``host.numerics``' order (graph_pack.kernels' reference):
    mean = sum(x) / K, d = x - mean, var = sum(d * d) / K, y = d * (1 / sqrt(var + eps)) * gamma + beta, each
    sum over lane partials."""
    rows, k = _rows(shape, axis, "layer_norm")
    v = Affine.of
    r, kk = Axis("r", rows), Axis("k", k)
    x = Load("x", (v("r"), v("k")))
    s1p, s1 = _lane_partials("lsum", r, "x", k, lambda ld: ld, "sum", 0.0)
    mean = Stage("lmean", (r,), Load("lsum", (v("r"),)) / Const(float(k)))
    d = Stage("ldiff", (r, kk), x - Load("lmean", (v("r"),)))
    s2p, s2 = _lane_partials("lsq", r, "ldiff", k, lambda ld: ld * ld, "sum", 0.0)
    inv = Stage("linv", (r,), Const(1.0) / call("sqrt", Load("lsq", (v("r"),)) / Const(float(k)) + Const(epsilon)))
    dd = Load("ldiff", (v("r"), v("k")))
    y = Stage("layer_norm", (r, kk), dd * Load("linv", (v("r"),)) * Load("gamma", (v("k"),)) + Load("beta", (v("k"),)))
    return _dag("layer_norm", [Tensor("x", (rows, k)), Tensor("gamma", (k,)), Tensor("beta", (k,))],
                [s1p, s1, mean, d, s2p, s2, inv, y], tuple(shape), {"shape": list(shape), "epsilon": epsilon})


def elementwise(shape: Sequence[int], ops: Sequence[Elementwise], channel_axis: int = 1) -> ComputeDag:
    """A chain of elementwise ops on x (extra inputs for add/mul: a bias along ``channel_axis`` or a same-shape
    tensor), one stage per op."""
    shape = tuple(map(int, shape))
    if not ops:
        raise ValueError("elementwise: give at least one op")
    axes = _axes("e", shape)
    stages, extra, _ = _chain("ew", "x", axes, tuple(Affine.of(a.name) for a in axes), shape, channel_axis, ops)
    return _dag("elementwise", [Tensor("x", shape), *extra], stages, shape,
                {"ops": [list(p) for p in ops], "channel_axis": channel_axis})


def gelu(shape: Sequence[int]) -> ComputeDag:
    """y = 0.5 * x * (1 + erf(x / sqrt(2))) (ONNX Gelu, approximate='none')."""
    return elementwise(shape, [("gelu",)])
