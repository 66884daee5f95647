"""ONNX's quantized forms imported as their float equivalents: QuantizeLinear / DequantizeLinear (QDQ models),
QLinearConv, QLinearMatMul, ConvInteger and MatMulInteger (QOperator models).

Why float: ``graph_pack.quantize`` takes a float graph and chooses its own scales (it cannot yet take a model's),
so a quantized model is imported as the float graph that computes the same numbers. A quantized tensor is
carried as a float32 tensor holding its integer values (exact: they are below 2**24), so QuantizeLinear is
``clip(round(x / scale) + zero_point, qmin, qmax)`` and DequantizeLinear ``(q - zero_point) * scale``; a
QuantizeLinear followed by a DequantizeLinear is the fake quantization of QDQ training, in float32 exactly as
onnxruntime computes it, and DequantizeLinear of a constant weight folds into a float weight. The integer
convolutions and matrix products run in float32 on the zero-point-shifted integers: exact while every partial
sum stays below 2**24 (for uint8 x int8 operands, a reduction of up to 514 terms in the worst case; far more
with typical values), then requantized as onnxruntime does: ``round(acc * (x_scale * w_scale / y_scale))``
plus the zero point, clipped. DynamicQuantizeLinear (run-time scales) is not supported.
"""

from __future__ import annotations

import numpy as np

from graph_pack.frontend_onnx import _conv_args, _opt, _require_const, _rule
from graph_pack.graph import GraphError

_RANGES = {"uint8": (0, 255), "int8": (-128, 127), "uint16": (0, 65535), "int16": (-32768, 32767)}


def _as_float(cx, name: str) -> str:
    """The IR node of ``name`` as float32 (an integer input or constant holds the quantized values)."""
    x = cx.x(name)
    if cx.type_of(name).dtype != "float32":
        x = cx.op("cast", [x], f"{cx._ir_name(name)}_f32", dtype="float32")
    return x


def _per_axis(cx, name: str, rank: int, axis: int, what: str) -> np.ndarray:
    """A scale or zero point (constant) shaped to broadcast over a ``rank``-D tensor along ``axis``."""
    value = _require_const(cx, name, what)
    if value.size == 1:
        return value.reshape(())
    if value.ndim != 1:
        raise GraphError(f"{what} must be a scalar or 1-D (per axis), got shape {value.shape}")
    axis %= rank
    return value.reshape((-1,) + (1,) * (rank - 1 - axis))


def _zero_point(cx, ins: list[str], k: int, rank: int, axis: int, what: str,
                allowed: tuple[str, ...] = tuple(_RANGES)) -> tuple[np.ndarray, str]:
    """(zero point as float32, quantized dtype name); a missing zero point is 0 of uint8."""
    if not _opt(ins, k):
        return np.zeros((), np.float32), "uint8"
    value = _per_axis(cx, ins[k], rank, axis, what)
    if value.dtype.name not in allowed:
        raise GraphError(f"{what} has type {value.dtype.name}; allowed: {', '.join(allowed)}")
    return value.astype(np.float32), value.dtype.name


def _const_f32(cx, hint: str, value) -> str:
    return cx.const(hint, np.asarray(value, np.float32))


@_rule("QuantizeLinear")
def _quantize_linear(cx, node, ins, attrs):
    rank = len(cx.type_of(ins[0]).shape)
    axis = int(attrs.get("axis", 1))
    if cx.type_of(ins[0]).dtype != "float32":
        raise GraphError(f"the input must be float32, got {cx.type_of(ins[0]).dtype}")
    if "output_dtype" in attrs and int(attrs["output_dtype"]):
        raise GraphError("output_dtype is not supported; give the type by the zero point")
    scale = _per_axis(cx, ins[1], rank, axis, "y_scale").astype(np.float32)
    zero, qtype = _zero_point(cx, ins, 2, rank, axis, "y_zero_point")
    qmin, qmax = _RANGES[qtype]
    out = cx.out_name(node)
    divided = cx.op("divide", [cx.x(ins[0]), _const_f32(cx, f"{out}_scale", scale)], f"{out}_scaled")
    rounded = cx.op("round", [divided], f"{out}_round")
    shifted = cx.op("add", [rounded, _const_f32(cx, f"{out}_zp", zero)], f"{out}_shifted")
    return cx.emit(node, "clip", [shifted], a_min=float(qmin), a_max=float(qmax))


