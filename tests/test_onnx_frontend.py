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
}


@pytest.mark.parametrize("name", list(CASES))
def test_op_matches_onnxruntime(name: str) -> None:
    model, feeds = CASES[name]()
    compare(model, feeds)


def test_every_supported_op_has_a_case() -> None:
    covered = {n.op_type for name in CASES for n in CASES[name]()[0].graph.node}
    assert covered == set(SUPPORTED_OPS)


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
    nodes = [N("Relu", ["x"], "r"), N("LeakyRelu", ["r"], "l1", name="leaky_a"),
             N("Erf", ["l1"], "e", name="erf_1"), N("LeakyRelu", ["e"], "y", name="leaky_b")]
    with pytest.raises(GraphError) as err:
        from_onnx(make_model(nodes, {"x": X}))
    msg = str(err.value)
    assert "LeakyRelu (node(s): leaky_a, leaky_b)" in msg and "Erf (node(s): erf_1)" in msg
    assert "Supported ops: " in msg and "Conv" in msg.split("Supported ops: ")[1]
    assert "(node(s): " not in msg.replace("LeakyRelu (node(s): ", "").replace("Erf (node(s): ", "")


@pytest.mark.parametrize("node, inits, match", [
    (N("Resize", ["x", "", "s"], mode="linear"), {"s": np.array([1, 1, 2, 2], np.float32)},
     r"'y'.*Resize.*mode='linear' is not supported; allowed: 'nearest'"),
    (N("Resize", ["x", "", "s"], mode="nearest", coordinate_transformation_mode="align_corners"),
     {"s": np.array([1, 1, 3, 3], np.float32)}, r"align_corners.*does not repeat each pixel"),
    (N("Resize", ["x", "", "s"], mode="nearest"), {"s": np.array([1, 1, 1.5, 2], np.float32)},
     r"scales .* not supported; allowed: \[1, 1, sh, sw\] with integer"),
    (N("Resize", ["x", "", "s"], mode="nearest", coordinate_transformation_mode="asymmetric"),
     {"s": np.array([1, 1, 3, 3], np.float32)}, "round_prefer_floor' does not repeat each pixel 3 times"),
    (N("Pad", ["x", "p"], mode="reflect"), {"p": np.zeros(8, np.int64)}, "mode='reflect'.*allowed: 'constant'"),
    (N("ConvTranspose", ["x", "w"], group=3), {"w": rand(3, 1, 3, 3)}, "group=3 is not supported"),
    (N("Gemm", ["f", "w"], transA=1), {"w": rand(3, 3)}, "transA=1"),
    (N("ReduceMean", ["x"], axes=[1]), {}, r"ReduceMean over axes \[1\] .* allowed: axes \[2, 3\]"),
    (N("ReduceMean", ["x"]), {}, r"ReduceMean over axes \[0, 1, 2, 3\] .* allowed: axes \[2, 3\]"),
], ids=["resize_linear", "resize_align_corners", "resize_fractional", "resize_asymmetric_round_x3", "pad_reflect",
        "convT_group", "gemm_transA", "reduce_mean_channels", "reduce_mean_all"])
def test_bad_attributes_name_the_node(node, inits, match) -> None:
    nodes = [node] if node.input[0] == "x" else [N("Flatten", ["x"], "f"), node]
    if node.op_type == "Gemm":
        nodes = [N("Reshape", ["x", "shp"], "f"), node]
        inits = {**inits, "shp": np.array([3, -1], np.int64)}
    with pytest.raises(GraphError, match=match):
        from_onnx(make_model(nodes, {"x": (1, 3, 4, 4)}, inits))


def test_non_constant_shape_inputs_are_errors() -> None:
    model = make_model([N("Reshape", ["x", "s"])], {"x": (2, 6), "s": ((2,), TensorProto.INT64)})
    with pytest.raises(GraphError, match=r"node 'y' \(Reshape\).*shape input must be a constant"):
        from_onnx(model)
    model = make_model([N("MatMul", ["x", "z"])], {"x": (2, 6), "z": (6, 3)})
    with pytest.raises(GraphError, match="MatMul's right-hand side must be a constant"):
        from_onnx(model)


def test_used_second_output_is_an_error() -> None:
    node = helper.make_node("MaxPool", ["x"], ["p", "idx"], name="pool", kernel_shape=[2, 2])
    model = make_model([node, N("Cast", ["idx"], to=TensorProto.FLOAT)], {"x": X}, outputs=("p", "y"))
    with pytest.raises(GraphError, match=r"'pool' \(MaxPool\): only the first output.*'idx'"):
        from_onnx(model)
