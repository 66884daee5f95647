"""The ONNX frontend against onnxruntime: every supported op, small CNNs, shape overrides and the errors.

Models are built here with onnx.helper; onnxruntime is the independent reference, ``run_reference`` on
``from_onnx``'s graph is what is checked.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
from extras import need

from graph_pack import run_reference
from graph_pack.frontend_onnx import SUPPORTED_OPS, from_onnx
from graph_pack.graph import GraphError, find_nodes

onnx = need("onnx")
ort = need("onnxruntime")
TensorProto, helper, numpy_helper = onnx.TensorProto, onnx.helper, onnx.numpy_helper

RTOL, ATOL = 1e-4, 1e-5


def rand(*shape: int, seed: int = 0, lo: float = -1.0, hi: float = 1.0) -> np.ndarray:
    return np.random.default_rng(seed + sum(shape)).uniform(lo, hi, shape).astype(np.float32)


def N(op: str, inputs: list[str], out: str = "y", name: str = "", **attrs) -> onnx.NodeProto:
    return helper.make_node(op, inputs, [out], name=name or out, **attrs)


def make_model(nodes, inputs: dict, inits: dict | None = None, outputs=("y",), opset: int = 17):
    """``inputs``: name -> shape (float32) or (shape, TensorProto type); shapes may hold dim_param strings.
    The outputs' types come from ONNX's (strict) shape inference, which also validates the model."""
    ins = []
    for name, spec in inputs.items():
        shape, elem = spec if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], tuple) \
            else (spec, TensorProto.FLOAT)
        ins.append(helper.make_tensor_value_info(name, elem, shape))
    outs = [helper.make_empty_tensor_value_info(o) for o in outputs]
    graph = helper.make_graph(nodes, "test", ins, outs,
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", opset)])
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    onnx.checker.check_model(model)
    return model


def compare(model, feeds: dict[str, np.ndarray], shape=None):
    """Run ``model`` in onnxruntime and through from_onnx + run_reference; the outputs must agree."""
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = sess.run(None, feeds)
    graph, params = from_onnx(model, shape)
    got = run_reference(graph, params, feeds)
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert g.shape == e.shape and g.dtype == e.dtype, (g.shape, g.dtype, e.shape, e.dtype)
        np.testing.assert_allclose(g, e, rtol=RTOL, atol=ATOL)
    return graph, params


def case(nodes, inputs: dict, inits: dict | None = None, opset: int = 17, outputs=("y",)):
    """A model plus random feeds for its float inputs."""
    model = make_model(nodes if isinstance(nodes, list) else [nodes], inputs, inits, outputs, opset)
    feeds = {k: rand(*v, seed=i) for i, (k, v) in enumerate(inputs.items())}
    return model, feeds


X = (2, 3, 7, 6)
W = rand(4, 3, 3, 3, seed=1)
B = rand(4, seed=2)


def case_with(nodes, inputs: dict, inits: dict | None, feeds: dict, opset: int = 17, outputs=("y",)):
    """A model plus the given feeds (for integer inputs, or values a case needs)."""
    model = make_model(nodes if isinstance(nodes, list) else [nodes], inputs, inits, outputs, opset)
    return model, feeds


I64 = TensorProto.INT64
SPLIT3 = ("y0", "y1", "y2")


def ints(*shape: int, hi: int = 10, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, hi, shape).astype(np.int64)


# the node patterns of today's exporters (graph_pack/onnx_patterns.py)
PATTERN_CASES = {
    "erf": lambda: case(N("Erf", ["x"]), {"x": X}),
    "sqrt_of_square": lambda: case([N("Mul", ["x", "x"], "sq"), N("Sqrt", ["sq"])], {"x": X}),
    "leaky_relu": lambda: case(N("LeakyRelu", ["x"], alpha=0.1), {"x": X}),
    "hardsigmoid_attrs": lambda: case([N("Mul", ["x", "k"], "s"), N("HardSigmoid", ["s"], alpha=0.3, beta=0.4)],
                                      {"x": X}, {"k": np.float32(4)}),
    "hardswish": lambda: case([N("Mul", ["x", "k"], "s"), N("HardSwish", ["s"])], {"x": X}, {"k": np.float32(6)}),
    "gelu_opset20": lambda: case([N("Mul", ["x", "k"], "s"), N("Gelu", ["s"])], {"x": X}, {"k": np.float32(3)},
                                 opset=20),
    "gelu_tanh_opset20": lambda: case([N("Mul", ["x", "k"], "s"), N("Gelu", ["s"], approximate="tanh")], {"x": X},
                                      {"k": np.float32(3)}, opset=20),
    "pow_square": lambda: case(N("Pow", ["x", "e"]), {"x": X}, {"e": np.float32(2)}),
    "pow_cube": lambda: case(N("Pow", ["x", "e"]), {"x": X}, {"e": np.float32(3)}),
    "attention_mask_equal_where": lambda: case_with(
        [N("Equal", ["m", "zero"], "masked"), N("Where", ["masked", "big", "x"])],
        {"x": (2, 3, 8), "m": ((2, 1, 8), I64)}, {"zero": np.int64(0), "big": np.float32(-1e4)},
        {"x": rand(2, 3, 8), "m": (ints(2, 1, 8, hi=2))}),
    "less_greater_where": lambda: case(
        [N("Less", ["x", "lo"], "l"), N("Where", ["l", "lo", "x"], "a"), N("Greater", ["a", "hi"], "g"),
         N("Where", ["g", "hi", "a"])], {"x": X}, {"lo": np.float32(-0.2), "hi": np.float32(0.3)}),
    "expand_cls_token": lambda: case(N("Expand", ["x", "s"]), {"x": (1, 1, 4)}, {"s": np.array([3, 1, 1], np.int64)}),
    "expand_broadcast_both": lambda: case(N("Expand", ["x", "s"]), {"x": (3, 1)}, {"s": np.array([2, 1, 4], np.int64)}),
    "gather_embedding": lambda: case_with(N("Gather", ["table", "ids"]), {"ids": ((2, 5), I64)},
                                          {"table": rand(10, 4)}, {"ids": ints(2, 5)}),
    "gather_token_scalar": lambda: case(N("Gather", ["x", "i"], axis=1), {"x": (2, 5, 4)}, {"i": np.int64(0)}),
    "gather_negative_step": lambda: case(N("Gather", ["x", "i"], axis=-1), {"x": (2, 5, 4)},
                                         {"i": np.array([-1, 1], np.int64)}),
    "gather_unordered": lambda: case(N("Gather", ["x", "i"], axis=1), {"x": (2, 5, 4)},
                                     {"i": np.array([[4, 0], [2, 2]], np.int64)}),
    "gather_activation_indices_negative": lambda: case_with(
        N("Gather", ["x", "i"]), {"x": (5, 3), "i": ((4,), I64)}, None,
        {"x": rand(5, 3), "i": np.array([-1, 0, 4, -5], np.int64)}),
    "split_attr_opset11": lambda: case(helper.make_node("Split", ["x"], ["y0", "y1"], axis=1, split=[1, 2]),
                                       {"x": X}, opset=11, outputs=("y0", "y1")),
    "split_input_opset13": lambda: case(helper.make_node("Split", ["x", "s"], list(SPLIT3), axis=-1),
                                        {"x": X}, {"s": np.array([1, 3, 2], np.int64)}, outputs=SPLIT3),
    "split_even_opset18": lambda: case(helper.make_node("Split", ["x"], list(SPLIT3), axis=2, num_outputs=3),
                                       {"x": X}, opset=18, outputs=SPLIT3),
    "split_chunk_then_concat": lambda: case(
        [helper.make_node("Split", ["x"], ["a", "b"], axis=1, num_outputs=2), N("Relu", ["b"], "r"),
         N("Concat", ["r", "a"], axis=1)], {"x": (1, 4, 3, 3)}, opset=18),
    "slice_steps_negative": lambda: case(N("Slice", ["x", "b", "e", "a", "st"]), {"x": X},
                                         {"b": np.array([-1, 1], np.int64), "e": np.array([-100, 6], np.int64),
                                          "a": np.array([2, 3], np.int64), "st": np.array([-2, 2], np.int64)}),
    "slice_to_int64_max": lambda: case(N("Slice", ["x", "b", "e"]), {"x": (4, 5)},
                                       {"b": np.array([1, 2], np.int64),
                                        "e": np.array([np.iinfo(np.int64).max, 4], np.int64)}),
    "shape_arithmetic_reshape": lambda: case(  # x.view(x.size(0), -1, 2): Shape, Gather, Unsqueeze, Concat
        [N("Shape", ["x"], "sh"), N("Gather", ["sh", "zero"], "n"), N("Unsqueeze", ["n", "ax"], "n1"),
         N("Concat", ["n1", "tail"], "target", axis=0), N("Reshape", ["x", "target"])], {"x": X},
        {"zero": np.int64(0), "ax": np.array([0], np.int64), "tail": np.array([-1, 2], np.int64)}),
    "shape_start_end_div": lambda: case(  # channels // 3 from Shape(start=1, end=2), integer Div folded
        [N("Shape", ["x"], "sh", start=1, end=2), N("Div", ["sh", "three"], "g"),
         N("Concat", ["lead", "g", "rest"], "target", axis=0), N("Reshape", ["x", "target"])], {"x": (2, 6, 4)},
        {"three": np.array([3], np.int64), "lead": np.array([2, 3], np.int64), "rest": np.array([4], np.int64)}),
    "constant_of_shape_range_size": lambda: case(  # zeros_like and arange(n) from shapes, all folded
        [N("Shape", ["x"], "sh"), N("ConstantOfShape", ["sh"], "zeros", value=numpy_helper.from_array(
            np.array([0.5], np.float32))), N("Size", ["x"], "size"), N("Cast", ["size"], "sizef", to=TensorProto.FLOAT),
         N("Range", ["start", "last", "one"], "r"), N("Cast", ["r"], "rf", to=TensorProto.FLOAT),
         N("Add", ["x", "zeros"], "a"), N("Add", ["a", "rf"], "b"), N("Div", ["b", "sizef"])], {"x": (2, 3, 4)},
        {"start": np.int64(1), "last": np.int64(5), "one": np.int64(1)}),
    "layernorm_last_axis": lambda: case(N("LayerNormalization", ["x", "g", "b"], epsilon=1e-6), {"x": (2, 5, 8)},
                                        {"g": rand(8, lo=0.5, hi=1.5), "b": rand(8)}),
    "layernorm_two_axes_no_bias": lambda: case(N("LayerNormalization", ["x", "g"], axis=-2), {"x": (2, 5, 8)},
                                               {"g": rand(5, 8, lo=0.5, hi=1.5)}),
    "layernorm_decomposed": lambda: case(  # BERT's: mean, x - mean, ** 2, mean, + eps, sqrt, divide
        [N("ReduceMean", ["x"], "u", axes=[-1]), N("Sub", ["x", "u"], "d"), N("Pow", ["d", "two"], "d2"),
         N("ReduceMean", ["d2"], "v", axes=[-1]), N("Add", ["v", "eps"], "ve"), N("Sqrt", ["ve"], "sd"),
         N("Div", ["d", "sd"], "n"), N("Mul", ["n", "g"], "ng"), N("Add", ["ng", "b"])], {"x": (2, 5, 8)},
        {"two": np.float32(2), "eps": np.float32(1e-12), "g": rand(8), "b": rand(8)}),
    "reduce_mean_channels_no_keepdims_opset18": lambda: case(N("ReduceMean", ["x", "a"], keepdims=0), {"x": X},
                                                             {"a": np.array([1], np.int64)}, opset=18),
    "matmul_two_activations_attention": lambda: case(N("MatMul", ["q", "k"]), {"q": (2, 3, 4, 5), "k": (2, 3, 5, 4)}),
    "matmul_broadcast_batch": lambda: case(N("MatMul", ["a", "b"]), {"a": (2, 1, 4, 5), "b": (3, 5, 6)}),
    "matmul_batched_constant": lambda: case(N("MatMul", ["a", "w"]), {"a": (2, 4, 5)}, {"w": rand(2, 5, 3)}),
    "resize_linear_half_pixel_sizes": lambda: case(
        N("Resize", ["x", "", "", "sz"], mode="linear"), {"x": X}, {"sz": np.array([2, 3, 16, 11], np.int64)}),
    "resize_linear_pytorch_half_pixel_x2": lambda: case(
        N("Resize", ["x", "", "s"], mode="linear", coordinate_transformation_mode="pytorch_half_pixel"), {"x": X},
        {"s": np.array([1, 1, 2, 2], np.float32)}),
    "resize_linear_align_corners": lambda: case(
        N("Resize", ["x", "", "s"], mode="linear", coordinate_transformation_mode="align_corners"), {"x": X},
        {"s": np.array([1, 1, 2.5, 1.5], np.float32)}),
    "resize_linear_asymmetric_down": lambda: case(
        N("Resize", ["x", "", "s"], mode="linear", coordinate_transformation_mode="asymmetric"), {"x": X},
        {"s": np.array([1, 1, 0.5, 0.5], np.float32)}),
    "mod_div_scalar_shape_arithmetic": lambda: case(  # x.view(2, n // 2 % 4 - fmod(-5, 4), -1), scalars folded
        [N("Shape", ["x"], "sh"), N("Gather", ["sh", "two"], "n"), N("Div", ["n", "two"], "half"),
         N("Mod", ["half", "four"], "r"),
         N("Mod", ["neg", "four"], "rc", fmod=1), N("Sub", ["r", "rc"], "m"), N("Unsqueeze", ["m", "ax"], "m1"),
         N("Concat", ["lead", "m1", "rest"], "target", axis=0), N("Reshape", ["x", "target"])], {"x": (2, 3, 10)},
        {"two": np.int64(2), "four": np.int64(4), "neg": np.int64(-5), "ax": np.array([0], np.int64),
         "lead": np.array([2], np.int64), "rest": np.array([-1], np.int64)}),
    "attention_opset23_causal": lambda: case(N("Attention", ["q", "k", "v"], is_causal=1),
                                             {"q": (1, 2, 5, 8), "k": (1, 2, 5, 8), "v": (1, 2, 5, 4)}, opset=23),
    "attention_opset23_3d_bool_mask_gqa": lambda: case_with(
        N("Attention", ["q", "k", "v", "m"], q_num_heads=4, kv_num_heads=2, scale=0.3),
        {"q": (2, 5, 16), "k": (2, 6, 8), "v": (2, 6, 8), "m": ((5, 6), TensorProto.BOOL)}, None,
        {"q": rand(2, 5, 16), "k": rand(2, 6, 8, seed=1), "v": rand(2, 6, 8, seed=2),
         "m": np.random.default_rng(0).random((5, 6)) < 0.7}, opset=23),
    "attention_opset23_float_mask": lambda: case(N("Attention", ["q", "k", "v", "m"]),
                                                 {"q": (1, 2, 3, 4), "k": (1, 2, 6, 4), "v": (1, 2, 6, 4),
                                                  "m": (1, 1, 3, 6)}, opset=23),
    "upsample_linear_opset9": lambda: case(N("Upsample", ["x", "s"], mode="linear"), {"x": X},
                                           {"s": np.array([1, 1, 2, 2], np.float32)}, opset=9),
}


def _qdq_weight(shape, seed: int, per_channel: bool) -> dict:
    rng = np.random.default_rng(seed)
    scale = rng.uniform(0.002, 0.01, shape[0] if per_channel else ()).astype(np.float32)
    return {"w_q": rng.integers(-127, 128, shape).astype(np.int8), "w_s": scale,
            "w_zp": np.zeros(scale.shape, np.int8)}


def _uint8(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, shape).astype(np.uint8)


U8 = TensorProto.UINT8
QX = (1, 3, 7, 6)

# ONNX's quantized forms, imported as their float equivalents (graph_pack/onnx_quantized.py)
QUANTIZED_CASES = {
    "qdq_activation_uint8": lambda: case(
        [N("QuantizeLinear", ["x", "s", "zp"], "q"), N("DequantizeLinear", ["q", "s", "zp"])], {"x": X},
        {"s": np.float32(0.013), "zp": np.uint8(120)}),
    "qdq_activation_int8_saturates": lambda: case(
        [N("Mul", ["x", "k"], "big"), N("QuantizeLinear", ["big", "s", "zp"], "q"),
         N("DequantizeLinear", ["q", "s", "zp"])], {"x": X}, {"k": np.float32(3), "s": np.float32(0.01),
                                                              "zp": np.int8(-3)}),
    "qdq_conv_per_channel_weights": lambda: case(
        [N("QuantizeLinear", ["x", "xs", "xzp"], "xq"), N("DequantizeLinear", ["xq", "xs", "xzp"], "xd"),
         N("DequantizeLinear", ["w_q", "w_s", "w_zp"], "wd", axis=0), N("Conv", ["xd", "wd"], "c", pads=[1, 1, 1, 1]),
         N("QuantizeLinear", ["c", "ys", "yzp"], "yq"), N("DequantizeLinear", ["yq", "ys", "yzp"])], {"x": QX},
        {"xs": np.float32(0.008), "xzp": np.uint8(128), **_qdq_weight((4, 3, 3, 3), 1, True),
         "ys": np.float32(0.02), "yzp": np.uint8(100)}),
    "quantize_ties_to_even": lambda: case_with(  # x / scale lands on k + 0.5: ONNX rounds half to even
        N("QuantizeLinear", ["x", "s", "zp"]), {"x": (2, 8)}, {"s": np.float32(0.5), "zp": np.int8(0)},
        {"x": (np.arange(16, dtype=np.float32).reshape(2, 8) - 8) * 0.5 + 0.25}),
    "quantize_output_uint8": lambda: case(N("QuantizeLinear", ["x", "s", "zp"]), {"x": X},
                                          {"s": np.float32(0.01), "zp": np.uint8(128)}),
    "qlinearconv_per_tensor_bias": lambda: case_with(
        N("QLinearConv", ["x", "xs", "xzp", "w", "ws", "wzp", "ys", "yzp", "b"], pads=[1, 1, 1, 1], strides=[2, 1]),
        {"x": (QX, U8)}, {"xs": np.float32(0.02), "xzp": np.uint8(128), "w": _uint8(4, 3, 3, 3, seed=1),
                          "ws": np.float32(0.004), "wzp": np.uint8(127), "ys": np.float32(0.35), "yzp": np.uint8(90),
                          "b": np.arange(-2, 2, dtype=np.int32) * 50}, {"x": _uint8(*QX)}),
    "qlinearconv_per_channel_int8_depthwise": lambda: case_with(
        N("QLinearConv", ["x", "xs", "xzp", "w", "ws", "wzp", "ys", "yzp"], group=3, pads=[1, 1, 1, 1]),
        {"x": (QX, U8)}, {"xs": np.float32(0.02), "xzp": np.uint8(128),
                          "w": np.random.default_rng(3).integers(-127, 128, (3, 1, 3, 3)).astype(np.int8),
                          "ws": np.array([0.003, 0.004, 0.005], np.float32), "wzp": np.zeros(3, np.int8),
                          "ys": np.float32(0.05), "yzp": np.uint8(128)}, {"x": _uint8(*QX)}),
    "convinteger": lambda: case_with(
        N("ConvInteger", ["x", "w", "xzp", "wzp"]), {"x": (QX, U8)},
        {"w": _uint8(2, 3, 3, 3, seed=4), "xzp": np.uint8(128), "wzp": np.uint8(128)}, {"x": _uint8(*QX)}),
    "matmulinteger_dynamic_pattern": lambda: case_with(  # onnxruntime's dynamic quantization: Cast and Mul after
        [N("MatMulInteger", ["a", "b", "azp", "bzp"], "acc"), N("Cast", ["acc"], "accf", to=TensorProto.FLOAT),
         N("Mul", ["accf", "s"])], {"a": ((2, 3, 5), U8)},
        {"b": np.random.default_rng(5).integers(-127, 128, (5, 4)).astype(np.int8), "azp": np.uint8(128),
         "bzp": np.int8(0), "s": np.float32(1e-3)}, {"a": _uint8(2, 3, 5)}),
    "qlinearmatmul": lambda: case_with(
        N("QLinearMatMul", ["a", "as", "azp", "b", "bs", "bzp", "ys", "yzp"]), {"a": ((3, 5), U8)},
        {"as": np.float32(0.02), "azp": np.uint8(128), "b": _uint8(5, 4, seed=6), "bs": np.float32(0.01),
         "bzp": np.uint8(128), "ys": np.float32(0.3), "yzp": np.uint8(128)}, {"a": _uint8(3, 5)}),
}

CASES = {
    # convolution
    "conv_bias": lambda: case(N("Conv", ["x", "w", "b"], pads=[1, 1, 1, 1]), {"x": X}, {"w": W, "b": B}),
    "conv_nobias": lambda: case(N("Conv", ["x", "w"]), {"x": X}, {"w": W}),
    "conv_stride_asym_pads_dilation": lambda: case(
        N("Conv", ["x", "w", "b"], strides=[2, 1], pads=[0, 2, 1, 0], dilations=[1, 2]), {"x": (1, 3, 9, 8)},
        {"w": W, "b": B}),
    "conv_group2": lambda: case(N("Conv", ["x", "w"], group=2, pads=[1, 1, 1, 1]), {"x": (1, 4, 6, 6)},
                                {"w": rand(6, 2, 3, 3)}),
    "conv_depthwise": lambda: case(N("Conv", ["x", "w", "b"], group=4, strides=[2, 2], pads=[1, 1, 1, 1]),
                                   {"x": (1, 4, 7, 7)}, {"w": rand(4, 1, 3, 3), "b": B}),
    "conv_same_upper": lambda: case(N("Conv", ["x", "w"], auto_pad="SAME_UPPER", strides=[2, 2]),
                                    {"x": (1, 3, 8, 8)}, {"w": rand(4, 3, 4, 4)}),
    "conv_same_lower": lambda: case(N("Conv", ["x", "w"], auto_pad="SAME_LOWER", strides=[2, 2]),
                                    {"x": (1, 3, 8, 8)}, {"w": rand(4, 3, 4, 4)}),
    "conv_valid": lambda: case(N("Conv", ["x", "w"], auto_pad="VALID", strides=[2, 2]), {"x": X}, {"w": W}),
    "conv_weight_input": lambda: case(N("Conv", ["x", "w"], pads=[1, 1, 1, 1]), {"x": X, "w": (4, 3, 3, 3)}),
    # transposed convolution
    "convT_stride2": lambda: case(N("ConvTranspose", ["x", "w", "b"], strides=[2, 2], pads=[1, 1, 1, 1]),
                                  {"x": (1, 3, 4, 5)}, {"w": rand(3, 4, 3, 3), "b": B}),
    "convT_output_padding": lambda: case(
        N("ConvTranspose", ["x", "w"], strides=[2, 3], pads=[0, 1, 1, 0], output_padding=[1, 2]),
        {"x": (1, 3, 4, 5)}, {"w": rand(3, 2, 3, 4)}),
    "convT_output_shape": lambda: case(N("ConvTranspose", ["x", "w"], strides=[2, 2], output_shape=[8, 9]),
                                       {"x": (1, 3, 4, 5)}, {"w": rand(3, 2, 3, 3)}),
    "convT_same_upper": lambda: case(N("ConvTranspose", ["x", "w"], strides=[2, 2], auto_pad="SAME_UPPER"),
                                     {"x": (1, 3, 4, 5)}, {"w": rand(3, 2, 3, 3)}),
    "convT_same_lower": lambda: case(N("ConvTranspose", ["x", "w"], strides=[2, 2], auto_pad="SAME_LOWER"),
                                     {"x": (1, 3, 4, 5)}, {"w": rand(3, 2, 3, 3)}),
    # Gemm / MatMul
    "gemm_transB_bias": lambda: case(N("Gemm", ["x", "w", "c"], transB=1), {"x": (3, 5)},
                                     {"w": rand(4, 5), "c": rand(4)}),
    "gemm_noTransB_alpha_beta": lambda: case(N("Gemm", ["x", "w", "c"], alpha=0.5, beta=2.0), {"x": (3, 5)},
                                             {"w": rand(5, 4), "c": rand(1, 4)}),
    "gemm_full_c": lambda: case(N("Gemm", ["x", "w", "c"], transB=1, beta=-1.5), {"x": (3, 5)},
                                {"w": rand(4, 5), "c": rand(3, 4)}),
    "gemm_scalar_c": lambda: case(N("Gemm", ["x", "w", "c"]), {"x": (3, 5)},
                                  {"w": rand(5, 4), "c": np.float32(0.25)}),
    "gemm_no_c": lambda: case(N("Gemm", ["x", "w"], transB=1, alpha=3.0), {"x": (3, 5)}, {"w": rand(4, 5)}),
    "gemm_weight_input": lambda: case(N("Gemm", ["x", "w", "c"], alpha=2.0, beta=0.5),
                                      {"x": (3, 5), "w": (5, 4), "c": (3, 4)}),
    "matmul_2d": lambda: case(N("MatMul", ["x", "w"]), {"x": (3, 5)}, {"w": rand(5, 6)}),
    "matmul_3d_lhs": lambda: case(N("MatMul", ["x", "w"]), {"x": (2, 3, 5)}, {"w": rand(5, 6)}),
    # element-wise
    "add_channel_const": lambda: case(N("Add", ["x", "c"]), {"x": X}, {"c": rand(3, 1, 1)}),
    "add_two_inputs_broadcast": lambda: case(N("Add", ["x", "z"]), {"x": X, "z": (1, 1, 7, 1)}),
    "sub_scalar_lhs": lambda: case(N("Sub", ["c", "x"]), {"x": X}, {"c": np.float32(0.5)}),
    "mul_row": lambda: case(N("Mul", ["x", "z"]), {"x": X, "z": (6,)}),
    "div_const": lambda: case(N("Div", ["x", "c"]), {"x": X}, {"c": rand(3, 1, 1, lo=0.5, hi=2.0)}),
    "div_inputs": lambda: case(N("Div", ["z", "x"]), {"x": (2, 3), "z": (3,)}),
    "max": lambda: case(N("Max", ["x", "z"]), {"x": X, "z": (7, 1)}),
    "min": lambda: case(N("Min", ["x", "c"]), {"x": X}, {"c": np.float32(0.1)}),
    "relu": lambda: case(N("Relu", ["x"]), {"x": X}),
    "sigmoid": lambda: case(N("Sigmoid", ["x"]), {"x": X}),
    "tanh": lambda: case(N("Tanh", ["x"]), {"x": X}),
    "clip_inputs": lambda: case(N("Clip", ["x", "lo", "hi"]), {"x": X},
                                {"lo": np.float32(-0.3), "hi": np.float32(0.6)}),
    "clip_max_only": lambda: case(N("Clip", ["x", "", "hi"]), {"x": X}, {"hi": np.float32(0.2)}),
    "clip_no_bounds": lambda: case(N("Clip", ["x"]), {"x": X}),
    "clip_attrs_opset6": lambda: case(N("Clip", ["x"], min=-0.25, max=0.5), {"x": X}, opset=6),
    # pooling
    "maxpool_2x2": lambda: case(N("MaxPool", ["x"], kernel_shape=[2, 2], strides=[2, 2]), {"x": X}),
    "maxpool_3x3_pads": lambda: case(N("MaxPool", ["x"], kernel_shape=[3, 3], strides=[2, 2],
                                       pads=[1, 0, 1, 1]), {"x": X}),
    "maxpool_default_strides": lambda: case(N("MaxPool", ["x"], kernel_shape=[2, 3]), {"x": X}),
    "maxpool_ceil": lambda: case(N("MaxPool", ["x"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
                                 {"x": (1, 2, 8, 7)}),
    "maxpool_ceil_pads": lambda: case(N("MaxPool", ["x"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1,
                                        pads=[1, 1, 1, 1]), {"x": (1, 2, 6, 7)}),
    "maxpool_same_upper": lambda: case(N("MaxPool", ["x"], kernel_shape=[3, 3], strides=[2, 2],
                                         auto_pad="SAME_UPPER"), {"x": X}),
    "avgpool_exclude_pad": lambda: case(N("AveragePool", ["x"], kernel_shape=[3, 3], strides=[2, 2],
                                          pads=[1, 1, 1, 0]), {"x": X}),
    "avgpool_include_pad": lambda: case(N("AveragePool", ["x"], kernel_shape=[3, 3], strides=[2, 2],
                                          pads=[1, 1, 1, 0], count_include_pad=1), {"x": X}),
    "avgpool_ceil": lambda: case(N("AveragePool", ["x"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
                                 {"x": (1, 2, 8, 7)}),
    "avgpool_ceil_include_pad_inside": lambda: case(
        N("AveragePool", ["x"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1, count_include_pad=1,
          pads=[1, 1, 1, 1]), {"x": (1, 2, 7, 7)}),
    "avgpool_ceil_include_pad_overrun": lambda: case(  # the last window runs past the padding
        N("AveragePool", ["x"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1, count_include_pad=1,
          pads=[1, 0, 1, 1]), {"x": (1, 2, 6, 6)}),
    "avgpool_ceil_include_pad_no_pads": lambda: case(
        N("AveragePool", ["x"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1, count_include_pad=1),
        {"x": (1, 2, 6, 7)}),
    "global_avgpool": lambda: case(N("GlobalAveragePool", ["x"]), {"x": X}),
    # PyTorch's x.mean((2, 3)) / adaptive_avg_pool2d(x, 1): axes an attribute before opset 18, an input from 18
    "reduce_mean_hw_keepdims_opset17": lambda: case(N("ReduceMean", ["x"], axes=[2, 3]), {"x": X}),
    "reduce_mean_hw_negative_axes_flat": lambda: case(N("ReduceMean", ["x"], axes=[-1, -2], keepdims=0), {"x": X}),
    "reduce_mean_hw_axes_input_opset18": lambda: case(N("ReduceMean", ["x", "a"], keepdims=0), {"x": X},
                                                      {"a": np.array([2, 3], np.int64)}, opset=18),
    # shape ops
    "flatten_axis1": lambda: case(N("Flatten", ["x"]), {"x": X}),
    "flatten_axis2": lambda: case(N("Flatten", ["x"], axis=2), {"x": X}),
    "flatten_axis0": lambda: case(N("Flatten", ["x"], axis=0), {"x": X}),
    "flatten_axis_neg1": lambda: case(N("Flatten", ["x"], axis=-1), {"x": X}),
    "reshape_zero_minus1": lambda: case(N("Reshape", ["x", "s"]), {"x": X},
                                        {"s": np.array([0, -1, 6], np.int64)}),
    "softmax_last": lambda: case(N("Softmax", ["x"]), {"x": (3, 10)}),
    "softmax_axis1": lambda: case(N("Softmax", ["x"], axis=1), {"x": X}),
    "softmax_opset11_flattens": lambda: case(N("Softmax", ["x"], axis=1), {"x": X}, opset=11),
    "softmax_opset11_default_axis": lambda: case(N("Softmax", ["x"]), {"x": (2, 3, 4)}, opset=11),
    "concat": lambda: case(N("Concat", ["x", "z", "c"], axis=1), {"x": X, "z": (2, 2, 7, 6)},
                           {"c": rand(2, 1, 7, 6)}),
    "concat_neg_axis": lambda: case(N("Concat", ["x", "z"], axis=-1), {"x": X, "z": (2, 3, 7, 2)}),
    "pad_inputs": lambda: case(N("Pad", ["x", "p", "v"]), {"x": X},
                               {"p": np.array([0, 0, 1, 2, 0, 1, 3, 0], np.int64), "v": np.float32(0.75)}),
    "pad_default_value": lambda: case(N("Pad", ["x", "p"]), {"x": X},
                                      {"p": np.array([0, 0, 2, 0, 0, 0, 0, 1], np.int64)}),
    "pad_axes_opset18": lambda: case(N("Pad", ["x", "p", "", "a"]), {"x": X},
                                     {"p": np.array([1, 0, 2, 3], np.int64), "a": np.array([2, -1], np.int64)},
                                     opset=18),
    "pad_attrs_opset2": lambda: case(N("Pad", ["x"], pads=[0, 0, 1, 1, 0, 0, 2, 0], value=-1.0), {"x": X},
                                     opset=2),
    "batchnorm_on_input": lambda: case(N("BatchNormalization", ["x", "g", "be", "m", "v"], epsilon=1e-3),
                                       {"x": X}, {"g": rand(3), "be": rand(3), "m": rand(3),
                                                  "v": rand(3, lo=0.5, hi=2.0)}),
    "batchnorm_2d": lambda: case(N("BatchNormalization", ["x", "g", "be", "m", "v"]), {"x": (4, 3)},
                                 {"g": rand(3), "be": rand(3), "m": rand(3), "v": rand(3, lo=0.5, hi=2.0)}),
    "dropout_identity": lambda: case([N("Relu", ["x"], "r"), N("Dropout", ["r"], "d"), N("Identity", ["d"], "i"),
                                      N("Add", ["i", "x"])], {"x": X}),
    "identity_is_output": lambda: case(N("Identity", ["x"]), {"x": X}),
    "transpose_perm": lambda: case(N("Transpose", ["x"], perm=[0, 2, 3, 1]), {"x": X}),
    "transpose_default": lambda: case(N("Transpose", ["x"]), {"x": X}),
    "cast_to_int32": lambda: case(N("Cast", ["x"], to=TensorProto.INT32), {"x": (3, 4)}),
    "cast_roundtrip": lambda: case([N("Mul", ["x", "k"], "m"), N("Cast", ["m"], "c", to=TensorProto.INT32),
                                    N("Cast", ["c"], to=TensorProto.FLOAT)], {"x": X}, {"k": np.float32(10)}),
    "squeeze_unsqueeze": lambda: case([N("Unsqueeze", ["x", "a"], "u"), N("Squeeze", ["u", "a"])],
                                      {"x": (2, 3, 4)}, {"a": np.array([0, 3], np.int64)}),
    "squeeze_attrs_opset11": lambda: case([N("Squeeze", ["x"], "s", axes=[1]), N("Unsqueeze", ["s"], axes=[-1])],
                                          {"x": (2, 1, 4)}, opset=11),
    # upsampling
    "upsample_opset9": lambda: case(N("Upsample", ["x", "s"]), {"x": X},
                                    {"s": np.array([1, 1, 2, 3], np.float32)}, opset=9),
    "upsample_opset7_attr": lambda: case(N("Upsample", ["x"], scales=[1.0, 1.0, 2.0, 2.0]), {"x": X}, opset=7),
    "resize_asymmetric_floor": lambda: case(
        N("Resize", ["x", "", "s"], mode="nearest", coordinate_transformation_mode="asymmetric",
          nearest_mode="floor"), {"x": X}, {"s": np.array([1, 1, 3, 2], np.float32)}),
    "resize_default_half_pixel_sizes": lambda: case(
        N("Resize", ["x", "", "", "sz"], mode="nearest"), {"x": X},
        {"sz": np.array([2, 3, 21, 12], np.int64)}),
    "resize_half_pixel_ceil_x3": lambda: case(
        N("Resize", ["x", "", "s"], mode="nearest", nearest_mode="round_prefer_ceil"), {"x": X},
        {"s": np.array([1, 1, 3, 3], np.float32)}),
    "resize_pytorch_half_pixel_x3": lambda: case(
        N("Resize", ["x", "", "s"], mode="nearest", coordinate_transformation_mode="pytorch_half_pixel"),
        {"x": X}, {"s": np.array([1, 1, 3, 1], np.float32)}),
    "resize_tf_half_pixel_floor_x3": lambda: case(
        N("Resize", ["x", "", "s"], mode="nearest", coordinate_transformation_mode="tf_half_pixel_for_nn",
          nearest_mode="floor"), {"x": X}, {"s": np.array([1, 1, 3, 2], np.float32)}),
    "resize_align_corners_that_repeats": lambda: case(  # 4 -> 8 with align_corners happens to repeat pixels
        N("Resize", ["x", "", "s"], mode="nearest", coordinate_transformation_mode="align_corners"),
        {"x": (1, 2, 4, 4)}, {"s": np.array([1, 1, 2, 2], np.float32)}),
    "resize_opset10": lambda: case(N("Resize", ["x", "s"], mode="nearest"), {"x": X},
                                   {"s": np.array([1, 1, 2, 2], np.float32)}, opset=10),
    # constants
    "constant_operand": lambda: case([helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(
        rand(3, 1, 1))), N("Mul", ["x", "c"])], {"x": X}),
    "constant_shape_and_floats": lambda: case(
        [helper.make_node("Constant", [], ["s"], value_ints=[2, -1]),
         helper.make_node("Constant", [], ["k"], value_float=1.5),
         N("Reshape", ["x", "s"], "r"), N("Mul", ["r", "k"])], {"x": X}),
    "folded_transposed_weight": lambda: case([N("Transpose", ["w"], "wt"), N("MatMul", ["x", "wt"])],
                                             {"x": (3, 5)}, {"w": rand(6, 5)}),
    **PATTERN_CASES,
    **QUANTIZED_CASES,
}


@pytest.mark.parametrize("name", list(CASES))
def test_op_matches_onnxruntime(name: str) -> None:
    model, feeds = CASES[name]()
    compare(model, feeds)


def test_every_supported_op_has_a_case() -> None:
    covered = {n.op_type for name in CASES for n in CASES[name]()[0].graph.node}
    assert covered == set(SUPPORTED_OPS)


def test_the_networks_page_lists_every_supported_op() -> None:
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "networks.md").read_text()
    table = page.split("### ONNX: the supported ops")[1].split("###")[0]
    missing = [op for op in SUPPORTED_OPS if f"`{op}`" not in table]
    assert not missing, f"docs/networks.md's table of supported ONNX ops lacks {missing}"


# ---- small CNNs --------------------------------------------------------------------------------------------

def conv_bn(x: str, out: str, cin: int, cout: int, seed: int, k: int = 3, stride: int = 1, group: int = 1,
            relu: bool = True, bias: bool = False):
    """Conv (+ BatchNormalization + Relu) nodes and their initializers."""
    pad = k // 2
    inits = {f"{out}_w": rand(cout, cin // group, k, k, seed=seed) * (2.0 / (cin * k * k / group)) ** 0.5,
             f"{out}_g": rand(cout, seed=seed + 1, lo=0.5, hi=1.5), f"{out}_be": rand(cout, seed=seed + 2),
             f"{out}_m": rand(cout, seed=seed + 3, lo=-0.2, hi=0.2), f"{out}_v": rand(cout, seed=seed + 4, lo=0.5,
                                                                                    hi=1.5)}
    conv_in = [x, f"{out}_w"]
    if bias:
        inits[f"{out}_b"] = rand(cout, seed=seed + 5)
        conv_in.append(f"{out}_b")
    nodes = [N("Conv", conv_in, f"{out}_conv", strides=[stride, stride], pads=[pad] * 4, group=group),
             N("BatchNormalization", [f"{out}_conv", f"{out}_g", f"{out}_be", f"{out}_m", f"{out}_v"],
               f"{out}_bn" if relu else out)]
    if relu:
        nodes.append(N("Relu", [f"{out}_bn"], out))
    return nodes, inits


def test_cnn_conv_bn_relu_pool_gemm_softmax() -> None:
    n1, i1 = conv_bn("x", "c1", 3, 8, seed=10, bias=True)
    n2, i2 = conv_bn("p1", "c2", 8, 16, seed=20)
    nodes = [*n1, N("MaxPool", ["c1"], "p1", kernel_shape=[2, 2], strides=[2, 2]), *n2,
             N("GlobalAveragePool", ["c2"], "gap"), N("Flatten", ["gap"], "flat"),
             N("Gemm", ["flat", "fc_w", "fc_b"], "logits", transB=1), N("Softmax", ["logits"], "y", axis=1)]
    model = make_model(nodes, {"x": (2, 3, 8, 8)}, {**i1, **i2, "fc_w": rand(10, 16, seed=30),
                                                    "fc_b": rand(10, seed=31)})
    graph, _ = compare(model, {"x": rand(2, 3, 8, 8)})
    ops = [n.op for n in graph.ops()]
    assert "nn.batch_norm" not in ops and ops.count("nn.conv2d") == 2   # batch norms folded into the convs
    assert [n.op for n in find_nodes(graph, "c1_bn")] == ["nn.bias_add"]  # ONNX names select nodes
    assert find_nodes(graph, "logits")[0].op in ("nn.dense", "nn.bias_add")


def test_cnn_residual_block() -> None:
    n1, i1 = conv_bn("x", "a", 8, 8, seed=40)
    n2, i2 = conv_bn("a", "b", 8, 8, seed=50, relu=False)
    nodes = [*n1, *n2, N("Add", ["b", "x"], "sum"), N("Relu", ["sum"])]
    compare(make_model(nodes, {"x": (1, 8, 6, 6)}, {**i1, **i2}), {"x": rand(1, 8, 6, 6)})


def test_cnn_depthwise_separable() -> None:
    n1, i1 = conv_bn("x", "dw", 6, 6, seed=60, group=6, stride=2)
    n2, i2 = conv_bn("dw", "pw", 6, 12, seed=70, k=1)
    n3, i3 = conv_bn("pw", "y", 12, 12, seed=80, group=3)
    compare(make_model([*n1, *n2, *n3], {"x": (2, 6, 9, 9)}, {**i1, **i2, **i3}), {"x": rand(2, 6, 9, 9)})


def test_cnn_conv_transpose_decoder() -> None:
    n1, i1 = conv_bn("x", "enc", 3, 8, seed=90, stride=2)
    nodes = [*n1, N("ConvTranspose", ["enc", "up_w", "up_b"], "up", strides=[2, 2], pads=[1, 1, 1, 1],
                    output_padding=[1, 1]),
             N("BatchNormalization", ["up", "g", "be", "m", "v"], "up_bn"), N("Sigmoid", ["up_bn"])]
    inits = {**i1, "up_w": rand(8, 4, 3, 3, seed=91), "up_b": rand(4, seed=92), "g": rand(4, lo=0.5, hi=1.5),
             "be": rand(4, seed=93), "m": rand(4, seed=94), "v": rand(4, seed=95, lo=0.5, hi=1.5)}
    graph, _ = compare(make_model(nodes, {"x": (1, 3, 8, 8)}, inits), {"x": rand(1, 3, 8, 8)})
    assert "nn.batch_norm" not in [n.op for n in graph.ops()]


def test_cnn_inception_concat() -> None:
    n1, i1 = conv_bn("x", "b1", 4, 6, seed=100, k=1)
    n2, i2 = conv_bn("x", "b2", 4, 6, seed=110, k=3)
    nodes = [*n1, *n2, N("MaxPool", ["x"], "b3", kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]),
             N("Concat", ["b1", "b2", "b3"], "cat", axis=1), N("AveragePool", ["cat"], "y", kernel_shape=[2, 2],
                                                                strides=[2, 2])]
    compare(make_model(nodes, {"x": (1, 4, 6, 6)}, {**i1, **i2}), {"x": rand(1, 4, 6, 6)})


def test_cnn_asymmetric_pads_and_ceil_pooling() -> None:
    nodes = [N("Pad", ["x", "p"], "padded"),
             N("Conv", ["padded", "w", "b"], "c", strides=[2, 2], pads=[0, 1, 2, 0]), N("Relu", ["c"], "r"),
             N("MaxPool", ["r"], "mp", kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
             N("AveragePool", ["mp"], "y", kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)]
    inits = {"p": np.array([0, 0, 1, 0, 0, 0, 0, 2], np.int64), "w": rand(5, 3, 3, 3, seed=120),
             "b": rand(5, seed=121)}
    compare(make_model(nodes, {"x": (1, 3, 13, 11)}, inits), {"x": rand(1, 3, 13, 11)})


def test_several_outputs() -> None:
    nodes = [N("Conv", ["x", "w"], "c"), N("Relu", ["c"], "r"), N("Sigmoid", ["c"], "s")]
    model = make_model(nodes, {"x": X}, {"w": W}, outputs=("r", "s"))
    graph, _ = compare(model, {"x": rand(*X)})
    assert graph.outputs == ["r", "s"]


# ---- inputs, names and loading -----------------------------------------------------------------------------

def dynamic_model():
    nodes = [N("Conv", ["x", "w", "b"], "c", pads=[1, 1, 1, 1]), N("Relu", ["c"], "r"),
             N("GlobalAveragePool", ["r"], "g"), N("Flatten", ["g"], "y")]
    return make_model(nodes, {"x": ("batch", 3, 7, 6)}, {"w": W, "b": B})


def test_shape_override_for_dynamic_batch() -> None:
    graph, _ = compare(dynamic_model(), {"x": rand(5, 3, 7, 6)}, shape={"x": (5, 3, 7, 6)})
    assert graph["x"].shape == (5, 3, 7, 6) and graph[graph.outputs[0]].shape == (5, 4)


def test_dynamic_dim_without_override_is_an_error() -> None:
    with pytest.raises(GraphError, match=r"input 'x': dimension 0 is dynamic \(symbolic 'batch'\).*shape="):
        from_onnx(dynamic_model())


def test_shape_override_errors() -> None:
    with pytest.raises(GraphError, match="unknown input.*'data'.*model's inputs: \\['x'\\]"):
        from_onnx(dynamic_model(), shape={"data": (1, 3, 7, 6)})
    with pytest.raises(GraphError, match="rank 4.*rank 3"):
        from_onnx(dynamic_model(), shape={"x": (3, 7, 6)})


def test_initializers_are_params_not_inputs() -> None:
    model = make_model([N("Conv", ["x", "w", "b"])], {"x": X}, {"w": W, "b": B})
    model.graph.input.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, W.shape))  # old-style
    graph, params = compare(model, {"x": rand(*X)})
    assert graph.inputs == ["x"]
    np.testing.assert_array_equal(params["w"], W)
    np.testing.assert_array_equal(params["b"], B)


def test_loads_from_a_path(tmp_path) -> None:
    model, feeds = CASES["conv_bias"]()
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    expected = run_reference(*from_onnx(model), feeds)
    for p in (path, str(path)):
        np.testing.assert_array_equal(run_reference(*from_onnx(p), feeds), expected)


def test_unclean_names_are_sanitised() -> None:
    nodes = [N("Relu", ["in put"], "my out"), N("Sigmoid", ["my out"], "my_out"), N("Add", ["my out", "my_out"])]
    model = make_model(nodes, {"in put": (2, 3)})
    x = rand(2, 3)
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"in put": x})[0]
    graph, params = from_onnx(model)
    assert graph.inputs == ["in_put"]
    assert graph["my_out"].op == "sigmoid"   # a clean name keeps its owner; the sanitised one gets a suffix
    assert graph["my_out_1"].op == "nn.relu"
    np.testing.assert_allclose(run_reference(graph, params, {"in_put": x}), expected, rtol=RTOL, atol=ATOL)


def test_missing_onnx_package_says_how_to_install(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(ImportError, match=r"pip install 'vta-stack\[onnx\]'"):
        from_onnx("model.onnx")


# ---- errors ------------------------------------------------------------------------------------------------

def test_unsupported_ops_are_all_listed_with_their_nodes() -> None:
    nodes = [N("Relu", ["x"], "r"), N("Sin", ["r"], "l1", name="sin_a"),
             N("Cos", ["l1"], "e", name="cos_1"), N("Sin", ["e"], "y", name="sin_b")]
    with pytest.raises(GraphError) as err:
        from_onnx(make_model(nodes, {"x": X}))
    msg = str(err.value)
    assert "\n" not in msg
    assert "Sin (node(s): sin_a, sin_b)" in msg and "Cos (node(s): cos_1)" in msg
    assert "Supported ops: " in msg and "Conv" in msg.split("Supported ops: ")[1]
    assert "(node(s): " not in msg.replace("Sin (node(s): ", "").replace("Cos (node(s): ", "")


@pytest.mark.parametrize("node, inits, match", [
    (N("Resize", ["x", "", "s"], mode="cubic"), {"s": np.array([1, 1, 2, 2], np.float32)},
     r"'y'.*Resize.*mode='cubic' is not supported; allowed: 'nearest', 'linear'"),
    (N("Resize", ["x", "", "s"], mode="linear", coordinate_transformation_mode="tf_crop_and_resize"),
     {"s": np.array([1, 1, 2, 2], np.float32)}, r"'tf_crop_and_resize' is not supported with mode='linear'"),
    (N("Resize", ["x", "", "s"], mode="nearest", coordinate_transformation_mode="align_corners"),
     {"s": np.array([1, 1, 3, 3], np.float32)}, r"align_corners.*does not repeat each pixel"),
    (N("Resize", ["x", "", "s"], mode="nearest"), {"s": np.array([1, 1, 1.5, 2], np.float32)},
     r"scales .* not supported; allowed: \[1, 1, sh, sw\] with integer"),
    (N("Resize", ["x", "", "s"], mode="nearest", coordinate_transformation_mode="asymmetric"),
     {"s": np.array([1, 1, 3, 3], np.float32)}, "round_prefer_floor' does not repeat each pixel 3 times"),
    (N("Pad", ["x", "p"], mode="reflect"), {"p": np.zeros(8, np.int64)}, "mode='reflect'.*allowed: 'constant'"),
    (N("ConvTranspose", ["x", "w"], group=3), {"w": rand(3, 1, 3, 3)}, "group=3 is not supported"),
    (N("Gemm", ["f", "w"], transA=1), {"w": rand(3, 3)}, "transA=1"),
    (N("Gather", ["x", "i"], axis=1), {"i": np.array([1, 3], np.int64)},
     r"'y'.*Gather.*indices \[1, 3\] are out of range \[-3, 3\)"),
    (N("Gelu", ["x"], approximate="erf"), {}, r"approximate='erf' is not supported; allowed: 'none', 'tanh'"),
], ids=["resize_cubic", "resize_linear_crop", "resize_align_corners", "resize_fractional", "resize_asymmetric_round_x3",
        "pad_reflect", "convT_group", "gemm_transA", "gather_out_of_range", "gelu_approximate"])
def test_bad_attributes_name_the_node(node, inits, match) -> None:
    nodes = [node] if node.input[0] == "x" else [N("Flatten", ["x"], "f"), node]
    if node.op_type == "Gemm":
        nodes = [N("Reshape", ["x", "shp"], "f"), node]
        inits = {**inits, "shp": np.array([3, -1], np.int64)}
    opset = 20 if node.op_type == "Gelu" else 17
    with pytest.raises(GraphError, match=match):
        from_onnx(make_model(nodes, {"x": (1, 3, 4, 4)}, inits, opset=opset))


def test_non_constant_shape_inputs_are_errors() -> None:
    model = make_model([N("Reshape", ["x", "s"])], {"x": (2, 6), "s": ((2,), TensorProto.INT64)})
    with pytest.raises(GraphError, match=r"node 'y' \(Reshape\).*shape input must be a constant"):
        from_onnx(model)
    model = make_model([N("Expand", ["x", "s"])], {"x": (2, 6), "s": ((2,), TensorProto.INT64)})
    with pytest.raises(GraphError, match=r"node 'y' \(Expand\).*Expand's shape must be a constant"):
        from_onnx(model)


def test_used_second_output_is_an_error() -> None:
    node = helper.make_node("MaxPool", ["x"], ["p", "idx"], name="pool", kernel_shape=[2, 2])
    model = make_model([node, N("Cast", ["idx"], to=TensorProto.FLOAT)], {"x": X}, outputs=("p", "y"))
    with pytest.raises(GraphError, match=r"'pool' \(MaxPool\): only the first output.*'idx'"):
        from_onnx(model)