@_rule("DequantizeLinear")
def _dequantize_linear(cx, node, ins, attrs):
    rank = len(cx.type_of(ins[0]).shape)
    axis = int(attrs.get("axis", 1))
    if int(attrs.get("block_size", 0)):
        raise GraphError("block_size (blocked quantization) is not supported; allowed: 0")
    scale = _per_axis(cx, ins[1], rank, axis, "x_scale").astype(np.float32)
    # an int32 input (a quantized bias, as onnxruntime.quantization writes them) has an int32 zero point of 0
    zero, _ = _zero_point(cx, ins, 2, rank, axis, "x_zero_point", (*_RANGES, "int32"))
    out = cx.out_name(node)
    x = _as_float(cx, ins[0])
    if np.any(zero):
        x = cx.op("subtract", [x, _const_f32(cx, f"{out}_zp", zero)], f"{out}_centered")
    return cx.emit(node, "multiply", [x, _const_f32(cx, f"{out}_scale", scale)])


def _centered(cx, name: str, zp_name: str, rank: int, axis: int, hint: str, what: str) -> str:
    """``name`` (quantized values) minus its zero point, as float32; folded when ``name`` is a constant."""
    zero, _ = _zero_point(cx, [zp_name], 0, rank, axis, what) if zp_name else (np.zeros((), np.float32), "")
    if cx.is_const(name):
        return _const_f32(cx, hint, cx.consts[name].astype(np.float32) - zero)
    x = _as_float(cx, name)
    if np.any(zero):
        x = cx.op("subtract", [x, _const_f32(cx, f"{hint}_zp", zero)], f"{hint}_centered")
    return x


def _requantize(cx, node, acc: str, scale: np.ndarray, y_zp_name: str) -> str:
    """round(acc * scale) + y_zero_point, clipped to the output type: onnxruntime's requantization."""
    out = cx.out_name(node)
    zero, qtype = _zero_point(cx, [y_zp_name], 0, 4, 1, "y_zero_point")
    qmin, qmax = _RANGES[qtype]
    scaled = cx.op("multiply", [acc, _const_f32(cx, f"{out}_rescale", scale)], f"{out}_rescaled")
    rounded = cx.op("round", [scaled], f"{out}_round")
    shifted = cx.op("add", [rounded, _const_f32(cx, f"{out}_yzp", zero)], f"{out}_shifted")
    return cx.emit(node, "clip", [shifted], a_min=float(qmin), a_max=float(qmax))


def _scalar_scale(cx, name: str, what: str) -> np.float32:
    value = _require_const(cx, name, what)
    if value.size != 1:
        raise GraphError(f"{what} must be a scalar, got shape {value.shape}")
    return np.float32(value.reshape(()))


@_rule("QLinearConv")
def _qlinear_conv(cx, node, ins, attrs):
    """x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp[, bias (int32, scale x_scale * w_scale)]."""
    out = cx.out_name(node)
    args = _conv_args(cx, ins[0], ins[3], attrs)
    x = _centered(cx, ins[0], ins[2], 4, 1, f"{out}_x", "x_zero_point")
    w = _centered(cx, ins[3], ins[5], 4, 0, f"{out}_w", "w_zero_point")
    acc = cx.op("nn.conv2d", [x, w], f"{out}_acc", **args)
    if _opt(ins, 8):
        bias = _require_const(cx, ins[8], "QLinearConv's bias").astype(np.float32).reshape(-1)
        acc = cx.op("nn.bias_add", [acc, _const_f32(cx, f"{out}_bias", bias)], f"{out}_biased", axis=1)
    x_scale, y_scale = _scalar_scale(cx, ins[1], "x_scale"), _scalar_scale(cx, ins[6], "y_scale")
    w_scale = _require_const(cx, ins[4], "w_scale").astype(np.float32).reshape(-1)
    scale = (x_scale * w_scale / y_scale).astype(np.float32)   # onnxruntime's order: (x * w) / y, in float32
    return _requantize(cx, node, acc, scale.reshape(-1, 1, 1) if scale.size > 1 else scale.reshape(()), ins[7])


