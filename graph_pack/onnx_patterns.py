"""ONNX converters for the node patterns of today's exporters (``torch.onnx.export``, both exporters), beyond the
classic CNN ops of ``frontend_onnx``: transformer encoders (Gather embeddings, LayerNormalization or its decomposed
form, Erf / Gelu, attention masks through Equal / Where, MatMul of two activations), MobileNetV3's HardSigmoid /
HardSwish, ShuffleNet's Split, YOLO's LeakyRelu, and the exporters' shape arithmetic (Shape, Size,
ConstantOfShape, Range, Slice, Gather, Expand on constants), which ``frontend_onnx`` folds at import: a rule that
returns a numpy array gives a constant, and a node whose inputs are all constant is evaluated by the reference
kernels. Importing this module registers the rules (``frontend_onnx`` does, so its supported-op list has them).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from graph_pack.frontend_onnx import _opt, _require_const, _rule, _same_dtype
from graph_pack.graph import GraphError


@_rule("Sqrt", "Erf")
def _float_unary(cx, node, ins, attrs):
    return cx.emit(node, node.op_type.lower(), [cx.x(ins[0])])


@_rule("LeakyRelu")
def _leaky_relu(cx, node, ins, attrs):
    return cx.emit(node, "nn.leaky_relu", [cx.x(ins[0])], alpha=float(attrs.get("alpha", 0.01)))


def _scalar(cx, value: float, like: str, hint: str) -> str:
    return cx.const(hint, np.asarray(value, cx.type_of(like).dtype))


def _hard_sigmoid(cx, node, x: str, alpha: float, beta: float, hint: str, last: bool) -> str:
    """clip(alpha * x + beta, 0, 1): ONNX HardSigmoid (PyTorch's is alpha = 1/6, beta = 1/2)."""
    scaled = cx.op("multiply", [x, _scalar(cx, alpha, x, f"{hint}_alpha")], f"{hint}_scaled")
    shifted = cx.op("add", [scaled, _scalar(cx, beta, x, f"{hint}_beta")], f"{hint}_shifted")
    if last:
        return cx.emit(node, "clip", [shifted], a_min=0.0, a_max=1.0)
    return cx.op("clip", [shifted], f"{hint}_gate", a_min=0.0, a_max=1.0)


@_rule("HardSigmoid")
def _hardsigmoid(cx, node, ins, attrs):
    return _hard_sigmoid(cx, node, cx.x(ins[0]), float(attrs.get("alpha", 0.2)), float(attrs.get("beta", 0.5)),
                         cx.out_name(node), last=True)


@_rule("HardSwish")
def _hardswish(cx, node, ins, attrs):
    x = cx.x(ins[0])
    gate = _hard_sigmoid(cx, node, x, 1 / 6, 0.5, cx.out_name(node), last=False)
    return cx.emit(node, "multiply", [x, gate])


@_rule("Gelu")
def _gelu(cx, node, ins, attrs):
    """0.5 x (1 + erf(x / sqrt 2)), or with approximate='tanh' 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))."""
    x, out = cx.x(ins[0]), cx.out_name(node)
    approximate = attrs.get("approximate", "none")
    if approximate == "none":
        inner = cx.op("multiply", [x, _scalar(cx, 1 / math.sqrt(2), x, f"{out}_rsqrt2")], f"{out}_scaled")
        curve = cx.op("erf", [inner], f"{out}_erf")
    elif approximate == "tanh":
        cube = cx.op("multiply", [cx.op("multiply", [x, x], f"{out}_sq"), x], f"{out}_cube")
        poly = cx.op("add", [x, cx.op("multiply", [cube, _scalar(cx, 0.044715, x, f"{out}_c")], f"{out}_t")],
                     f"{out}_poly")
        inner = cx.op("multiply", [poly, _scalar(cx, math.sqrt(2 / math.pi), x, f"{out}_k")], f"{out}_inner")
        curve = cx.op("tanh", [inner], f"{out}_tanh")
    else:
        raise GraphError(f"approximate={approximate!r} is not supported; allowed: 'none', 'tanh'")
    one_plus = cx.op("add", [curve, _scalar(cx, 1.0, x, f"{out}_one")], f"{out}_1p")
    half = cx.op("multiply", [x, _scalar(cx, 0.5, x, f"{out}_half")], f"{out}_halfx")
    return cx.emit(node, "multiply", [half, one_plus])


@_rule("Pow")
def _pow(cx, node, ins, attrs):
    """x ** 2 (the decomposed LayerNorm's) as x * x; another constant exponent through ``power``."""
    exponent = _require_const(cx, ins[1], "Pow's exponent")
    if exponent.size == 1 and float(exponent.reshape(())) == 2.0:
        x = cx.x(ins[0])
        return cx.emit(node, "multiply", [x, x])
    return cx.emit(node, "power", list(_same_dtype(cx, ins[0], ins[1])))


_COMPARE = {"Equal": "equal", "Less": "less", "Greater": "greater"}


@_rule(*_COMPARE)
def _compare(cx, node, ins, attrs):
    return cx.emit(node, _COMPARE[node.op_type], list(_same_dtype(cx, ins[0], ins[1])))


@_rule("Where")
def _where(cx, node, ins, attrs):
    if cx.type_of(ins[0]).dtype != "bool":
        raise GraphError(f"the condition must be bool, got {cx.type_of(ins[0]).dtype}")
    x, y = _same_dtype(cx, ins[1], ins[2])
    return cx.emit(node, "where", [cx.x(ins[0]), x, y])


@_rule("Expand")
def _expand(cx, node, ins, attrs):
    shape = [int(v) for v in _require_const(cx, ins[1], "Expand's shape").reshape(-1)]
    try:
        np.broadcast_shapes(cx.type_of(ins[0]).shape, tuple(shape))
    except ValueError:
        raise GraphError(f"shape {shape} does not broadcast with the input's {cx.type_of(ins[0]).shape}") from None
    return cx.emit(node, "broadcast_to", [cx.x(ins[0])], shape=tuple(shape))


@_rule("Gather")
def _gather(cx, node, ins, attrs):
    """Embeddings (a constant table, activation indices), a token pick (``x[:, 0]``), the exporters' shape
    arithmetic (constants both: folded)."""
    rank = len(cx.type_of(ins[0]).shape)
    axis = int(attrs.get("axis", 0))
    if not -rank <= axis < rank:
        raise GraphError(f"axis={axis} is out of range for rank {rank}")
    if np.dtype(cx.type_of(ins[1]).dtype).kind not in "iu":
        raise GraphError(f"indices must be integers, got {cx.type_of(ins[1]).dtype}")
    axis %= rank
    if cx.is_const(ins[1]) and not cx.is_const(ins[0]):
        shape, idx = cx.type_of(ins[0]).shape, cx.consts[ins[1]]
        size = shape[axis]
        if idx.size and (idx.min() < -size or idx.max() >= size):
            raise GraphError(f"indices {idx.reshape(-1)[:8].tolist()} are out of range [-{size}, {size})")
        picked = _as_slice(np.where(idx < 0, idx + size, idx))
        if picked is not None:   # x[:, 0], qkv[1]: a slice, so the graph stays float (quantize wants that)
            begin, step, count = picked
            out = cx.out_name(node)
            end = begin + step * count
            kept = cx.op("strided_slice", [cx.x(ins[0])], f"{out}_slice", begin=[begin],
                         end=[end if end >= 0 else -size - 1], axes=[axis], strides=[step])   # -size-1: past 0
            return cx.emit(node, "reshape", [kept], newshape=(*shape[:axis], *idx.shape, *shape[axis + 1:]))
    return cx.emit(node, "take", [cx.x(ins[0]), cx.x(ins[1])], axis=axis)


def _as_slice(idx: np.ndarray) -> tuple[int, int, int] | None:
    """(begin, step, count) when the (non-negative) indices are an arithmetic sequence with a non-zero step."""
    flat = [int(v) for v in idx.reshape(-1)]
    if not flat:
        return None
    step = flat[1] - flat[0] if len(flat) > 1 else 1
    if step == 0 or any(b - a != step for a, b in itertools.pairwise(flat)):
        return None
    return flat[0], step, len(flat)


@_rule("Shape")
def _shape(cx, node, ins, attrs):
    shape = np.asarray(cx.type_of(ins[0]).shape, np.int64)
    return shape[slice(attrs.get("start", 0), attrs.get("end"))]


@_rule("Size")
def _size(cx, node, ins, attrs):
    return np.asarray(math.prod(cx.type_of(ins[0]).shape), np.int64)


@_rule("ConstantOfShape")
def _constant_of_shape(cx, node, ins, attrs):
    shape = tuple(int(v) for v in _require_const(cx, ins[0], "ConstantOfShape's shape").reshape(-1))
    value = np.asarray(attrs.get("value", np.zeros(1, np.float32)))
    if value.size != 1:
        raise GraphError(f"value must have one element, got shape {value.shape}")
    cx.budget.tensor(shape, value.dtype, "the output")
    return np.full(shape, value.reshape(()), value.dtype)


@_rule("Range")
def _range(cx, node, ins, attrs):
    start, limit, delta = (_require_const(cx, i, f"Range's {w}").reshape(())
                           for i, w in zip(ins[:3], ("start", "limit", "delta"), strict=True))
    if delta == 0:
        raise GraphError("delta must not be 0")
    count = max(math.ceil((float(limit) - float(start)) / float(delta)), 0)
    cx.budget.tensor((count,), start.dtype, "the output")
    return (start + np.arange(count, dtype=start.dtype) * delta).astype(start.dtype)


@_rule("Slice")
def _slice(cx, node, ins, attrs):
    rank = len(cx.type_of(ins[0]).shape)
    if cx.opset < 10:
        starts, ends = attrs.get("starts"), attrs.get("ends")
        axes, steps = attrs.get("axes", list(range(len(starts or [])))), [1] * len(starts or [])
    else:
        starts = _require_const(cx, ins[1], "Slice's starts")
        ends = _require_const(cx, ins[2], "Slice's ends")
        axes = _require_const(cx, ins[3], "Slice's axes") if _opt(ins, 3) else range(len(starts))
        steps = _require_const(cx, ins[4], "Slice's steps") if _opt(ins, 4) else [1] * len(starts)
    if starts is None or ends is None:
        raise GraphError("starts and ends are required")
    axes = [int(a) for a in np.asarray(axes).reshape(-1)]
    if any(not -rank <= a < rank for a in axes):
        raise GraphError(f"axes {axes} are out of range for rank {rank}")
    return cx.emit(node, "strided_slice", [cx.x(ins[0])], begin=[int(v) for v in np.asarray(starts).reshape(-1)],
                   end=[int(v) for v in np.asarray(ends).reshape(-1)], axes=[a % rank for a in axes],
                   strides=[int(v) for v in np.asarray(steps).reshape(-1)])


@_rule("Split")
def _split(cx, node, ins, attrs):
    """One ``strided_slice`` per output (the IR's nodes have one output each)."""
    shape = cx.type_of(ins[0]).shape
    axis = int(attrs.get("axis", 0))
    if not -len(shape) <= axis < len(shape):
        raise GraphError(f"axis={axis} is out of range for shape {shape}")
    axis %= len(shape)
    outputs = list(node.output)
    if _opt(ins, 1):
        sizes = [int(v) for v in _require_const(cx, ins[1], "Split's split").reshape(-1)]
    elif "split" in attrs:
        sizes = [int(v) for v in attrs["split"]]
    else:
        parts = int(attrs.get("num_outputs", len(outputs)))
        chunk = -(-shape[axis] // parts)
        sizes = [min(chunk, shape[axis] - k * chunk) for k in range(parts)]
    if len(sizes) != len(outputs) or sum(sizes) != shape[axis] or min(sizes) < 0:
        raise GraphError(f"split sizes {sizes} must be {len(outputs)} non-negative sizes adding up to {shape[axis]}")
    x, begin, out = cx.x(ins[0]), 0, []
    for name, size in zip(outputs, sizes, strict=True):
        out.append(cx.b.op("strided_slice", [x], name=cx._ir_name(name) if name else cx._unique("split"),
                           begin=[begin], end=[begin + size], axes=[axis], strides=[1]))
        begin += size
    return out


@_rule("LayerNormalization")
def _layer_norm(cx, node, ins, attrs):
    rank = len(cx.type_of(ins[0]).shape)
    axis = int(attrs.get("axis", -1))
    if not -rank <= axis < rank:
        raise GraphError(f"axis={axis} is out of range for rank {rank}")
    if int(attrs.get("stash_type", 1)) != 1:
        raise GraphError("stash_type must be 1 (float32 statistics)")
    operands = [cx.x(ins[0])] + [cx.x(i) for i in ins[1:3] if i]
    return cx.emit(node, "nn.layer_norm", operands, axis=axis % rank, epsilon=float(attrs.get("epsilon", 1e-5)))



@_rule("Mod")
def _mod(cx, node, ins, attrs):
    """Integer remainder in the exporters' shape arithmetic (constants only: folded). fmod=0 takes the divisor's
    sign (Python's %), fmod=1 the dividend's (C's fmod)."""
    if not (cx.is_const(ins[0]) and cx.is_const(ins[1])):
        raise GraphError("Mod is supported on constants only (shape arithmetic, folded at import)")
    num, den = np.asarray(cx.consts[ins[0]]), np.asarray(cx.consts[ins[1]])
    if num.dtype.kind in "iu" and not np.all(den):
        raise GraphError("integer modulo by zero")
    return np.asarray(np.fmod(num, den) if int(attrs.get("fmod", 0)) else np.mod(num, den), num.dtype)


def _heads(cx, name: str, heads: int | None, hint: str, what: str) -> str:
    """A 3-D (batch, sequence, heads * size) tensor as 4-D (batch, heads, sequence, size); 4-D as it is."""
    shape = cx.type_of(name).shape
    if len(shape) == 4:
        return cx.x(name)
    if len(shape) != 3 or not heads or shape[2] % heads:
        raise GraphError(f"{what} {shape} must be 4-D, or 3-D with its hidden size a multiple of the heads "
                         f"attribute (got {heads})")
    split = cx.op("reshape", [cx.x(name)], f"{hint}_heads", newshape=(shape[0], shape[1], heads, shape[2] // heads))
    return cx.op("transpose", [split], f"{hint}_bhsd", axes=(0, 2, 1, 3))


def _repeat_heads(cx, x: str, times: int, hint: str) -> str:
    """(B, H, S, D) -> (B, H * times, S, D), each head repeated ``times`` times in place (as numpy's repeat)."""
    b, h, s, d = cx.b.graph[x].shape
    wide = cx.op("reshape", [x], f"{hint}_5d", newshape=(b, h, 1, s, d))
    repeated = cx.op("broadcast_to", [wide], f"{hint}_repeated", shape=(b, h, times, s, d))
    return cx.op("reshape", [repeated], f"{hint}_gqa", newshape=(b, h * times, s, d))


@_rule("Attention")
def _attention(cx, node, ins, attrs):
    """ONNX's Attention (opset 23, what torch.onnx.export writes for scaled_dot_product_attention from opset 23):
    softmax(Q K^T * scale + mask) V, written out as host ops (``nn.batch_matmul``, ``nn.softmax``) the way
    ONNX's reference computes it: Q and K each scaled by sqrt(scale) before the product."""
    if _opt(ins, 4) or _opt(ins, 5) or _opt(ins, 6):
        raise GraphError("past_key / past_value / nonpad_kv_seqlen (a KV cache) are not supported")
    if float(attrs.get("softcap", 0.0)) != 0.0 or int(attrs.get("qk_matmul_output_mode", 0)) != 0:
        raise GraphError("softcap and qk_matmul_output_mode are not supported; allowed: 0")
    out = cx.out_name(node)
    q_heads, kv_heads = attrs.get("q_num_heads"), attrs.get("kv_num_heads")
    rank = len(cx.type_of(ins[0]).shape)
    q = _heads(cx, ins[0], q_heads, f"{out}_q", "Q")
    k = _heads(cx, ins[1], kv_heads, f"{out}_k", "K")
    v = _heads(cx, ins[2], kv_heads, f"{out}_v", "V")
    (b, hq, sq, d), (_, hk, sk, _) = cx.b.graph[q].shape, cx.b.graph[k].shape
    if hq != hk:   # grouped-query attention: each K / V head serves hq / hk query heads
        if hq % hk:
            raise GraphError(f"{hq} query heads are not a multiple of {hk} key/value heads")
        k, v = _repeat_heads(cx, k, hq // hk, f"{out}_k"), _repeat_heads(cx, v, hq // hk, f"{out}_v")
    scale = attrs.get("scale")
    root = np.float32(np.sqrt(np.float32(scale) if scale is not None else np.float32(1 / np.sqrt(d))))
    qs = cx.op("multiply", [q, cx.const(f"{out}_qscale", root)], f"{out}_qs")
    ks = cx.op("multiply", [k, cx.const(f"{out}_kscale", root)], f"{out}_ks")
    kt = cx.op("transpose", [ks], f"{out}_kt", axes=(0, 1, 3, 2))
    scores = cx.op("nn.batch_matmul", [qs, kt], f"{out}_scores")
    bias = np.zeros((sq, sk), np.float32)
    if int(attrs.get("is_causal", 0)):
        bias = np.where(np.triu(np.ones((sq, sk), bool), k=1), np.float32(-np.inf), bias)
    if np.any(bias):
        scores = cx.op("add", [scores, cx.const(f"{out}_causal", bias)], f"{out}_causal_scores")
    if _opt(ins, 3):
        mask_shape = cx.type_of(ins[3]).shape
        if not mask_shape or mask_shape[-1] != sk:
            raise GraphError(f"attn_mask {mask_shape} must end in the key sequence length {sk}")
        if cx.type_of(ins[3]).dtype == "bool":
            mask = cx.op("where", [cx.x(ins[3]), cx.const(f"{out}_open", np.float32(0)),
                                   cx.const(f"{out}_closed", np.float32(-np.inf))], f"{out}_mask")
        else:
            mask = cx.x(ins[3])
        scores = cx.op("add", [scores, mask], f"{out}_masked")
    probs = cx.op("nn.softmax", [scores], f"{out}_probs", axis=-1)
    if rank == 4:
        return cx.emit(node, "nn.batch_matmul", [probs, v])
    y = cx.op("nn.batch_matmul", [probs, v], f"{out}_bhsd")
    y = cx.op("transpose", [y], f"{out}_bshd", axes=(0, 2, 1, 3))
    return cx.emit(node, "reshape", [y], newshape=(b, sq, -1))
