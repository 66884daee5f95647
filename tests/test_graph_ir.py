"""The graph IR (graph_pack.graph / opdefs), the numpy reference kernels and the import-time passes.

Shapes are checked against values worked out by hand from each op's definition; kernels against numpy
formulas written here (im2col convolutions in float64 / int64, scatter-based transposed convolutions,
explicit pooling loops, Python-integer 32-bit wrap-around); passes by running the graph before and after.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graph_pack import GraphBuilder, GraphError, run_reference
from graph_pack.graph import Graph, find_nodes, prune, retype, topo_check
from graph_pack.opdefs import OPS, pool_out
from graph_pack.passes import BiasAddFromAdd, FoldBatchNorm, LowerBatchNorm, RemoveIdentities, simplify
from vta.numerics import pack_blocks, transposed_to_direct, unpack_blocks

SETTINGS = {"deadline": None, "derandomize": True, "suppress_health_check": [HealthCheck.too_slow]}
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def wrap32(v) -> np.ndarray:
    """Python-integer wrap to int32 (independent of the kernels' int64 arithmetic)."""
    return np.array([((int(x) + (1 << 31)) % (1 << 32)) - (1 << 31) for x in np.ravel(v)],
                    np.int64).reshape(np.shape(v)).astype(np.int32)


def one_op(op: str, inputs: list, **attrs):
    """A graph holding a single ``op`` on inputs given as (shape, dtype) or arrays (constants)."""
    b = GraphBuilder()
    names = []
    for i, v in enumerate(inputs):
        if isinstance(v, np.ndarray):
            names.append(b.const(f"c{i}", v))
        else:
            shape, dtype = v if isinstance(v, tuple) and isinstance(v[0], tuple) else (v, "float32")
            names.append(b.input(f"x{i}", shape, dtype))
    y = b.op(op, names, name="y", **attrs)
    return b.finish([y])


def run_node(op: str, arrays: list[np.ndarray], **attrs) -> tuple[np.ndarray, dict]:
    """Run one op through the IR (normalised attributes, shape inference) and the reference kernel; the
    output (checked against the inferred type) and the normalised attributes."""
    g, p = one_op(op, [(a.shape, a.dtype.name) for a in arrays], **attrs)
    out = run_reference(g, p, {f"x{i}": a for i, a in enumerate(arrays)})
    assert out.shape == g["y"].shape and out.dtype == np.dtype(g["y"].dtype)
    return out, g["y"].attrs


def run_op(op: str, arrays: list[np.ndarray], **attrs) -> np.ndarray:
    return run_node(op, arrays, **attrs)[0]


# ---- shape inference: every op of the table -----------------------------------------------------------------

F, I8, I32 = "float32", "int8", "int32"
Z = np.zeros

SHAPE_CASES = [
    # conv2d: oh = (H + pt + pb - d*(k-1) - 1) // s + 1 worked out by hand
    ("nn.conv2d", [(1, 3, 10, 9), Z((8, 3, 3, 3), F)], {"strides": (2, 1), "padding": (1, 2, 0, 1)}, (1, 8, 5, 10), F),
    ("nn.conv2d", [(2, 4, 9, 9), Z((6, 4, 3, 3), F)], {"padding": 2, "dilation": 2}, (2, 6, 9, 9), F),
    ("nn.conv2d", [(1, 4, 9, 11), Z((6, 4, 3, 2), F)], {"dilation": (3, 2), "strides": 2}, (1, 6, 2, 5), F),
    ("nn.conv2d", [(1, 4, 8, 8), Z((6, 2, 3, 3), F)], {"groups": 2, "padding": (1, 1)}, (1, 6, 8, 8), F),
    ("nn.conv2d", [(1, 4, 7, 7), Z((4, 1, 3, 3), F)], {"groups": 4, "strides": 2}, (1, 4, 3, 3), F),
    ("nn.conv2d", [((1, 3, 8, 8), I8), Z((4, 3, 1, 1), I8)], {"out_dtype": "int32"}, (1, 4, 8, 8), I32),
    ("nn.conv2d", [((1, 2, 8, 8, 1, 16), I8), Z((3, 2, 3, 3, 16, 16), I8)],
     {"padding": 1, "out_dtype": "int32", "data_layout": "NCHW1n16c", "kernel_layout": "OIHW16o16i"},
     (1, 3, 8, 8, 1, 16), I32),
    # conv2d_transpose: oh = (H - 1) * s - pt - pb + k + output_padding
    ("nn.conv2d_transpose", [(1, 4, 5, 6), Z((4, 3, 3, 3), F)], {"strides": 2, "padding": 1, "output_padding": 1},
     (1, 3, 10, 12), F),
    ("nn.conv2d_transpose", [(1, 2, 3, 4), Z((2, 5, 4, 4), F)], {"strides": (2, 3), "padding": (0, 1, 2, 0)},
     (1, 5, 6, 12), F),
    ("nn.dense", [(3, 10), Z((7, 10), F)], {}, (3, 7), F),
    ("nn.dense", [((2, 10), I8), Z((7, 10), I8)], {"out_dtype": "int32"}, (2, 7), I32),
    ("nn.dense", [((1, 1, 1, 16), I8), Z((2, 1, 16, 16), I8)],
     {"out_dtype": "int32", "data_layout": "NC1n16c", "kernel_layout": "OI16o16i"}, (1, 2, 1, 16), I32),
    # element-wise (numpy broadcasting)
    ("add", [(1, 4, 1, 3), (2, 1, 5, 1)], {}, (2, 4, 5, 3), F),
    ("subtract", [(2, 3), (3,)], {}, (2, 3), F),
    ("multiply", [((1, 4, 2, 2), I32), Z((4, 1, 1), I32)], {}, (1, 4, 2, 2), I32),
    ("divide", [(2, 3), (2, 3)], {}, (2, 3), F),
    ("maximum", [(2, 3), Z((), F)], {}, (2, 3), F),
    ("minimum", [(2, 3), (1, 3)], {}, (2, 3), F),
    ("right_shift", [((2, 3), I32), Z((), I32)], {}, (2, 3), I32),
    ("left_shift", [((2, 3), I32), Z((), I32)], {}, (2, 3), I32),
    ("nn.relu", [(2, 3)], {}, (2, 3), F),
    ("tanh", [(2, 3)], {}, (2, 3), F),
    ("sigmoid", [(2, 3)], {}, (2, 3), F),
    ("nn.dropout", [(2, 3)], {}, (2, 3), F),
    ("clip", [((2, 3), I32)], {"a_min": -1, "a_max": 1}, (2, 3), I32),
    ("cast", [((2, 3), I32)], {"dtype": "int8"}, (2, 3), I8),
    ("nn.bias_add", [(2, 5, 3, 3), Z((5,), F)], {}, (2, 5, 3, 3), F),
    ("nn.bias_add", [(2, 5, 3, 7), Z((7,), F)], {"axis": -1}, (2, 5, 3, 7), F),
    ("nn.batch_norm", [(2, 5, 3, 3)] + [Z((5,), F)] * 4, {}, (2, 5, 3, 3), F),
    ("qnn.quantize", [(2, 3)], {"scale": 0.5}, (2, 3), I8),
    ("qnn.dequantize", [((2, 3), I8)], {"scale": 0.5}, (2, 3), F),
    # pooling: ceil mode drops a last window that would start in the right padding
    ("nn.max_pool2d", [(1, 2, 8, 8)], {"pool_size": 3, "strides": 2}, (1, 2, 3, 3), F),
    ("nn.max_pool2d", [(1, 2, 8, 8)], {"pool_size": 3, "strides": 2, "ceil_mode": True}, (1, 2, 4, 4), F),
    ("nn.max_pool2d", [(1, 2, 4, 4)], {"pool_size": 2, "strides": 3, "padding": 1, "ceil_mode": True}, (1, 2, 2, 2), F),
    ("nn.max_pool2d", [(1, 2, 7, 5)], {"pool_size": (3, 2), "strides": (2, 1), "padding": (1, 0, 1, 1)},
     (1, 2, 4, 5), F),
    ("nn.avg_pool2d", [(1, 2, 6, 6)], {"pool_size": 2}, (1, 2, 3, 3), F),
    ("nn.avg_pool2d", [(1, 2, 5, 5)], {"pool_size": 2, "ceil_mode": True}, (1, 2, 3, 3), F),
    ("nn.global_avg_pool2d", [(2, 3, 5, 7)], {}, (2, 3, 1, 1), F),
    ("nn.batch_flatten", [(2, 3, 4, 5)], {}, (2, 60), F),
    ("reshape", [(2, 3, 4, 5)], {"newshape": (0, -1, 5)}, (2, 12, 5), F),
    ("reshape", [(2, 3, 4, 5)], {"newshape": (0, 0, -1)}, (2, 3, 20), F),
    ("reshape", [(2, 3, 4, 5)], {"newshape": (-1,)}, (120,), F),
    ("transpose", [(2, 3, 4, 5)], {"axes": (0, 2, 3, 1)}, (2, 4, 5, 3), F),
    ("nn.softmax", [(2, 3)], {}, (2, 3), F),
    ("concatenate", [(1, 2, 4, 4), (1, 3, 4, 4), (1, 1, 4, 4)], {}, (1, 6, 4, 4), F),
    ("concatenate", [(2, 3), (2, 5)], {"axis": -1}, (2, 8), F),
    ("nn.pad", [(1, 2, 3, 4)], {"pad_width": ((0, 0), (0, 0), (1, 2), (3, 0))}, (1, 2, 6, 7), F),
    ("nn.upsampling", [(1, 2, 3, 4)], {"scale_h": 2, "scale_w": 3}, (1, 2, 6, 12), F),
    # host ops of today's exported networks (transformers, segmentation, detection)
    ("erf", [(2, 3)], {}, (2, 3), F),
    ("sqrt", [(2, 3)], {}, (2, 3), F),
    ("round", [(2, 3)], {}, (2, 3), F),
    ("nn.leaky_relu", [(2, 3)], {"alpha": 0.1}, (2, 3), F),
    ("power", [(2, 3), Z((), F)], {}, (2, 3), F),
    ("equal", [((2, 1), I32), Z((3,), I32)], {}, (2, 3), "bool"),
    ("less", [(2, 3), Z((), F)], {}, (2, 3), "bool"),
    ("greater", [(1, 3), (2, 1)], {}, (2, 3), "bool"),
    ("where", [((2, 1, 4), "bool"), Z((), F), (3, 1)], {}, (2, 3, 4), F),
    ("mean", [(2, 3, 4)], {"axes": (-1,)}, (2, 3, 1), F),
    ("mean", [(2, 3, 4)], {"axes": (0, 2), "keepdims": False}, (3,), F),
    ("take", [Z((10, 4), F), ((2, 5), "int64")], {}, (2, 5, 4), F),
    ("take", [(2, 5, 4), Z((), "int64")], {"axis": 1}, (2, 4), F),
    ("strided_slice", [(4, 5, 6)], {"begin": (1, -1), "end": (100, -7), "axes": (0, 2), "strides": (2, -2)},
     (2, 5, 3), F),
    ("broadcast_to", [(3, 1)], {"shape": (2, 1, 4)}, (2, 3, 4), F),
    ("nn.batch_matmul", [(2, 1, 4, 5), (3, 5, 6)], {}, (2, 3, 4, 6), F),
    ("nn.layer_norm", [(2, 5, 8), Z((8,), F), Z((8,), F)], {"epsilon": 1e-6}, (2, 5, 8), F),
    ("nn.layer_norm", [(2, 5, 8)], {"axis": 1}, (2, 5, 8), F),
    ("image.resize2d", [(1, 2, 3, 4)], {"size": (7, 2), "scales": (7 / 3, 0.5)}, (1, 2, 7, 2), F),
    # layout transforms: N and C padded up to whole blocks
    ("layout_transform", [((2, 20, 5, 5), I8)], {"src_layout": "NCHW", "dst_layout": "NCHW4n16c"},
     (1, 2, 5, 5, 4, 16), I8),
    ("layout_transform", [((3, 20), I8)], {"src_layout": "NC", "dst_layout": "NC1n16c"}, (3, 2, 1, 16), I8),
    ("layout_transform", [Z((20, 3, 3, 3), I8)], {"src_layout": "OIHW", "dst_layout": "OIHW16o16i"},
     (2, 1, 3, 3, 16, 16), I8),
    ("layout_transform", [Z((3, 20, 3, 3), I8)], {"src_layout": "IOHW", "dst_layout": "OIHW16o16i"},
     (2, 1, 3, 3, 16, 16), I8),
    ("layout_transform", [Z((20, 40), I8)], {"src_layout": "OI", "dst_layout": "OI16o16i"}, (2, 3, 16, 16), I8),
    ("layout_transform", [((1, 2, 5, 5, 4, 16), I8)],
     {"src_layout": "NCHW4n16c", "dst_layout": "NCHW", "batch": 2, "channels": 20}, (2, 20, 5, 5), I8),
    ("layout_transform", [((3, 2, 1, 16), I8)],
     {"src_layout": "NC1n16c", "dst_layout": "NC", "batch": 3, "channels": 20}, (3, 20), I8),
]


@pytest.mark.parametrize("op, inputs, attrs, shape, dtype", SHAPE_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(SHAPE_CASES)])
def test_shape_inference(op, inputs, attrs, shape, dtype):
    g, _ = one_op(op, inputs, **attrs)
    assert g["y"].shape == shape
    assert g["y"].dtype == dtype