@_rule("ConvInteger")
def _conv_integer(cx, node, ins, attrs):
    """(x - x_zp) conv (w - w_zp): the int32 accumulator, as float32 integers."""
    out = cx.out_name(node)
    args = _conv_args(cx, ins[0], ins[1], attrs)
    x = _centered(cx, ins[0], _opt(ins, 2), 4, 1, f"{out}_x", "x_zero_point")
    w = _centered(cx, ins[1], _opt(ins, 3), 4, 0, f"{out}_w", "w_zero_point")
    return cx.emit(node, "nn.conv2d", [x, w], **args)


def _matmul_float(cx, node, a: str, b: str, hint: str, last: bool) -> str:
    """a @ b in float32: a dense layer when b is a 2-D constant, else a batch matmul."""
    b_node = cx.b.graph[b]
    if b_node.op == "const" and len(b_node.shape) == 2:
        w = cx.const(f"{hint}_wT", np.ascontiguousarray(cx.b.params[b].T))
        shape = cx.b.graph[a].shape
        if len(shape) == 2:
            return cx.emit(node, "nn.dense", [a, w]) if last else cx.op("nn.dense", [a, w], f"{hint}_dense")
        flat = cx.op("reshape", [a], f"{hint}_flat", newshape=(-1, shape[-1]))
        y = cx.op("nn.dense", [flat, w], f"{hint}_dense")
        target = (*shape[:-1], b_node.shape[1])
        return cx.emit(node, "reshape", [y], newshape=target) if last else \
            cx.op("reshape", [y], f"{hint}_acc", newshape=target)
    return cx.emit(node, "nn.batch_matmul", [a, b]) if last else cx.op("nn.batch_matmul", [a, b], f"{hint}_acc")


@_rule("MatMulInteger")
def _matmul_integer(cx, node, ins, attrs):
    out = cx.out_name(node)
    rank_b = len(cx.type_of(ins[1]).shape)
    a = _centered(cx, ins[0], _opt(ins, 2), len(cx.type_of(ins[0]).shape), -2, f"{out}_a", "a_zero_point")
    b = _centered(cx, ins[1], _opt(ins, 3), rank_b, -1, f"{out}_b", "b_zero_point")
    return _matmul_float(cx, node, a, b, out, last=True)


@_rule("QLinearMatMul")
def _qlinear_matmul(cx, node, ins, attrs):
    """a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp."""
    out = cx.out_name(node)
    rank_b = len(cx.type_of(ins[3]).shape)
    a = _centered(cx, ins[0], ins[2], len(cx.type_of(ins[0]).shape), -2, f"{out}_a", "a_zero_point")
    b = _centered(cx, ins[3], ins[5], rank_b, -1, f"{out}_b", "b_zero_point")
    acc = _matmul_float(cx, node, a, b, out, last=False)
    a_scale, y_scale = _scalar_scale(cx, ins[1], "a_scale"), _scalar_scale(cx, ins[6], "y_scale")
    b_scale = _require_const(cx, ins[4], "b_scale").astype(np.float32).reshape(-1)
    scale = (a_scale * b_scale / y_scale).astype(np.float32)
    return _requantize(cx, node, acc, scale if scale.size > 1 else scale.reshape(()), ins[7])