def test_shape_cases_cover_every_op():
    assert {c[0] for c in SHAPE_CASES} == set(OPS)


def test_attributes_are_normalised():
    g, _ = one_op("nn.conv2d", [(1, 3, 8, 8), Z((4, 3, 3, 3), F)], padding=(1, 2), strides=2)
    a = g["y"].attrs
    assert a["padding"] == (1, 2, 1, 2) and a["strides"] == (2, 2) and a["dilation"] == (1, 1)
    assert a["out_dtype"] == "float32" and a["groups"] == 1
    g, _ = one_op("nn.max_pool2d", [(1, 3, 8, 8)], pool_size=3)
    assert g["y"].attrs["strides"] == (3, 3)   # strides default to the pool size
    g, _ = one_op("clip", [(1, 3)], a_min=0, a_max=6)
    assert g["y"].attrs == {"a_min": 0.0, "a_max": 6.0}


@pytest.mark.parametrize("size, k, s, p0, p1", [(8, 3, 2, 0, 0), (7, 3, 2, 1, 1), (4, 2, 3, 1, 1), (5, 2, 2, 0, 0),
                                                (10, 3, 3, 1, 0), (6, 4, 4, 2, 2)])
def test_pool_out_matches_pytorch_rule(size, k, s, p0, p1):
    assert pool_out(size, k, s, p0, p1, False) == (size + p0 + p1 - k) // s + 1
    ceil = -(-(size + p0 + p1 - k) // s) + 1
    if (ceil - 1) * s >= size + p0:   # PyTorch: the last window must start inside the input or the left pad
        ceil -= 1
    assert pool_out(size, k, s, p0, p1, True) == ceil


# ---- errors ------------------------------------------------------------------------------------------------

ERROR_CASES = [
    ("nn.conv3d", [(1, 3, 4, 4)], {}, "unknown op"),
    ("nn.relu", [(1, 3)], {"alpha": 1}, "no attribute"),
    ("add", [(1, 3)], {}, "takes 2"),
    ("nn.conv2d", [(1, 3, 8, 8), Z((8, 4, 3, 3), F)], {}, "does not fit"),
    ("nn.conv2d", [(1, 4, 8, 8), Z((6, 2, 3, 3), F)], {"groups": 3}, "does not fit"),
    ("nn.conv2d", [(1, 3, 8, 8), Z((4, 3, 3, 3), F)], {"strides": 0}, "strides"),
    ("nn.conv2d", [(1, 3, 8, 8), Z((4, 3, 3, 3), F)], {"padding": -1}, "padding"),
    ("nn.conv2d", [(1, 3, 8, 8), Z((4, 3, 3, 3), F)], {"padding": (1, 1, 1)}, "1, 2 or 4 values"),
    ("nn.conv2d", [(1, 3, 2, 2), Z((4, 3, 5, 5), F)], {}, "empty"),
    ("nn.conv2d", [(1, 3, 8), Z((4, 3, 3, 3), F)], {}, "4-D"),
    ("nn.conv2d_transpose", [(1, 3, 8, 8), Z((4, 2, 3, 3), F)], {}, "does not fit"),
    ("nn.conv2d_transpose", [(1, 4, 8, 8), Z((4, 2, 3, 3), F)], {"groups": 2}, "groups"),
    ("nn.conv2d_transpose", [(1, 4, 5, 5), Z((4, 2, 3, 3), F)], {"dilation": 2}, "dilation"),
    ("nn.dense", [(2, 10), Z((7, 11), F)], {}, "agree on K"),
    ("nn.dense", [(2, 5, 2), Z((7, 10), F)], {}, "2-D"),
    ("add", [(1, 3), (1, 4)], {}, "broadcast"),
    ("add", [(1, 3), ((1, 3), I32)], {}, "insert a cast"),
    ("right_shift", [(1, 3), (1, 3)], {}, "integer operands"),
    ("nn.bias_add", [(1, 4, 2, 2), Z((3,), F)], {}, "bias"),
    ("nn.bias_add", [(1, 4, 2, 2), Z((4,), F)], {"axis": 5}, "axis"),
    ("nn.batch_norm", [(1, 4, 2, 2)] + [Z((3,), F)] * 4, {}, "gamma/beta/mean/var"),
    ("qnn.quantize", [(1, 3)], {"scale": 0.0}, "positive"),
    ("qnn.dequantize", [((1, 3), I8)], {"scale": -1.0}, "positive"),
    ("clip", [(1, 3)], {"a_min": 0}, "a_max"),
    ("cast", [(1, 3)], {}, "dtype"),
    ("reshape", [(2, 3)], {"newshape": (4, 2)}, "cannot reshape"),
    ("reshape", [(2, 3)], {"newshape": (-1, -1)}, "more than one -1"),
    ("transpose", [(2, 3, 4)], {"axes": (0, 0, 1)}, "permutation"),
    ("transpose", [(2, 3, 4)], {"axes": (1, 0)}, "permutation"),
    ("nn.softmax", [(2, 3)], {"axis": 2}, "axis"),
    ("concatenate", [(1, 2, 3), (1, 3, 4)], {}, "differ"),
    ("concatenate", [(1, 2), ((1, 2), I32)], {}, "dtypes differ"),
    ("concatenate", [(1, 2, 4, 4), (1, 2, 4, 4)], {"axis": 4}, "axis"),
    ("nn.pad", [(1, 2, 3)], {"pad_width": ((0, 0), (1, 1))}, "pad_width"),
    ("nn.pad", [(1, 2)], {"pad_width": ((0, 0), (-1, 0))}, "pad_width"),
    ("nn.upsampling", [(1, 2, 3, 3)], {"method": "bilinear"}, "not supported"),
    ("nn.upsampling", [(1, 2, 3, 3)], {"scale_h": 1.5}, "positive integers"),
    ("nn.max_pool2d", [(1, 2, 3, 3)], {"pool_size": 0}, "pool_size"),
    ("nn.avg_pool2d", [(1, 2, 3, 3)], {"strides": 0}, "strides"),
    ("nn.max_pool2d", [(1, 2, 3, 3)], {"pool_size": 5}, "empty"),
    ("nn.global_avg_pool2d", [(3, 4)], {}, "4-D"),
    ("layout_transform", [(1, 2, 3, 3)], {"src_layout": "NHWC", "dst_layout": "NCHW1n16c"}, "layout_transform"),
    ("layout_transform", [(1, 2, 3, 3)], {"src_layout": "NCHW1n16c", "dst_layout": "NCHW", "batch": 1,
                                          "channels": 2}, "6-D"),
    ("layout_transform", [(1, 1, 3, 3, 1, 16)], {"src_layout": "NCHW1n16c", "dst_layout": "NCHW"}, "batch"),
    ("layout_transform", [(1, 1, 3, 3, 1, 16)], {"src_layout": "NCHW1n16c", "dst_layout": "NCHW", "batch": 1,
                                                 "channels": 17}, "channels"),
]


@pytest.mark.parametrize("op, inputs, attrs, words", ERROR_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(ERROR_CASES)])
def test_bad_ops_raise_graph_error(op, inputs, attrs, words):
    with pytest.raises(GraphError) as e:
        one_op(op, inputs, **attrs)
    assert words in str(e.value)
    assert str(e.value).startswith("y: ")   # the message names the node


def test_unknown_op_lists_known_ops():
    with pytest.raises(GraphError, match="known ops: .*nn.conv2d"):
        one_op("nn.conv3d", [(1, 3, 4, 4)])


def test_builder_errors():
    b = GraphBuilder()
    x = b.input("x", (1, 3, 4, 4))
    with pytest.raises(GraphError, match="duplicate node name 'x'"):
        b.input("x", (1, 3))
    with pytest.raises(GraphError, match="duplicate node name 'x'"):
        b.const("x", np.zeros(3, np.float32))
    b.op("nn.relu", [x], name="r")
    with pytest.raises(GraphError, match="duplicate node name 'r'"):
        b.op("nn.relu", [x], name="r")
    with pytest.raises(GraphError, match=r"\['nope'\] are not nodes"):
        b.op("add", [x, "nope"])
    with pytest.raises(GraphError, match="positive"):
        b.input("z", (1, 0, 3))
    with pytest.raises(GraphError, match="no node named 'missing'"):
        b.finish(["missing"])
    g, _ = b.finish(["r"])
    with pytest.raises(GraphError, match="no node named"):
        g["zzz"]


def test_failed_op_leaves_the_graph_unchanged():
    b = GraphBuilder()
    x = b.input("x", (1, 3, 4, 4))
    with pytest.raises(GraphError):
        b.op("nn.conv2d", [x, b.const("w", np.zeros((4, 2, 3, 3), np.float32))], name="bad")
    assert "bad" not in b.graph.nodes
    assert b.op("nn.relu", [x], name="bad") == "bad"


# ---- graph utilities -----------------------------------------------------------------------------------------

def small_graph():
    r = rng(1)
    b = GraphBuilder()
    x = b.input("x", (1, 3, 6, 6))
    c = b.op("nn.conv2d", [x, b.const("w", r.normal(size=(4, 3, 3, 3)))], name="conv", padding=1)
    y = b.op("nn.relu", [c], name="relu")
    dead = b.op("nn.conv2d", [x, b.const("w_dead", r.normal(size=(2, 3, 1, 1)))], name="dead")
    b.op("nn.relu", [dead], name="dead_relu")
    z = b.op("add", [y, c], name="sum")
    return b.finish([z, y])


def test_printing_shows_ops_types_and_outputs():
    g, _ = small_graph()
    g["conv"].attrs["_hidden"] = 1
    text = str(g)
    assert "%x: input (1, 3, 6, 6) float32" in text
    assert "%w: const (4, 3, 3, 3) float32" in text
    assert "%conv = nn.conv2d(%x, %w, strides=(1, 1), padding=(1, 1, 1, 1)" in text
    assert "out_dtype='float32'" in text and ": (1, 4, 6, 6) float32" in text
    assert "%sum = add(%relu, %conv) : (1, 4, 6, 6) float32" in text
    assert text.splitlines()[-1] == "outputs: %sum, %relu"
    assert "_hidden" not in text


def test_graph_accessors():
    g, _p = small_graph()
    assert g.inputs == ["x"]
    assert [n.name for n in g.ops()] == ["conv", "relu", "dead", "dead_relu", "sum"]
    assert len(g) == 8 and [n.name for n in g][:2] == ["x", "w"]
    assert g["conv"].shape == (1, 4, 6, 6) and g["conv"].dtype == "float32"
    users = g.consumers()
    assert users["conv"] == ["relu", "sum"]
    assert users["relu"] == ["sum", "<output>"]
    assert users["sum"] == ["<output>"] and users["dead_relu"] == []
    topo_check(g)


def test_find_nodes():
    g, _ = small_graph()
    assert [n.name for n in find_nodes(g, "nn.conv2d")] == ["conv", "dead"]
    assert [n.name for n in find_nodes(g, "relu")] == ["relu"]           # a node name wins over an op name
    assert [n.name for n in find_nodes(g, "nn.relu")] == ["relu", "dead_relu"]
    assert [n.name for n in find_nodes(g, lambda n: n.shape[1] == 2)] == ["dead", "dead_relu"]
    assert find_nodes(g, "x") == [] and find_nodes(g, "w") == []        # inputs and constants are not ops
    assert find_nodes(g, "nn.dense") == []


def test_prune_drops_dead_nodes_and_params():
    g, p = small_graph()
    x = rng(2).normal(size=(1, 3, 6, 6)).astype(np.float32)
    before = run_reference(g, p, {"x": x})
    g2, p2 = prune(g, p)
    assert "dead" not in g2.nodes and "dead_relu" not in g2.nodes and "w_dead" not in g2.nodes
    assert set(p2) == {"w"} and "dead" in g.nodes                      # the original is untouched
    after = run_reference(g2, p2, {"x": x})
    for a, b in zip(before, after, strict=True):
        np.testing.assert_array_equal(a, b)


def test_copy_is_independent():
    g, _ = small_graph()
    g.meta["k"] = 1
    c = g.copy()
    c["sum"].inputs[0] = "conv"
    c["conv"].attrs["groups"] = 7
    c.outputs.append("conv")
    c.meta["k"] = 2
    assert g["sum"].inputs == ["relu", "conv"] and g["conv"].attrs["groups"] == 1
    assert g.outputs == ["sum", "relu"] and g.meta["k"] == 1
    assert str(c) != str(g)


def test_retype_and_topo_check():
    g, _ = small_graph()
    g["x"].type = type(g["x"].type)((2, 3, 10, 10), "float32")
    retype(g)
    assert g["conv"].shape == (2, 4, 10, 10) and g["sum"].shape == (2, 4, 10, 10)
    bad = Graph({k: g.nodes[k] for k in ["x", "relu", "w", "conv"]}, ["relu"])
    with pytest.raises(GraphError, match="reads 'conv' before it is defined"):
        topo_check(bad)
    with pytest.raises(GraphError, match="graph output 'nope'"):
        topo_check(Graph(dict(g.nodes), ["nope"]))


def test_run_reference_input_checks():
    g, p = small_graph()
    x = np.zeros((1, 3, 6, 6), np.float32)
    with pytest.raises(GraphError, match="missing input 'x'"):
        run_reference(g, p, {})
    with pytest.raises(GraphError, match="unknown input"):
        run_reference(g, p, {"x": x, "y": x})
    with pytest.raises(GraphError, match="expected shape"):
        run_reference(g, p, {"x": x[0]})
    with pytest.raises(GraphError, match="expected dtype"):
        run_reference(g, p, {"x": x.astype(np.int32)})
    with pytest.raises(GraphError, match="no value for constant 'w'"):
        run_reference(g, {}, {"x": x})
    out = run_reference(g, p, {"x": x.astype(np.float64)})   # floats are converted
    assert isinstance(out, tuple) and out[0].dtype == np.float32


# ---- kernels against independent numpy formulas ---------------------------------------------------------------

def im2col_conv(x, w, strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1, dtype=np.float64):
    """Direct convolution as an explicit im2col matrix product in float64 (or exact int64)."""
    n, _c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = strides, dilation, padding
    xp = np.pad(x.astype(dtype), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    og = o // groups
    out = np.zeros((n, o, oh, ow), dtype)
    for g in range(groups):
        cols = np.zeros((n, oh, ow, cg * kh * kw), dtype)
        for i in range(oh):
            for j in range(ow):
                patch = xp[:, g * cg:(g + 1) * cg, i * sh:i * sh + dh * (kh - 1) + 1:dh,
                           j * sw:j * sw + dw * (kw - 1) + 1:dw]
                cols[:, i, j] = patch.reshape(n, -1)
        wmat = w[g * og:(g + 1) * og].astype(dtype).reshape(og, -1)
        out[:, g * og:(g + 1) * og] = np.einsum("nijk,ok->noij", cols, wmat)
    return out


def scatter_conv_transpose(x, w, strides, padding, output_padding=(0, 0), dtype=np.float64):
    """Transposed convolution by scattering every input pixel times the IOHW kernel, then cropping."""
    n, _c, h, wd = x.shape
    _, o, kh, kw = w.shape
    (sh, sw), (pt, pl, pb, pr), (oph, opw) = strides, padding, output_padding
    full = np.zeros((n, o, (h - 1) * sh + kh + oph, (wd - 1) * sw + kw + opw), dtype)
    for i in range(h):
        for j in range(wd):
            full[:, :, i * sh:i * sh + kh, j * sw:j * sw + kw] += np.einsum(
                "nc,cokl->nokl", x[:, :, i, j].astype(dtype), w.astype(dtype))
    return full[:, :, pt:full.shape[2] - pb, pl:full.shape[3] - pr]


CONV_CASES = [
    ((1, 3, 7, 6), (4, 3, 3, 3), {}),
    ((2, 3, 9, 8), (5, 3, 3, 2), {"strides": (2, 1), "padding": (1, 0, 2, 1)}),
    ((1, 4, 9, 9), (6, 4, 3, 3), {"dilation": (2, 3), "padding": 2}),
    ((1, 4, 8, 7), (6, 2, 3, 3), {"groups": 2, "padding": 1, "strides": 2}),
    ((1, 6, 6, 6), (6, 1, 3, 3), {"groups": 6, "padding": (0, 1, 2, 1)}),
    ((1, 5, 5, 5), (3, 5, 1, 1), {"strides": 3}),
]


@pytest.mark.parametrize("xs, ws, attrs", CONV_CASES)
def test_conv2d_float_matches_im2col(xs, ws, attrs):
    r = rng(3)
    x = r.normal(size=xs).astype(np.float32)
    w = r.normal(size=ws).astype(np.float32)
    y, a = run_node("nn.conv2d", [x, w], **attrs)
    want = im2col_conv(x, w, a["strides"], a["padding"], a["dilation"], a["groups"])
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("xs, ws, attrs", CONV_CASES)
def test_conv2d_int8_is_exact(xs, ws, attrs):
    r = rng(4)
    x = r.integers(-128, 128, xs).astype(np.int8)
    w = r.integers(-128, 128, ws).astype(np.int8)
    y, a = run_node("nn.conv2d", [x, w], out_dtype="int32", **attrs)
    want = im2col_conv(x, w, a["strides"], a["padding"], a["dilation"], a["groups"], dtype=np.int64)
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, want)


def test_conv2d_int32_wraps_around():
    r = rng(5)
    x = r.integers(1 << 20, 1 << 21, (1, 4, 3, 3)).astype(np.int32)
    w = r.integers(1 << 14, 1 << 15, (2, 4, 3, 3)).astype(np.int32)
    y = run_op("nn.conv2d", [x, w], padding=1)
    exact = im2col_conv(x, w, padding=(1, 1, 1, 1), dtype=np.int64)
    assert np.abs(exact).max() > INT32_MAX   # the sum really overflows
    np.testing.assert_array_equal(y, wrap32(exact))


@settings(max_examples=30, **SETTINGS)
@given(n=st.integers(1, 2), cg=st.integers(1, 3), og=st.integers(1, 3), groups=st.integers(1, 2),
       h=st.integers(3, 7), w=st.integers(3, 7), kh=st.integers(1, 3), kw=st.integers(1, 3),
       s=st.tuples(st.integers(1, 2), st.integers(1, 2)), d=st.tuples(st.integers(1, 2), st.integers(1, 2)),
       pad=st.tuples(*[st.integers(0, 2)] * 4), seed=st.integers(0, 1000))
def test_conv2d_int8_exact_property(n, cg, og, groups, h, w, kh, kw, s, d, pad, seed):
    if h + pad[0] + pad[2] < d[0] * (kh - 1) + 1 or w + pad[1] + pad[3] < d[1] * (kw - 1) + 1:
        return
    r = rng(seed)
    x = r.integers(-128, 128, (n, cg * groups, h, w)).astype(np.int8)
    k = r.integers(-128, 128, (og * groups, cg, kh, kw)).astype(np.int8)
    y = run_op("nn.conv2d", [x, k], out_dtype="int32", strides=s, padding=pad, dilation=d, groups=groups)
    np.testing.assert_array_equal(y, im2col_conv(x, k, s, pad, d, groups, dtype=np.int64))


TRANSPOSE_CASES = [
    ((1, 3, 4, 5), (3, 2, 3, 3), {"strides": 2, "padding": 1, "output_padding": 1}),
    ((2, 2, 3, 3), (2, 4, 4, 4), {"strides": 2, "padding": 1}),
    ((1, 2, 3, 4), (2, 3, 4, 3), {"strides": (2, 3), "padding": (0, 1, 2, 0)}),
    ((1, 2, 4, 4), (2, 3, 2, 2), {"strides": 1, "padding": 2}),          # padding beyond the kernel: crop
    ((1, 3, 3, 3), (3, 2, 3, 3), {}),
]


@pytest.mark.parametrize("xs, ws, attrs", TRANSPOSE_CASES)
def test_conv2d_transpose_matches_scatter(xs, ws, attrs):
    r = rng(6)
    x = r.normal(size=xs).astype(np.float32)
    w = r.normal(size=ws).astype(np.float32)
    y, a = run_node("nn.conv2d_transpose", [x, w], **attrs)
    want = scatter_conv_transpose(x, w, a["strides"], a["padding"], a["output_padding"])
    assert y.shape == want.shape
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    xi = r.integers(-128, 128, xs).astype(np.int8)
    wi = r.integers(-128, 128, ws).astype(np.int8)
    yi = run_op("nn.conv2d_transpose", [xi, wi], out_dtype="int32", **attrs)
    np.testing.assert_array_equal(yi, scatter_conv_transpose(xi, wi, a["strides"], a["padding"],
                                                              a["output_padding"], dtype=np.int64))


def test_dense_float_and_int():
    r = rng(7)
    x, w = r.normal(size=(3, 20)).astype(np.float32), r.normal(size=(5, 20)).astype(np.float32)
    np.testing.assert_allclose(run_op("nn.dense", [x, w]), x.astype(np.float64) @ w.T.astype(np.float64),
                               rtol=1e-5, atol=1e-5)
    xi, wi = r.integers(-128, 128, (3, 20)).astype(np.int8), r.integers(-128, 128, (5, 20)).astype(np.int8)
    np.testing.assert_array_equal(run_op("nn.dense", [xi, wi], out_dtype="int32"),
                                  xi.astype(np.int64) @ wi.T.astype(np.int64))


def loop_pool(x, k, s, pad, ceil, kind, include_pad=False):
    """Pooling by explicit loops over output positions (windows clipped to the real input)."""
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (pt, pl, pb, pr) = k, s, pad
    oh, ow = pool_out(h, kh, sh, pt, pb, ceil), pool_out(w, kw, sw, pl, pr, ceil)
    out = np.zeros((n, c, oh, ow), np.float64)
    for i in range(oh):
        for j in range(ow):
            r0, c0 = i * sh - pt, j * sw - pl
            rows = [r for r in range(r0, r0 + kh) if 0 <= r < h]
            cols = [q for q in range(c0, c0 + kw) if 0 <= q < w]
            win = x[:, :, rows][:, :, :, cols].astype(np.float64)
            if kind == "max":
                out[:, :, i, j] = win.max(axis=(2, 3))
            else:
                out[:, :, i, j] = win.sum(axis=(2, 3)) / (kh * kw if include_pad else len(rows) * len(cols))
    return out


POOL_CASES = [
    ((2, 2), (2, 2), (0, 0, 0, 0), False),
    ((3, 3), (2, 2), (1, 1, 1, 1), False),
    ((3, 3), (2, 2), (0, 0, 0, 0), True),
    ((2, 3), (3, 1), (1, 0, 0, 1), True),
    ((3, 2), (2, 2), (1, 1, 0, 0), True),
]


@pytest.mark.parametrize("k, s, pad, ceil", POOL_CASES)
def test_pools_match_loops(k, s, pad, ceil):
    r = rng(8)
    x = r.normal(size=(1, 2, 7, 8)).astype(np.float32)
    attrs = {"pool_size": k, "strides": s, "padding": pad, "ceil_mode": ceil}
    np.testing.assert_array_equal(run_op("nn.max_pool2d", [x], **attrs), loop_pool(x, k, s, pad, ceil, "max"))
    np.testing.assert_allclose(run_op("nn.avg_pool2d", [x], **attrs), loop_pool(x, k, s, pad, ceil, "avg"),
                               rtol=1e-6, atol=1e-6)
    xi = r.integers(-128, 128, (1, 2, 7, 8)).astype(np.int8)
    yi = run_op("nn.max_pool2d", [xi], **attrs)
    assert yi.dtype == np.int8
    np.testing.assert_array_equal(yi, loop_pool(xi, k, s, pad, ceil, "max"))


def test_avg_pool_count_include_pad_divides_by_window():
    x = np.arange(36, dtype=np.float32).reshape(1, 1, 6, 6)
    y = run_op("nn.avg_pool2d", [x], pool_size=3, strides=2, padding=1, count_include_pad=True)
    np.testing.assert_allclose(y, loop_pool(x, (3, 3), (2, 2), (1, 1, 1, 1), False, "avg", include_pad=True),
                               rtol=1e-6)
    assert y[0, 0, 0, 0] == pytest.approx((0 + 1 + 6 + 7) / 9)


def test_global_avg_pool_and_softmax():
    r = rng(9)
    x = r.normal(size=(2, 3, 4, 5)).astype(np.float32)
    np.testing.assert_allclose(run_op("nn.global_avg_pool2d", [x])[:, :, 0, 0], x.mean(axis=(2, 3)), rtol=1e-5)
    y = run_op("nn.softmax", [x], axis=1)
    e = np.exp(x.astype(np.float64))
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-5)


def test_int32_add_subtract_multiply_wrap():
    a = np.array([INT32_MAX, INT32_MIN, 1 << 16, 46341, -7, 123456789], np.int32)
    b = np.array([1, -1, 1 << 16, 46341, 3, 987654], np.int32)
    for op, fn in (("add", lambda p, q: p + q), ("subtract", lambda p, q: p - q), ("multiply", lambda p, q: p * q)):
        y = run_op(op, [a, b])
        assert y.dtype == np.int32
        np.testing.assert_array_equal(y, wrap32([fn(int(p), int(q)) for p, q in zip(a, b, strict=True)]))
    assert run_op("add", [a[:1], b[:1]])[0] == INT32_MIN
    assert run_op("multiply", [a[2:3], b[2:3]])[0] == 0


def test_int8_ops_wrap_to_int8():
    a = np.array([127, -128, 100], np.int8)
    y = run_op("add", [a, np.array([1, -1, 100], np.int8)])
    assert y.dtype == np.int8 and list(y) == [-128, 127, -56]


def test_shifts_clamp_counts_at_31():
    x = np.array([-5, 5, -1, INT32_MAX, INT32_MIN, 1000, 1, 3], np.int32)
    s = np.array([40, 40, 31, 32, 1, 3, 31, 100], np.int32)
    y = run_op("right_shift", [x, s])
    np.testing.assert_array_equal(y, [int(v) >> min(int(k), 31) for v, k in zip(x, s, strict=True)])
    assert list(y) == [-1, 0, -1, 0, -(1 << 30), 125, 0, 0]
    z = run_op("left_shift", [x, s])
    np.testing.assert_array_equal(z, wrap32([int(v) << min(int(k), 31) for v, k in zip(x, s, strict=True)]))
    with pytest.raises(GraphError, match="shift counts must be >= 0"):
        run_op("right_shift", [x, -s])


def test_clip_on_integers_rounds_bounds_inward_and_saturates_to_the_dtype():
    x8 = np.array([-128, -4, -3, 0, 1, 127], np.int8)
    np.testing.assert_array_equal(run_op("clip", [x8], a_min=-3.5, a_max=1000.0), [-3, -3, -3, 0, 1, 127])
    x32 = np.array([-10, -2, 0, 2, 3, 10], np.int32)
    y = run_op("clip", [x32], a_min=-2.5, a_max=2.9)
    assert y.dtype == np.int32 and list(y) == [-2, -2, 0, 2, 2, 2]
    y = run_op("clip", [x32], a_min=-math.inf, a_max=2.0)          # an unbounded side (ONNX Clip default)
    assert list(y) == [-10, -2, 0, 2, 2, 2]
    y = run_op("clip", [x32], a_min=0.0, a_max=math.inf)
    assert list(y) == [0, 0, 0, 2, 3, 10]
    xf = np.array([-1.5, 0.5, 7.0], np.float32)
    np.testing.assert_array_equal(run_op("clip", [xf], a_min=0, a_max=6), [0.0, 0.5, 6.0])


def test_cast_wraps_integers_and_truncates_floats():
    np.testing.assert_array_equal(run_op("cast", [np.array([200, -129, 127, 256], np.int32)], dtype="int8"),
                                  [-56, 127, 127, 0])
    np.testing.assert_array_equal(run_op("cast", [np.array([2.7, -2.7, 0.5], np.float32)], dtype="int32"),
                                  [2, -2, 0])


def test_quantize_rounds_half_up_and_clips_symmetrically():
    x = np.array([0.25, -0.25, 0.75, -0.75, 0.2, -0.3, 63.25, -63.75, 100.0, -100.0, 0.0], np.float32)
    y = run_op("qnn.quantize", [x], scale=0.5)
    want = np.clip(np.floor(x.astype(np.float64) / 0.5 + 0.5), -127, 127)
    assert y.dtype == np.int8
    np.testing.assert_array_equal(y, want)
    assert list(y[:4]) == [1, 0, 2, -1] and y[-3] == 127 and y[-2] == -127   # never -128
    q = np.array([-127, -1, 0, 5, 127], np.int8)
    np.testing.assert_array_equal(run_op("qnn.dequantize", [q], scale=0.25), q.astype(np.float32) * 0.25)


def test_elementwise_float_ops():
    r = rng(10)
    a, b = r.normal(size=(2, 3, 4)).astype(np.float32), r.uniform(0.5, 2, (3, 1)).astype(np.float32)
    np.testing.assert_array_equal(run_op("divide", [a, b]), a / b)
    np.testing.assert_array_equal(run_op("maximum", [a, b]), np.maximum(a, b))
    np.testing.assert_array_equal(run_op("minimum", [a, b]), np.minimum(a, b))
    np.testing.assert_array_equal(run_op("nn.relu", [a]), np.where(a > 0, a, 0))
    np.testing.assert_allclose(run_op("sigmoid", [a]), 1 / (1 + np.exp(-a.astype(np.float64))),
                               rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(run_op("tanh", [a]), np.tanh(a.astype(np.float64)), rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(run_op("nn.dropout", [a]), a)
    with pytest.raises(GraphError, match="floats only"):
        run_op("divide", [np.ones(3, np.int32), np.ones(3, np.int32)])


def test_bias_add_and_batch_norm():
    r = rng(11)
    x = r.normal(size=(2, 3, 4, 5)).astype(np.float32)
    bias = r.normal(size=3).astype(np.float32)
    np.testing.assert_array_equal(run_op("nn.bias_add", [x, bias]), x + bias[None, :, None, None])
    bias5 = r.normal(size=5).astype(np.float32)
    np.testing.assert_array_equal(run_op("nn.bias_add", [x, bias5], axis=-1), x + bias5)
    xi = np.full((1, 2, 1, 1), INT32_MAX, np.int32)
    np.testing.assert_array_equal(run_op("nn.bias_add", [xi, np.array([1, 0], np.int32)])[:, :, 0, 0],
                                  [[INT32_MIN, INT32_MAX]])
    gamma, beta, mean = (r.normal(size=3).astype(np.float32) for _ in range(3))
    var = r.uniform(0.5, 2, 3).astype(np.float32)
    y = run_op("nn.batch_norm", [x, gamma, beta, mean, var], epsilon=1e-3)
    sh = (1, 3, 1, 1)
    want = (x - mean.reshape(sh)) / np.sqrt(var.reshape(sh).astype(np.float64) + 1e-3) * gamma.reshape(sh) \
        + beta.reshape(sh)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


def test_shape_ops():
    r = rng(12)
    x = r.normal(size=(2, 3, 4, 5)).astype(np.float32)
    np.testing.assert_array_equal(run_op("reshape", [x], newshape=(0, -1, 5)), x.reshape(2, 12, 5))
    np.testing.assert_array_equal(run_op("transpose", [x], axes=(0, 2, 3, 1)), x.transpose(0, 2, 3, 1))
    np.testing.assert_array_equal(run_op("nn.batch_flatten", [x]), x.reshape(2, 60))
    y = run_op("concatenate", [x, x[:, :1] * 2], axis=1)
    np.testing.assert_array_equal(y[:, :3], x)
    np.testing.assert_array_equal(y[:, 3:], x[:, :1] * 2)
    p = run_op("nn.pad", [x], pad_width=((0, 0), (1, 0), (0, 2), (1, 1)), pad_value=-3.0)
    assert p.shape == (2, 4, 6, 7)
    np.testing.assert_array_equal(p[:, 1:, :4, 1:6], x)
    assert (p[:, 0] == -3).all() and (p[:, :, 4:] == -3).all() and (p[..., 0] == -3).all()
    u = run_op("nn.upsampling", [x], scale_h=2, scale_w=3)
    for i in range(8):
        for j in range(15):
            np.testing.assert_array_equal(u[:, :, i, j], x[:, :, i // 2, j // 3])


def test_pack_unpack_with_padding_places_every_element():
    r = rng(13)
    x = r.integers(-128, 128, (3, 20, 2, 3)).astype(np.int8)
    want = np.zeros((1, 2, 2, 3, 4, 16), np.int8)   # batch 3 and channels 20..31 stay zero padding
    for n, c, h, w in np.ndindex(*x.shape):
        want[n // 4, c // 16, h, w, n % 4, c % 16] = x[n, c, h, w]
    np.testing.assert_array_equal(pack_blocks(x, 4, 16), want)
    p = pack_blocks(x, 4, 16)
    np.testing.assert_array_equal(unpack_blocks(p, 3, 20), x)
    x2 = r.integers(-128, 128, (5, 20)).astype(np.int8)
    p2 = pack_blocks(x2, 2, 16)
    assert p2.shape == (3, 2, 2, 16)
    np.testing.assert_array_equal(unpack_blocks(p2, 5, 20), x2)


def test_pack_weight_and_transposed_weights():
    r = rng(14)
    w = r.integers(-128, 128, (20, 3, 3, 2)).astype(np.int8)
    want = np.zeros((2, 1, 3, 2, 16, 16), np.int8)
    for o, i, kh, kw in np.ndindex(*w.shape):
        want[o // 16, i // 16, kh, kw, o % 16, i % 16] = w[o, i, kh, kw]
    np.testing.assert_array_equal(pack_blocks(w, 16, 16), want)
    wt = r.integers(-128, 128, (3, 20, 3, 3)).astype(np.int8)   # IOHW
    direct = transposed_to_direct(wt)
    for o, i, kh, kw in np.ndindex(*direct.shape):
        assert direct[o, i, kh, kw] == wt[i, o, 2 - kh, 2 - kw]
    y = run_op("layout_transform", [wt], src_layout="IOHW", dst_layout="OIHW16o16i")
    np.testing.assert_array_equal(y, pack_blocks(direct, 16, 16))


def test_layout_transform_round_trip_through_the_ir():
    r = rng(15)
    x = r.integers(-128, 128, (2, 20, 3, 3)).astype(np.int8)
    b = GraphBuilder()
    i = b.input("x", x.shape, "int8")
    p = b.op("layout_transform", [i], name="p", src_layout="NCHW", dst_layout="NCHW4n16c")
    u = b.op("layout_transform", [p], name="u", src_layout="NCHW4n16c", dst_layout="NCHW", batch=2, channels=20)
    g, params = b.finish([u, p])
    out, packed = run_reference(g, params, {"x": x})
    np.testing.assert_array_equal(out, x)
    assert packed.shape == (1, 2, 3, 3, 4, 16)


@settings(max_examples=40, **SETTINGS)
@given(n=st.integers(1, 5), c=st.integers(1, 40), h=st.integers(1, 3), b=st.sampled_from([1, 2, 4]),
       block=st.sampled_from([8, 16, 32]), seed=st.integers(0, 100))
def test_pack_unpack_round_trip_property(n, c, h, b, block, seed):
    x = rng(seed).integers(-128, 128, (n, c, h, 2)).astype(np.int8)
    p = pack_blocks(x, b, block)
    assert p.shape == (-(-n // b), -(-c // block), h, 2, b, block)
    assert int(np.abs(p.astype(np.int64)).sum()) == int(np.abs(x.astype(np.int64)).sum())   # padding is zero
    np.testing.assert_array_equal(unpack_blocks(p, n, c), x)


# ---- passes -----------------------------------------------------------------------------------------------------

def bn_params(b: GraphBuilder, name: str, c: int, r: np.random.Generator) -> list[str]:
    return [b.const(f"{name}.gamma", r.uniform(0.5, 2, c)), b.const(f"{name}.beta", r.normal(size=c)),
            b.const(f"{name}.mean", r.normal(size=c)), b.const(f"{name}.var", r.uniform(0.5, 2, c))]


def ops_of(g) -> list[str]:
    return [n.op for n in g.ops()]


def assert_same_outputs(g1, p1, g2, p2, inputs, rtol=1e-4, atol=1e-4):
    a, b = run_reference(g1, p1, inputs), run_reference(g2, p2, inputs)
    a, b = (a if isinstance(a, tuple) else (a,)), (b if isinstance(b, tuple) else (b,))
    for u, v in zip(a, b, strict=True):
        assert u.shape == v.shape and u.dtype == v.dtype
        np.testing.assert_allclose(u, v, rtol=rtol, atol=atol)


def test_simplify_folds_batch_norm_into_conv_transpose_and_dense():
    r = rng(16)
    b = GraphBuilder()
    x = b.input("x", (2, 3, 6, 6))
    y = b.op("nn.conv2d", [x, b.const("w", r.normal(size=(4, 3, 3, 3)))], name="conv", padding=1)
    y = b.op("nn.batch_norm", [y, *bn_params(b, "bn0", 4, r)], name="bn0")
    y = b.op("nn.relu", [y], name="relu")
    y = b.op("nn.conv2d_transpose", [y, b.const("wt", r.normal(size=(4, 5, 3, 3)))], name="convt", strides=2,
             padding=1)
    y = b.op("nn.bias_add", [y, b.const("bt", r.normal(size=5))], name="convt_bias")
    y = b.op("nn.batch_norm", [y, *bn_params(b, "bn1", 5, r)], name="bn1", epsilon=1e-3)
    y = b.op("nn.batch_flatten", [y], name="flat")
    y = b.op("nn.dense", [y, b.const("wd", r.normal(size=(6, 5 * 11 * 11)) * 0.05)], name="fc")
    y = b.op("nn.batch_norm", [y, *bn_params(b, "bn2", 6, r)], name="bn2")
    g, p = b.finish([y])
    g2, p2 = simplify(g, p)
    assert "nn.batch_norm" not in ops_of(g2) and "multiply" not in ops_of(g2)
    assert ops_of(g2) == ["nn.conv2d", "nn.bias_add", "nn.relu", "nn.conv2d_transpose", "nn.bias_add",
                          "nn.batch_flatten", "nn.dense", "nn.bias_add"]
    assert not any(k.startswith("bn") and not k.endswith("_bn") for k in p2)   # the statistics are gone
    assert_same_outputs(g, p, g2, p2, {"x": r.normal(size=(2, 3, 6, 6)).astype(np.float32)})


def test_simplify_lowers_batch_norm_it_cannot_fold():
    r = rng(17)
    b = GraphBuilder()
    x = b.input("x", (1, 3, 5, 5))
    c = b.op("nn.conv2d", [x, b.const("w", r.normal(size=(4, 3, 3, 3)))], name="conv")
    n1 = b.op("nn.batch_norm", [c, *bn_params(b, "bn_shared", 4, r)], name="bn_shared")  # conv has 2 readers
    n2 = b.op("nn.batch_norm", [b.op("nn.relu", [c], name="relu"), *bn_params(b, "bn_relu", 4, r)],
              name="bn_relu")
    g, p = b.finish([b.op("add", [n1, n2], name="sum")])
    g2, p2 = simplify(g, p)
    assert "nn.batch_norm" not in ops_of(g2)
    assert ops_of(g2).count("multiply") == 2 and g2["bn_relu_mul"].op == "multiply"
    assert g2["bn_relu_add"].inputs[0] == "bn_relu_mul"
    assert_same_outputs(g, p, g2, p2, {"x": r.normal(size=(1, 3, 5, 5)).astype(np.float32)})


@pytest.mark.parametrize("axis, shape", [(-1, (1, 4, 5, 6)), (3, (1, 4, 5, 6)), (1, (3, 7)), (-1, (3, 7)),
                                         (2, (2, 3, 5, 4))])
def test_lowered_batch_norm_on_any_axis(axis, shape):
    r = rng(18)
    b = GraphBuilder()
    x = b.input("x", shape)
    c = shape[axis]
    y = b.op("nn.batch_norm", [x, *bn_params(b, "bn", c, r)], name="bn", axis=axis)
    g, p = b.finish([y])
    g2, p2, changed = LowerBatchNorm().apply(g, p)
    assert changed and "nn.batch_norm" not in ops_of(g2)
    assert g2[g2.outputs[0]].shape == shape
    assert_same_outputs(g, p, g2, p2, {"x": r.normal(size=shape).astype(np.float32)})


def test_simplify_folds_two_batch_norms_in_a_row():
    r = rng(19)
    b = GraphBuilder()
    x = b.input("x", (1, 3, 5, 5))
    y = b.op("nn.conv2d", [x, b.const("w", r.normal(size=(4, 3, 3, 3)))], name="conv")
    y = b.op("nn.batch_norm", [y, *bn_params(b, "bn0", 4, r)], name="bn0")
    y = b.op("nn.batch_norm", [y, *bn_params(b, "bn1", 4, r)], name="bn1")
    g, p = b.finish([y])
    g2, p2 = simplify(g, p)
    assert ops_of(g2) == ["nn.conv2d", "nn.bias_add"]
    assert_same_outputs(g, p, g2, p2, {"x": r.normal(size=(1, 3, 5, 5)).astype(np.float32)})


def test_remove_identities():
    r = rng(20)
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    y = b.op("nn.dropout", [x], name="drop")
    y = b.op("cast", [y], name="same", dtype="float32")
    y = b.op("nn.relu", [y], name="relu")
    y = b.op("nn.dropout", [y], name="drop2")
    z = b.op("cast", [y], name="to_int", dtype="int32")
    g, p = b.finish([y, z])
    g2, p2, changed = RemoveIdentities().apply(g, p)
    assert changed and ops_of(g2) == ["nn.relu", "cast"]
    assert g2["relu"].inputs == ["x"] and g2.outputs == ["relu", "to_int"]
    assert_same_outputs(g, p, g2, p2, {"x": r.normal(size=(2, 3)).astype(np.float32)})


def test_bias_add_from_add():
    r = rng(21)
    b = GraphBuilder()
    x = b.input("x", (1, 3, 4, 4))
    shared = b.const("shared", r.normal(size=(4, 1, 1)))
    c1 = b.op("nn.conv2d", [x, b.const("w1", r.normal(size=(4, 3, 1, 1)))], name="c1")
    c2 = b.op("nn.conv2d", [x, b.const("w2", r.normal(size=(4, 3, 1, 1)))], name="c2")
    a1 = b.op("add", [c1, shared], name="a1")
    a2 = b.op("add", [c2, shared], name="a2")                          # the same constant on a second conv
    a3 = b.op("add", [c1, b.const("k4", r.normal(size=(1, 4, 1, 1)))], name="a3")
    a4 = b.op("add", [c2, b.const("full", r.normal(size=(4, 4, 4)))], name="a4")   # not per-channel
    a5 = b.op("add", [a1, b.const("k5", r.normal(size=(4, 1, 1)))], name="a5")     # not after a conv
    f = b.op("nn.batch_flatten", [x], name="flat")
    d = b.op("nn.dense", [f, b.const("wd", r.normal(size=(5, 48)))], name="fc")
    a6 = b.op("add", [d, b.const("kd", r.normal(size=5))], name="a6")
    g, p = b.finish([a2, a3, a4, a5, a6])
    g2, p2, changed = BiasAddFromAdd().apply(g, p)
    assert changed
    assert {n: g2[n].op for n in ("a1", "a2", "a3", "a4", "a5", "a6")} == {
        "a1": "nn.bias_add", "a2": "nn.bias_add", "a3": "nn.bias_add", "a4": "add", "a5": "add", "a6": "nn.bias_add"}
    for n in ("a1", "a2", "a3", "a6"):
        assert g2[g2[n].inputs[1]].shape == (g2[n].shape[1],)
    assert_same_outputs(g, p, g2, p2, {"x": r.normal(size=(1, 3, 4, 4)).astype(np.float32)}, rtol=0, atol=0)
    g3, _p3 = simplify(g, p)   # simplify runs it to a fixed point too
    assert g3["a2"].op == "nn.bias_add"


def test_fold_batch_norm_keeps_unfoldable_graph_unchanged():
    r = rng(22)
    b = GraphBuilder()
    x = b.input("x", (1, 3, 4, 4))
    w = b.input("w", (4, 3, 1, 1))                                        # the weight is not a constant
    y = b.op("nn.conv2d", [x, w], name="conv")
    y = b.op("nn.batch_norm", [y, *bn_params(b, "bn", 4, r)], name="bn")
    g, p = b.finish([y])
    g2, _p2, changed = FoldBatchNorm().apply(g, p)
    assert not changed and ops_of(g2) == ["nn.conv2d", "nn.batch_norm"]
