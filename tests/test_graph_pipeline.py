"""quantize -> graph_pack -> build on small hand-built graphs.

The specified meaning of a quantized graph is ``run_reference(qgraph, qparams, inputs)``: a built module
(accelerator groups on the simulator, the rest on the host) must reproduce it bit for bit. Quantization
itself is checked against an integer model written here and against the float graph (int8 accuracy);
graph_pack by its region, its groups and the reasons it gives for what stays on the CPU.
"""

from __future__ import annotations

import math
import types
import warnings

import numpy as np
import pytest
from extras import needs

from graph_pack import GraphBuilder, GraphError, run_reference
from graph_pack.build import (
    AccelStep,
    HostFallbackError,
    HostFallbackWarning,
    HostStep,
    build,
    workload_key,
)
from graph_pack.pack import format_offload_report, graph_pack, group_workload, offload_report
from graph_pack.quantize import quantize
from graph_pack.reference import evaluate
from hw_config import load_config
from vta.runtime import ScheduleError

SIM = load_config("sim")


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def he(r: np.random.Generator, *shape: int, gain: float = 1.0) -> np.ndarray:
    """He-initialised float32 weights (well-scaled activations through relu layers)."""
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    return (r.normal(size=shape) * gain * math.sqrt(2.0 / fan_in)).astype(np.float32)


class Net:
    """A float graph: ``data`` -> ``start`` (a 1x1 max pool, the identity) -> ... -> ``stop`` (batch_flatten)."""

    def __init__(self, shape: tuple[int, ...], seed: int = 0):
        self.r = rng(seed)
        self.b = GraphBuilder()
        self.shape = shape
        self.x = self.b.op("nn.max_pool2d", [self.b.input("data", shape)], name="start", pool_size=1)

    def conv(self, x: str, cout: int, k: int = 3, name: str = "conv", bias: bool = False, relu: bool = False,
             op: str = "nn.conv2d", gain: float = 1.0, **attrs) -> str:
        cin = self.b.graph[x].shape[1]
        groups = attrs.get("groups", 1)
        wshape = (cin, cout, k, k) if op == "nn.conv2d_transpose" else (cout, cin // groups, k, k)
        w = self.r.normal(size=wshape) * gain * math.sqrt(2.0 / (cin // groups * k * k))
        y = self.b.op(op, [x, self.b.const(f"{name}.w", w.astype(np.float32))], name=name, **attrs)
        if bias:
            y = self.b.op("nn.bias_add", [y, self.b.const(f"{name}.b", self.r.normal(0, 0.1, cout))],
                          name=f"{name}.bias")
        if relu:
            y = self.b.op("nn.relu", [y], name=f"{name}.relu")
        return y

    def op(self, op: str, inputs: list[str], name: str, **attrs) -> str:
        return self.b.op(op, inputs, name=name, **attrs)

    def finish(self, y: str, *more: str):
        return self.b.finish([self.b.op("nn.batch_flatten", [y], name="stop"), *more])

    def inputs(self, seed: int = 1, scale: float = 1.0) -> dict[str, np.ndarray]:
        return {"data": (rng(seed).normal(size=self.shape) * scale).astype(np.float32)}


def check_exact(mod, qg, qp, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Run the module; every output must equal run_reference on the quantized graph bit for bit."""
    mod.run(**inputs)
    want = run_reference(qg, qp, inputs)
    want = want if isinstance(want, tuple) else (want,)
    assert mod.get_num_outputs() == len(want)
    got = [mod.get_output(i) for i in range(len(want))]
    for g_, w_ in zip(got, want, strict=True):
        assert g_.shape == w_.shape and g_.dtype == w_.dtype
        assert np.array_equal(g_.view(np.uint8), w_.view(np.uint8))   # bit-exact, -0.0 included
    return got


def pipeline(g, p, inputs, cfg=SIM, start="start", stop="stop", qkw=None, **build_kw):
    """quantize (all convs offloadable unless qkw says otherwise) -> graph_pack -> build -> bit-exact run."""
    qg, qp = quantize(g, p, **{"skip_conv_layers": [], **(qkw or {})})
    packed = graph_pack(qg, cfg, start_name=start, stop_name=stop)
    mod = build(packed, cfg, qp, **{"cpu": "numpy", "fallback": "error", **build_kw})
    check_exact(mod, qg, qp, inputs)
    return qg, qp, packed, mod


def report(packed) -> dict[str, tuple[str, str]]:
    return {r["name"]: (r["where"], r["why"]) for r in offload_report(packed)}


def accel_steps(mod) -> list[AccelStep]:
    return [s for s in mod.steps if isinstance(s, AccelStep)]


def chain_ops(qg, start: str) -> list[str]:
    """The ops of the single-consumer chain that follows ``start``."""
    users, ops, cur = qg.consumers(), [], start
    while len(users[cur]) == 1 and users[cur][0] != "<output>":
        cur = users[cur][0]
        ops.append(qg[cur].op)
    return ops


def resnet_block(seed: int = 0, shape=(1, 16, 8, 8)):
    """conv-bias-relu, conv, + identity, relu; then a strided conv and a 1x1 stride-2 downsample + add."""
    n = Net(shape, seed)
    y = n.conv(n.x, 16, name="c1", padding=1, bias=True, relu=True)
    y = n.conv(y, 16, name="c2", padding=1)
    a = n.op("nn.relu", [n.op("add", [y, n.x], name="res1")], name="res1.relu")
    y = n.conv(a, 32, name="c3", padding=1, strides=2, relu=True)
    y = n.conv(y, 32, name="c4", padding=1)
    d = n.conv(a, 32, k=1, name="down", strides=2)
    out = n.op("nn.relu", [n.op("add", [y, d], name="res2")], name="res2.relu")
    return n, *n.finish(out)


# ---- quantize ------------------------------------------------------------------------------------------------

def test_quantize_structure():
    n = Net((1, 3, 8, 8))
    y = n.conv(n.x, 16, name="c0", padding=1, relu=True)
    y = n.conv(y, 16, name="c1", padding=1, bias=True, relu=True)
    y = n.conv(y, 16, name="c2", padding=1)
    g, p = n.finish(y)
    qg, qp = quantize(g, p)                       # VTA's defaults: global_scale=8, skip_conv_layers=[0]
    # the first conv stays float on the CPU
    assert qg["c0"].dtype == "float32" and qg["c0.w"].dtype == "float32"
    np.testing.assert_array_equal(qp["c0.w"], p["c0.w"])
    # the others: int8 x int8 -> int32, the input quantized at 2**-4 (int8 covers +-8)
    for name in ("c1", "c2"):
        assert qg[name].dtype == "int32" and qg[name].attrs["out_dtype"] == "int32"
        data, weight = (qg[i] for i in qg[name].inputs)
        assert data.dtype == "int8" and weight.dtype == "int8" and qp[weight.name].dtype == np.int8
    entry = qg[qg["c1"].inputs[0]]
    assert entry.op == "qnn.quantize" and entry.attrs["scale"] == 2.0 ** -4
    # weights: the smallest power-of-two exponent e with max|w| / 2**e <= 127, rounded half up
    w = p["c1.w"].astype(np.float64)
    e_w = math.ceil(math.log2(np.abs(w).max() / 127))
    if np.abs(w).max() / 2.0 ** e_w > 127:
        e_w += 1
    np.testing.assert_array_equal(qp["c1.w.q"], np.clip(np.floor(w / 2.0 ** e_w + 0.5), -127, 127))
    assert 64 <= np.abs(qp["c1.w.q"]).max() <= 127
    # the bias is int32 at the accumulator's exponent
    bias = qg["c1.bias"]
    assert bias.op == "nn.bias_add" and qg[bias.inputs[1]].dtype == "int32"
    np.testing.assert_array_equal(qp[bias.inputs[1]], np.floor(p["c1.b"].astype(np.float64) / 2.0 ** (e_w - 4) + 0.5))
    # requantization to the next int8 input: add 2**(k-1), right_shift k, clip +-127, cast int8
    assert chain_ops(qg, "c1")[:7] == ["nn.bias_add", "nn.relu", "add", "right_shift", "clip", "cast", "nn.conv2d"]
    k = -e_w
    rnd = qg["c1.relu.requant.round_add"]
    shr = qg["c1.relu.requant.shr"]
    assert int(qp[rnd.inputs[1]]) == 1 << (k - 1) and int(qp[shr.inputs[1]]) == k
    assert qg["c1.relu.clip"].attrs == {"a_min": -127.0, "a_max": 127.0}
    assert qg["c1.relu.cast"].dtype == "int8" and qg["c2"].inputs[0] == "c1.relu.cast"
    # the float output crosses back through qnn.dequantize
    stop = qg[qg.outputs[0]]
    assert stop.dtype == "float32"
    assert any(node.op == "qnn.dequantize" for node in qg.ops())
    assert qg.inputs == ["data"] and qg["data"].dtype == "float32"


def test_quantized_conv_matches_an_integer_model():
    """conv 1x1 + bias + relu, requantized: the quantized graph computes exactly this integer model."""
    n = Net((1, 8, 4, 4), seed=3)
    y = n.conv(n.x, 16, k=1, name="c", bias=True, relu=True)
    g, p = n.finish(y)
    qg, qp = quantize(g, p, skip_conv_layers=[], global_scale=4.0)
    x = n.inputs(seed=4)["data"]
    e_x = -5                                                   # int8 covers +-4: 4 / 128 = 2**-5
    xq = np.floor(x / np.float32(2.0 ** e_x) + np.float32(0.5))   # qnn.quantize rounds in float32
    xq = np.clip(xq, -127, 127).astype(np.int64)
    w = p["c.w"].astype(np.float64)
    e_w = math.ceil(math.log2(np.abs(w).max() / 127))
    e_w += np.abs(w).max() / 2.0 ** e_w > 127
    wq = np.clip(np.floor(w / 2.0 ** e_w + 0.5), -127, 127).astype(np.int64)
    bq = np.floor(p["c.b"].astype(np.float64) / 2.0 ** (e_x + e_w) + 0.5).astype(np.int64)
    acc = np.einsum("nchw,oc->nohw", xq, wq[:, :, 0, 0]) + bq[None, :, None, None]
    acc = np.maximum(acc, 0)
    k = -e_w                                                   # back to 2**e_x
    out = np.clip((acc + (1 << (k - 1))) >> k, -127, 127)
    want = (out * 2.0 ** e_x).reshape(1, -1)
    got = run_reference(qg, qp, {"data": x})
    np.testing.assert_array_equal(got, want.astype(np.float32))


def test_skip_conv_layers_and_skip_dense_layer():
    n = Net((1, 16, 4, 4))
    y = n.conv(n.x, 16, name="c0", padding=1, relu=True)
    y = n.conv(y, 16, name="c1", padding=1, relu=True)
    f = n.op("nn.batch_flatten", [y], name="flat")
    d = n.op("nn.dense", [f, n.b.const("fc.w", he(n.r, 10, 256))], name="fc")
    g, p = n.b.finish([n.op("nn.softmax", [d], name="stop")])
    qg, _ = quantize(g, p, skip_conv_layers=[1])
    assert qg["c0"].dtype == "int32" and qg["c1"].dtype == "float32"
    assert qg["fc"].dtype == "float32" and qg[qg["fc"].inputs[1]].dtype == "float32"   # dense: float by default
    qg, qp = quantize(g, p, skip_conv_layers=[], skip_dense_layer=False)
    assert qg["c0"].dtype == qg["c1"].dtype == qg["fc"].dtype == "int32"
    assert qg[qg["fc"].inputs[0]].dtype == "int8" and qp[qg["fc"].inputs[1]].dtype == np.int8


def test_int8_accuracy_on_a_small_cnn():
    n, g, p = resnet_block(seed=5)
    x = n.inputs(seed=6)
    qg, qp = quantize(g, p, skip_conv_layers=[])
    f, q = run_reference(g, p, x), run_reference(qg, qp, x)
    assert q.dtype == np.float32 and q.shape == f.shape
    err = np.abs(q - f)
    assert err.max() <= 0.1 * np.abs(f).max()           # int8 with power-of-two scales: a few % of the range
    assert err.mean() <= 0.02 * np.abs(f).max()
    assert np.corrcoef(q.ravel(), f.ravel())[0, 1] > 0.995


def test_calibration_modes():
    n = Net((1, 16, 6, 6), seed=7)
    y = n.conv(n.x, 16, name="c0", padding=1, relu=True)
    y = n.conv(y, 16, name="c1", padding=1)
    g, p = n.finish(y)
    data = [n.inputs(seed=s, scale=0.2) for s in range(3)]
    x = n.inputs(seed=9, scale=0.2)

    def entry_scale(qg):
        return qg[qg["c0"].inputs[0]].attrs["scale"]

    qg_g, qp_g = quantize(g, p, skip_conv_layers=[])
    qg_m, qp_m = quantize(g, p, skip_conv_layers=[], calibrate_mode="max", dataset=data)
    qg_p, _ = quantize(g, p, skip_conv_layers=[], calibrate_mode="percentile", dataset=iter(data),
                          percentile=50.0)
    top = max(float(np.abs(d["data"]).max()) for d in data)
    e = math.ceil(math.log2(top / 127))
    e += top / 2.0 ** e > 127
    assert entry_scale(qg_g) == 2.0 ** -4
    assert entry_scale(qg_m) == 2.0 ** e and e < -4                  # the data's own range, not +-8
    assert entry_scale(qg_p) < entry_scale(qg_m)                     # the median is below the max
    f = run_reference(g, p, x)
    err = {k: np.abs(run_reference(a, b, x) - f).max() for k, (a, b) in
           {"global": (qg_g, qp_g), "max": (qg_m, qp_m)}.items()}
    assert err["max"] < err["global"]                                # small activations: finer scales help
    pipeline(g, p, x, qkw={"calibrate_mode": "max", "dataset": data})


@pytest.mark.parametrize("kwargs, words", [
    ({"calibrate_mode": "kl_divergence"}, "calibrate_mode='kl_divergence'"),
    ({"global_scale": 0.0}, "global_scale must be positive"),
    ({"global_scale": -8.0}, "global_scale must be positive"),
    ({"skip_conv_layers": [2]}, "skip_conv_layers [2] out of range: the graph has 2 convolution(s)"),
    ({"skip_conv_layers": [-1]}, "skip_conv_layers [-1] out of range"),
    ({"calibrate_mode": "max"}, "needs dataset="),
    ({"calibrate_mode": "percentile", "dataset": []}, "needs at least one sample batch"),
    ({"calibrate_mode": "percentile", "dataset": [{}], "percentile": 0.0}, "percentile must be in (0, 100]"),
    ({"calibrate_mode": "percentile", "dataset": [{}], "percentile": 101}, "percentile must be in (0, 100]"),
])
def test_quantize_bad_arguments(kwargs, words):
    n = Net((1, 16, 4, 4))
    g, p = n.finish(n.conv(n.conv(n.x, 16, name="c0", padding=1), 16, name="c1", padding=1))
    with pytest.raises(ValueError) as e:
        quantize(g, p, **kwargs)
    assert words in str(e.value)


def test_quantize_passes_integer_and_boolean_tensors_through():
    """A transformer's token ids (int64) and mask (bool) are not activations: the ops reading them (an embedding
    lookup, a comparison, a select) stay as in the float graph and compute the float graph's values; the float
    result of the lookup is quantized into the conv after it as usual."""
    rng = np.random.default_rng(3)
    b = GraphBuilder()
    ids = b.input("ids", (1, 16), "int64")
    mask = b.input("mask", (1, 16), "int64")
    table = b.const("table", rng.standard_normal((50, 16)).astype(np.float32))
    emb = b.op("take", [table, ids], name="emb", axis=0)                       # (1, 16, 16) float
    keep = b.op("equal", [mask, b.const("zero", np.zeros((), np.int64))], name="keep")
    masked = b.op("where", [b.op("reshape", [keep], name="keep4", newshape=(1, 16, 1)), b.const(
        "big", np.full((), -4.0, np.float32)), emb], name="masked")
    x = b.op("reshape", [masked], name="x4", newshape=(1, 16, 16, 1))
    w = b.const("w", rng.standard_normal((16, 16, 1, 1)).astype(np.float32) * 0.3)
    y = b.op("nn.conv2d", [x, w], name="conv")
    g, p = b.finish([y])
    feeds = {"ids": rng.integers(0, 50, (1, 16)), "mask": np.r_[np.ones(12), np.zeros(4)].astype(np.int64)[None]}
    qg, qp = quantize(g, p, skip_conv_layers=[], dataset=[feeds])
    for name in ("emb", "keep", "masked"):
        assert qg[name].op == g[name].op and qg[name].dtype == g[name].dtype, name
    assert qg["keep"].dtype == "bool" and qg["conv"].dtype == "int32"   # the conv quantized, the mask untouched
    seen: list[dict[str, np.ndarray]] = [{}, {}]
    for graph, params, values in ((g, p, seen[0]), (qg, qp, seen[1])):
        evaluate(graph, params, feeds, observe=lambda name, v, values=values: values.__setitem__(name, v))
    for name in ("emb", "keep", "masked"):
        np.testing.assert_array_equal(seen[1][name], seen[0][name])
    want = run_reference(g, p, feeds)
    got = run_reference(qg, qp, feeds)
    assert np.corrcoef(got.ravel(), want.ravel())[0, 1] > 0.99


def test_quantize_clip_with_an_open_side():
    """ONNX's Clip without a max gives a_max=inf: quantize must keep that side open, not crash."""
    n = Net((1, 16, 6, 6), seed=10)
    y = n.conv(n.x, 16, name="c0", padding=1)
    y = n.op("clip", [y], name="clip_lo", a_min=-0.5, a_max=math.inf)
    y = n.conv(y, 16, name="c1", padding=1)
    y = n.op("clip", [y], name="clip_hi", a_min=-math.inf, a_max=0.25)
    g, p = n.finish(y)
    x = n.inputs(seed=11)
    qg, qp, _, _ = pipeline(g, p, x)
    f, q = run_reference(g, p, x), run_reference(qg, qp, x)
    assert q.max() <= 0.25 and f.max() <= 0.25 and q.min() < -0.5                # only the top is bounded
    assert qg["clip_lo"].attrs["a_max"] == math.inf and qg["clip_hi"].attrs["a_min"] == -math.inf
    assert np.abs(q - f).max() <= 0.1 * np.abs(f).max()


# ---- graph_pack: the region ------------------------------------------------------------------------------------

def chain3():
    n = Net((1, 16, 6, 6), seed=12)
    y = n.conv(n.x, 16, name="c0", padding=1, relu=True)
    y = n.conv(y, 16, name="c1", padding=1, relu=True)
    y = n.conv(y, 16, name="c2", padding=1, relu=True)
    g, p = n.finish(y)
    qg, qp = quantize(g, p, skip_conv_layers=[])
    return n, g, p, qg, qp


def test_region_selection():
    _, _, _, qg, _ = chain3()
    ops = [node.name for node in qg.ops()]

    def region(**kw):
        return graph_pack(qg, SIM, **kw).meta["region"]

    by_op = region(start_name="nn.max_pool2d", stop_name="nn.batch_flatten")
    assert by_op == ops[ops.index("start") + 1:ops.index("stop")]
    assert region(start_name="start", stop_name="stop") == by_op           # node names
    assert region(start_name=lambda node: node.name == "start",
                  stop_name=lambda node: node.op == "nn.batch_flatten") == by_op
    # the first conv after the start: c0; pinning VTA's operator index picks c1 instead
    r = region(start_name="nn.conv2d", stop_name="nn.conv2d")
    assert r == ops[ops.index("c0") + 1:ops.index("c1")]
    r = region(start_name="nn.conv2d", start_name_idx=ops.index("c1"), stop_name="stop")
    assert r == ops[ops.index("c1") + 1:ops.index("stop")]
    r = region(start_name="start", stop_name="nn.conv2d", stop_name_idx=ops.index("c2"))
    assert r == ops[ops.index("start") + 1:ops.index("c2")]
    assert "c0" in r and "c1" in r and "c2" not in r


def test_region_errors():
    _, _, _, qg, _ = chain3()
    ops = [node.name for node in qg.ops()]
    with pytest.raises(GraphError, match="no operator matches start_name='nn.avg_pool2d'"):
        graph_pack(qg, SIM, start_name="nn.avg_pool2d", stop_name="stop")
    # a typo: the Python message keeps the argument's name, and offers the closest op and node names
    with pytest.raises(GraphError, match=r"^no operator matches start_name='nn.conv2' \(did you mean 'nn.conv2d'\?\); "
                                         r"give an op name \(.*\), a node name, or a predicate$"):
        graph_pack(qg, SIM, start_name="nn.conv2", stop_name="stop")
    with pytest.raises(GraphError, match=r"^no operator matches stop_name='stopp' after the start \(did you mean "
                                         r"'stop'\?\)") as info:
        graph_pack(qg, SIM, start_name="start", stop_name="stopp")
    import pickle
    again = pickle.loads(pickle.dumps(info.value))   # as a worker process sends it back
    assert str(again) == str(info.value) and again.say("--stop").startswith("--stop stopp: no operator after the start")
    with pytest.raises(GraphError, match="no operator matches stop_name='start' after the start"):
        graph_pack(qg, SIM, start_name="c1", stop_name="start")            # the stop comes before the start
    def never(node):
        return False

    with pytest.raises(GraphError, match="no operator matches stop_name='never'"):
        graph_pack(qg, SIM, start_name="start", stop_name=never)
    with pytest.raises(GraphError, match=f"start_name_idx={ops.index('c1') + 1}"):
        graph_pack(qg, SIM, start_name="nn.conv2d", start_name_idx=ops.index("c1") + 1, stop_name="stop")
    with pytest.raises(GraphError, match="stop_name_idx"):
        graph_pack(qg, SIM, start_name="c1", stop_name="nn.conv2d", stop_name_idx=ops.index("c0"))
    with pytest.raises(GraphError, match="out of range"):
        graph_pack(qg, SIM, start_name="nn.conv2d", start_name_idx=999, stop_name="stop")


def test_graph_pack_needs_equal_blocks():
    with pytest.raises(ValueError, match="LOG_BLOCK_OUT"):         # the config has one LOG_BLOCK
        load_config("pynq", LOG_BLOCK_OUT=5)
    _, _, _, qg, _ = chain3()
    odd = types.SimpleNamespace(cfg=types.SimpleNamespace(BLOCK_IN=16, BLOCK_OUT=32))
    with pytest.raises(GraphError, match="BLOCK_IN == BLOCK_OUT"):
        graph_pack(qg, odd, start_name="start", stop_name="stop")


# ---- graph_pack: groups, layouts, report ---------------------------------------------------------------------

def test_groups_layouts_and_report():
    n, _, _, qg, qp = chain3()
    packed = graph_pack(qg, SIM, start_name="start", stop_name="stop")
    groups = packed.meta["groups"]
    assert sorted(groups) == ["c0", "c1", "c2"]
    for head, grp in groups.items():
        assert grp.kind == "conv" and grp.members[0] == head
        assert packed[grp.output].op == "cast" and packed[grp.output].dtype == "int8"
        assert [e[0] for e in grp.epilogue] == ["relu", "add", "shr", "clip"]
        assert packed[head].attrs["data_layout"] == "NCHW1n16c"
        assert packed[head].attrs["kernel_layout"] == "OIHW16o16i"
        assert packed[head].shape == (1, 1, 6, 6, 1, 16)
        assert packed[packed[head].inputs[1]].shape == (1, 1, 3, 3, 16, 16)
    assert packed["c1"].inputs[0] == groups["c0"].output     # groups chain in the packed layout
    assert packed.meta["config"] == SIM.fingerprint
    rows = report(packed)
    assert [r["name"] for r in offload_report(packed)] == [node.name for node in packed.ops()]
    for head, grp in groups.items():
        assert rows[head][0] == "accelerator" and "GEMM" in rows[head][1]
        assert f"{len(grp.members) - 1} op(s) fused" in rows[head][1]
        for m in grp.members[1:]:
            assert rows[m] == ("fused", f"into {head}")
    assert rows["start"] == ("CPU", "outside the offload region")
    assert rows["stop"] == ("CPU", "outside the offload region")
    assert rows["start.quantize"][0] == "CPU" and "float" in rows["start.quantize"][1]
    text = format_offload_report(packed)
    assert "3 accelerator group(s), 15 fused op(s)" in text and "c1.relu.cast" in text
    mod = build(packed, SIM, qp, cpu="numpy")
    check_exact(mod, qg, qp, n.inputs())


def test_cpu_reasons():
    n = Net((1, 32, 8, 8), seed=13)
    a = n.conv(n.x, 16, name="dil", padding=2, dilation=2)
    b_ = n.conv(n.x, 16, name="asym", padding=(0, 0, 2, 2))
    c = n.conv(n.x, 32, name="dw", padding=1, groups=32)
    d = n.conv(n.x, 32, name="g2", padding=1, groups=2)                # 16 channels per group: offloaded
    e = n.conv(n.x, 16, name="sig", k=1)
    e = n.op("sigmoid", [e], name="sigmoid")
    f = n.conv(n.x, 16, name="g16", padding=1, groups=16)              # 2 in, 1 out per group: half a block out
    y = n.op("concatenate", [a, b_, c, d, e, f], name="cat")
    g, p = n.finish(y)
    _, _, packed, _ = pipeline(g, p, n.inputs())
    rows = report(packed)
    assert rows["dil"][0] == "accelerator"                             # dilation: the conv template's
    assert rows["asym"][0] == "CPU" and "asymmetric padding (0, 0, 2, 2)" in rows["asym"][1]
    assert rows["dw"][0] == "accelerator"                              # depthwise: block-diagonal groups
    assert rows["g16"][0] == "CPU" and "groups=16" in rows["g16"][1] and "divide BLOCK" in rows["g16"][1]
    assert rows["g2"][0] == "accelerator"
    assert rows["sig"][0] == "accelerator"                             # requantized to int8 before the sigmoid
    assert rows["sigmoid"][0] == "CPU" and "float" in rows["sigmoid"][1]
    assert rows["cat"][0] == "CPU" and "concatenate" in rows["cat"][1]
    assert group_workload(packed, packed.meta["groups"]["g2"], SIM)["op"] == "group_conv2d"


def int_conv_two_readers():
    """Hand-built integer graph: one int32 conv result read by two requantization chains."""
    r = rng(14)
    b = GraphBuilder()
    x = b.input("x", (1, 16, 6, 6), "int8")
    s = b.op("nn.relu", [x], name="start")
    c = b.op("nn.conv2d", [s, b.const("w", r.integers(-8, 9, (16, 16, 3, 3)).astype(np.int8))], name="conv",
             padding=1, out_dtype="int32")
    outs = []
    for k in (7, 9):
        y = b.op("right_shift", [c, b.const(f"k{k}", np.int32(k))], name=f"shr{k}")
        y = b.op("clip", [y], name=f"clip{k}", a_min=-127, a_max=127)
        outs.append(b.op("cast", [y], name=f"out{k}", dtype="int8"))
    g, p = b.finish([b.op("concatenate", outs, name="stop")])
    return g, p, {"x": r.integers(-128, 128, (1, 16, 6, 6)).astype(np.int8)}


def test_int32_result_with_two_consumers_stays_on_the_cpu():
    g, p, x = int_conv_two_readers()
    packed = graph_pack(g, SIM, start_name="start", stop_name="stop")
    rows = report(packed)
    assert rows["conv"][0] == "CPU" and "read by 2 consumer(s)" in rows["conv"][1]
    assert rows["shr7"][0] == rows["shr9"][0] == "accelerator" and "ALU" in rows["shr7"][1]
    assert rows["out7"] == ("fused", "into shr7")
    check_exact(build(packed, SIM, p, cpu="numpy"), g, p, x)


# ---- build + run: bit-exact against run_reference -------------------------------------------------------------

def test_resnet_block_with_downsample():
    n, g, p = resnet_block(seed=15)
    qg, qp, packed, mod = pipeline(g, p, n.inputs(seed=16))
    groups = packed.meta["groups"]
    assert {"c1", "c2", "c3", "c4", "down"} <= set(groups)
    assert ("residual",) in [e[:1] for e in groups["c2"].epilogue]
    assert any(e[0] == "residual" for e in groups["c4"].epilogue) or any(
        e[0] == "residual" for e in groups["down"].epilogue)
    assert any(e[0] == "bias" for e in groups["c1"].epilogue)
    wl = {h: group_workload(packed, grp, SIM) for h, grp in groups.items()}
    assert wl["down"]["kernel_shape"] == (32, 16, 1, 1) and wl["down"]["strides"] == (2, 2)
    assert wl["c3"]["data_shape"] == (1, 16, 8, 8) and wl["c3"]["padding"] == (1, 1)
    assert len(accel_steps(mod)) == len(groups)
    # the residual inputs in int32 are packed as int8, then cast (packing the narrower type; the same values)
    casts = [nd for nd in packed if nd.op == "cast" and nd.dtype == "int32"]
    assert casts and all(packed[nd.inputs[0]].dtype == "int8" and len(nd.shape) == 6 for nd in casts)
    assert not [nd for nd in packed if nd.op == "layout_transform" and nd.attrs["src_layout"] == "NCHW"
                and packed[nd.inputs[0]].op == "cast"]
    # a second and a third input: nothing stale survives between runs
    first = mod.get_output(0).copy()
    check_exact(mod, qg, qp, n.inputs(seed=17))
    assert not np.array_equal(first, mod.get_output(0))
    mod.run(**n.inputs(seed=16))
    np.testing.assert_array_equal(mod.get_output(0), first)


def test_grouped_conv():
    n = Net((1, 32, 6, 6), seed=18)
    y = n.conv(n.x, 32, name="g", padding=1, groups=2, bias=True, relu=True)
    y = n.conv(y, 64, name="g4", k=1, groups=2, relu=True)
    g, p = n.finish(y)
    _, _, packed, mod = pipeline(g, p, n.inputs())
    assert sorted(packed.meta["groups"]) == ["g", "g4"]
    assert {s.workload["op"] for s in accel_steps(mod)} == {"group_conv2d"}
    assert accel_steps(mod)[0].workload["groups"] == 2


def test_conv2d_transpose():
    n = Net((1, 16, 4, 4), seed=19)
    y = n.conv(n.x, 16, k=4, name="up", op="nn.conv2d_transpose", strides=2, padding=1, relu=True, gain=0.5)
    y = n.conv(y, 20, k=3, name="up2", op="nn.conv2d_transpose", strides=2, padding=1, output_padding=1)
    g, p = n.finish(y)
    qg, _, packed, mod = pipeline(g, p, n.inputs())
    rows = report(packed)
    assert rows["up"][0] == "accelerator"
    assert rows["up2"][0] == "CPU" and "output_padding (1, 1)" in rows["up2"][1]
    wl = accel_steps(mod)[0].workload
    assert wl["op"] == "conv2d_transpose" and wl["kernel_shape"] == (16, 16, 4, 4) and wl["strides"] == (2, 2)
    assert qg["up"].shape == (1, 16, 8, 8) and qg["up2"].shape == (1, 20, 16, 16)


def test_dense_in_the_region():
    n = Net((1, 16, 4, 4), seed=20)
    y = n.conv(n.x, 16, name="c", padding=1, relu=True)
    f = n.op("nn.batch_flatten", [y], name="flat")
    d = n.op("nn.dense", [f, n.b.const("fc.w", he(n.r, 20, 256))], name="fc")
    d = n.op("nn.bias_add", [d, n.b.const("fc.b", n.r.normal(0, 0.1, 20).astype(np.float32))], name="fc.bias")
    d = n.op("nn.relu", [d], name="fc.relu")
    g, p = n.b.finish([n.op("nn.softmax", [d], name="stop")])
    x = n.inputs()
    _, _, packed, _ = pipeline(g, p, x, qkw={"skip_dense_layer": False})
    grp = packed.meta["groups"]["fc"]
    assert [e[0] for e in grp.epilogue][:2] == ["bias", "relu"]
    assert packed["fc"].attrs["data_layout"] == "NC1n16c" and packed["fc"].shape == (1, 2, 1, 16)
    wl = group_workload(packed, grp, SIM)
    assert wl["op"] == "dense" and wl["kernel_shape"] == (32, 256) and wl["bias"]
    # VTA's default keeps the dense layer in float on the CPU
    _, _, packed_f, _ = pipeline(g, p, x)
    rows = report(packed_f)
    assert rows["fc"][0] == "CPU" and "float" in rows["fc"][1] and "fc" not in packed_f.meta["groups"]


def alu_graph(kind: str, c: int = 20):
    """Hand-built integer graph whose int32 element-wise chain ends in an int8 cast: an ALU-only group."""
    r = rng(21)
    b = GraphBuilder()
    x = b.input("x", (1, c, 4, 5), "int8")
    y = b.input("y", (1, c, 4, 5), "int8")
    s = b.op("nn.relu", [x], name="start")
    xi = b.op("cast", [s], name="xi", dtype="int32")
    yi = b.op("cast", [y], name="yi", dtype="int32")
    if kind == "add":
        t = b.op("add", [xi, yi], name="head")
    elif kind == "maximum":
        t = b.op("maximum", [xi, yi], name="head")
    elif kind == "multiply_per_channel":
        t = b.op("multiply", [xi, b.const("k", r.integers(-3, 4, (c, 1, 1)).astype(np.int32))], name="head")
    elif kind == "add_big_scalar":                                   # beyond the ALU's 16-bit immediate
        t = b.op("add", [xi, b.const("k", np.int32(100_000))], name="head")
    else:
        t = b.op("nn.relu", [b.op("subtract", [xi, yi], name="diff")], name="head")
    t = b.op("right_shift", [t, b.const("sh", np.int32(1))], name="shr")
    t = b.op("add", [t, b.const("k2", np.int32(70_000))], name="add2")    # split into 16-bit immediates
    k3 = -70_005 - (50_000 if kind == "add_big_scalar" else 0)
    t = b.op("add", [t, b.const("k3", np.int32(k3))], name="add3")
    t = b.op("clip", [t], name="clip", a_min=-127, a_max=127)
    t = b.op("cast", [t], name="out8", dtype="int8")
    g, p = b.finish([b.op("cast", [t], name="stop", dtype="float32")])
    inputs = {"x": r.integers(-128, 128, (1, c, 4, 5)).astype(np.int8),
              "y": r.integers(-128, 128, (1, c, 4, 5)).astype(np.int8)}
    return g, p, inputs


@pytest.mark.parametrize("kind", ["add", "maximum", "multiply_per_channel", "add_big_scalar", "relu"])
def test_alu_only_group(kind):
    g, p, inputs = alu_graph(kind)
    packed = graph_pack(g, SIM, start_name="start", stop_name="stop")
    grp = packed.meta["groups"]["head"]
    assert grp.kind == "alu" and grp.members == ["head", "shr", "add2", "add3", "clip", "out8"]
    rows = report(packed)
    assert rows["head"][0] == "accelerator" and "ALU" in rows["head"][1]
    assert rows["xi"][0] == "CPU" and "host cast" in rows["xi"][1]
    assert packed["head"].shape == (1, 2, 4, 5, 1, 16)                 # 20 channels padded to 32
    mod = build(packed, SIM, p, cpu="numpy")
    check_exact(mod, g, p, inputs)
    assert mod.cycles > 0 and accel_steps(mod)[0].workload["op"] == {"multiply_per_channel": "multiply",
                                                                      "add_big_scalar": "add"}.get(kind, kind)


def test_alu_head_clip_beyond_the_immediate_range():
    """A clip whose bounds do not fit the ALU's 16-bit immediates cannot head an accelerator group."""
    r = rng(22)
    b = GraphBuilder()
    x = b.input("x", (1, 16, 4, 4), "int8")
    s = b.op("nn.relu", [x], name="start")
    t = b.op("multiply", [b.op("cast", [s], name="xi", dtype="int32"), b.const("k", np.int32(700))], name="mul")
    t = b.op("clip", [t], name="relu6", a_min=0, a_max=49152)         # what a calibrated relu6 can give
    t = b.op("right_shift", [t, b.const("sh", np.int32(9))], name="shr")
    t = b.op("clip", [t], name="clip", a_min=-127, a_max=127)
    t = b.op("cast", [t], name="out8", dtype="int8")
    g, p = b.finish([b.op("cast", [t], name="stop", dtype="float32")])
    packed = graph_pack(g, SIM, start_name="start", stop_name="stop")
    assert "relu6" not in packed.meta["groups"]
    check_exact(build(packed, SIM, p, cpu="numpy"), g, p, {"x": r.integers(-128, 128, (1, 16, 4, 4)).astype(np.int8)})


def test_requantization_with_a_large_rounding_constant():
    """A CPU conv (asymmetric padding) with tiny weights: its requantization shifts by more than 16 bits, so the
    ALU group that does it must add a rounding constant beyond the 16-bit immediate."""
    n = Net((1, 16, 6, 6), seed=23)
    w = n.r.uniform(2.5e-4, 5e-4, (16, 16, 3, 3)).astype(np.float32)         # e_w = -17: shift by 17 bits
    y = n.op("nn.conv2d", [n.x, n.b.const("dil.w", w)], name="dil", padding=(2, 2, 1, 1))
    g, p = n.finish(y)
    x = {"data": np.abs(n.inputs()["data"]) + 0.25}
    qg, qp, packed, mod = pipeline(g, p, x, qkw={"global_scale": 0.5})
    assert np.any(mod.get_output(0) != 0)
    rnd = [node for node in qg.ops() if node.name.endswith("requant.round_add")]
    assert rnd and int(qp[rnd[0].inputs[1]]) > (1 << 15)
    assert any(grp.kind == "alu" for grp in packed.meta["groups"].values())


@pytest.mark.parametrize("cin, cout", [(3, 20), (5, 20), (20, 5)])
def test_entry_channel_padding(cin, cout):
    n = Net((1, cin, 6, 6), seed=24)
    y = n.conv(n.x, cout, name="c0", padding=1, bias=True, relu=True)
    y = n.conv(y, 16, name="c1", padding=1)
    g, p = n.finish(y)
    _, _, packed, mod = pipeline(g, p, n.inputs())
    assert sorted(packed.meta["groups"]) == ["c0", "c1"]
    assert packed["c0"].shape == (1, -(-cout // 16), 6, 6, 1, 16)
    entry = packed[packed["c0"].inputs[0]]
    assert entry.op == "layout_transform" and entry.shape == (1, -(-cin // 16), 6, 6, 1, 16)
    wl = accel_steps(mod)[0].workload
    assert wl["data_shape"] == (1, 16 * -(-cin // 16), 6, 6)
    assert wl["kernel_shape"] == (16 * -(-cout // 16), 16 * -(-cin // 16), 3, 3)


def test_batch2_on_the_batch4_preset():
    cfg = load_config("batch4")
    assert cfg.BATCH == 4
    n = Net((2, 16, 6, 6), seed=25)
    y = n.conv(n.x, 20, name="c0", padding=1, relu=True)
    y = n.conv(y, 16, name="c1", padding=1)
    a = n.op("add", [y, n.x], name="res")
    g, p = n.finish(a)
    _, _, packed, mod = pipeline(g, p, n.inputs(), cfg=cfg)
    assert packed["c0"].attrs["data_layout"] == "NCHW4n16c" and packed["c0"].shape == (1, 2, 6, 6, 4, 16)
    assert accel_steps(mod)[0].workload["data_shape"] == (4, 16, 6, 6)
    assert mod.get_output(0).shape == (2, 16 * 36)


def test_block32_preset():
    cfg = load_config("block32")
    assert cfg.BLOCK_IN == cfg.BLOCK_OUT == 32
    n, g, p = resnet_block(seed=26)
    _, _, packed, mod = pipeline(g, p, n.inputs(), cfg=cfg)
    assert packed["c1"].attrs["kernel_layout"] == "OIHW32o32i" and packed["c1"].shape == (1, 1, 8, 8, 1, 32)
    assert len(accel_steps(mod)) == len(packed.meta["groups"]) >= 5


def test_compute_false_profile_and_benchmark():
    n, g, p = resnet_block(seed=27)
    x = n.inputs()
    qg, qp, packed, mod = pipeline(g, p, x)
    cycles, stats = mod.cycles, mod.stats
    assert cycles > 0 and cycles == sum(s.cycles for s in [r.stats for r in mod.records if r.stats])
    mod.run(compute=False, **x)
    assert mod.cycles == cycles
    assert mod.stats.gemm_counter == stats.gemm_counter and mod.stats.out_store_nbytes == stats.out_store_nbytes
    check_exact(mod, qg, qp, x)
    rows = mod.profile()
    heads = set(packed.meta["groups"])
    acc = [r for r in rows if r["where"] == "accelerator"]
    assert {r["name"] for r in acc} == heads
    for r in acc:
        assert r["cycles"] > 0 and r["dram_bytes"] > 0 and r["time_ms"] > 0 and r["gops"] > 0
        assert r["fused"] == len(packed.meta["groups"][r["name"]].members) - 1
    assert sum(r["cycles"] for r in acc) == cycles
    cpu = [r for r in rows if r["where"] == "cpu"]
    assert cpu and all(r["host_ms"] >= 0 and "cycles" not in r for r in cpu)
    assert {"start", "stop"} <= {r["name"] for r in cpu}
    text = mod.format_profile()
    assert "c1" in text and f"total: {cycles:,} cycles" in text
    bench = mod.benchmark(number=1, repeat=2, **x)
    assert set(bench) == {"mean_ms", "std_ms", "cycles", "accelerator_ms", "host_ms"}
    assert bench["cycles"] == cycles and bench["mean_ms"] > 0
    assert bench["accelerator_ms"] == pytest.approx(cycles / (SIM.CLOCK_MHZ * 1e3))
    calls = []
    run = mod.run
    mod.run = lambda **kw: calls.append(kw) or run(**kw)
    mod.benchmark(number=2, repeat=3, **x)          # one untimed warm-up run (the default), then 2 x 3 timed
    assert len(calls) == 7 and all(c.keys() == x.keys() for c in calls)
    mod.benchmark(number=1, repeat=1, warmup=0, **x)
    assert len(calls) == 8
    for bad in ({"number": 0}, {"repeat": -1}, {"warmup": -1}, {"number": 1.5}, {"repeat": True}):
        with pytest.raises(ValueError, match=f"benchmark: {next(iter(bad))}="):
            mod.benchmark(**bad, **x)
    assert len(calls) == 8                          # refused before running anything


def test_schedules_change_the_config():
    n = Net((1, 16, 8, 8), seed=28)
    y = n.conv(n.x, 32, name="c0", padding=1, bias=True, relu=True)
    g, p = n.finish(y)
    x = n.inputs()
    qg, qp, packed, mod = pipeline(g, p, x)
    step = accel_steps(mod)[0]
    key = workload_key(group_workload(packed, packed.meta["groups"]["c0"], SIM))
    assert key == workload_key(step.workload)
    default, default_cycles = step.op.config, mod.cycles
    tried = 0
    for config in step.op.space:
        if config == default:
            continue
        try:
            other = build(packed, SIM, qp, schedules={key: config}, cpu="numpy")
        except ScheduleError:
            continue                                   # a config the template refuses for this workload
        tried += 1
        check_exact(other, qg, qp, x)
        assert accel_steps(other)[0].op.config == {k: list(v) if isinstance(v, tuple) else v
                                                   for k, v in config.items()}
        if other.cycles != default_cycles:
            break
    else:
        pytest.fail(f"no other valid config changes the cycles ({tried} tried)")
    # the same choice through a function of the workload dict; an unknown key changes nothing
    by_fn = build(packed, SIM, qp, schedules=lambda wl: config if workload_key(wl) == key else None, cpu="numpy")
    check_exact(by_fn, qg, qp, x)
    assert by_fn.cycles == other.cycles
    unknown = build(packed, SIM, qp, schedules={"{}": config}, cpu="numpy")
    check_exact(unknown, qg, qp, x)
    assert unknown.cycles == default_cycles


def test_module_input_output_errors():
    n, g, p = resnet_block(seed=29)
    qg, qp = quantize(g, p, skip_conv_layers=[])
    packed = graph_pack(qg, SIM, start_name="start", stop_name="stop")
    mod = build(packed, SIM, qp, cpu="numpy")
    with pytest.raises(GraphError, match="no outputs yet: call run"):
        mod.get_output(0)
    with pytest.raises(GraphError, match="no run to profile"):
        mod.profile()
    with pytest.raises(GraphError, match="unknown input 'image'"):
        mod.set_input("image", np.zeros((1, 16, 8, 8), np.float32))
    with pytest.raises(GraphError, match=r"expected shape \(1, 16, 8, 8\)"):
        mod.set_input("data", np.zeros((1, 16, 8, 9), np.float32))
        mod.run()
    with pytest.raises(GraphError, match="expected dtype float32"):
        mod.run(data=np.zeros((1, 16, 8, 8), np.int8))
    mod.set_input(data=n.inputs()["data"])
    mod.run()
    assert mod.get_num_outputs() == 1
    with pytest.raises(GraphError, match="output index 1 out of range: the graph has 1 output"):
        mod.get_output(1)
    with pytest.raises(GraphError, match="out of range"):
        mod.get_output(-1)
    for index in ("0", None, 0.5, True):
        with pytest.raises(GraphError, match=r"output index .* out of range"):
            mod.get_output(index)
    first = mod.get_output(0).copy()
    with pytest.raises(GraphError, match=r"expected shape \(1, 16, 8, 8\)"):   # a refused input is not kept ...
        mod.run(data=np.zeros((1, 16, 8, 9), np.float32))
    mod.run()                                                              # ... so this runs the last good one
    np.testing.assert_array_equal(mod.get_output(0), first)
    with pytest.raises(GraphError, match="give the input's name"):
        mod.set_input(None, n.inputs()["data"])
    mod.device.copy_out = None   # a run that fails part way (a host step reading a group's output) leaves no
    # earlier run's outputs behind
    with pytest.raises(TypeError):
        mod.run()
    with pytest.raises(GraphError, match="no outputs yet"):
        mod.get_output(0)
    with pytest.raises(ValueError, match="cpu='gpu'"):
        build(packed, SIM, qp, cpu="gpu")
    for bad, match in (({"graph": None}, "graph: a .packed. Graph"), ({"params": None}, "params: a mapping"),
                       ({"schedules": "abc"}, "schedules: a mapping of workload keys"),
                       ({"host_schedules": [1, 2]}, "host_schedules: a mapping of workload keys")):
        with pytest.raises(TypeError, match=match):
            build(**{"graph": packed, "env": SIM, "params": qp, **bad})


def test_build_errors():
    _, g, p = resnet_block(seed=30)
    qg, qp = quantize(g, p, skip_conv_layers=[])
    packed = graph_pack(qg, SIM, start_name="start", stop_name="stop")
    missing = dict(qp)
    del missing["c2.w.q"]
    with pytest.raises(GraphError, match="no value for constant 'c2.w.q'"):
        build(packed, SIM, missing)
    wrong = {**qp, "c2.w.q": qp["c2.w.q"].astype(np.int32)}
    with pytest.raises(GraphError, match="param 'c2.w.q'"):
        build(packed, SIM, wrong)
    with pytest.raises(GraphError, match="packed for another hardware config"):
        build(packed, load_config("batch4"), qp)
    with pytest.raises(GraphError, match="packed for another hardware config"):
        build(graph_pack(qg, load_config("block32"), start_name="start", stop_name="stop"), SIM, qp)


def test_unpacked_graphs_run_on_the_host():
    n, g, p = resnet_block(seed=31)
    x = n.inputs()
    qg, qp = quantize(g, p, skip_conv_layers=[])
    for graph, params in ((qg, qp), (g, p)):
        mod = build(graph, SIM, params, cpu="numpy")
        assert all(isinstance(s, HostStep) for s in mod.steps)
        check_exact(mod, graph, params, x)
        assert mod.cycles == 0


@needs("llvmlite")
def test_host_conv_bias_relu_runs_as_one_jit_step():
    """On the host, a float conv2d whose only reader is a channel bias_add whose only reader is a relu runs as one
    JIT kernel with both as its epilogue (the profile's fused column counts them), with the bits of the three
    ops run apart; a conv whose output is also read elsewhere, or is a graph output, is not fused."""
    n = Net((1, 3, 20, 20), seed=33)
    stem = n.conv(n.x, 16, k=7, name="stem", strides=2, padding=3, bias=True, relu=True)
    two = n.conv(stem, 16, name="two", padding=1, bias=True)         # "two" is read by "two.bias" and by `side`
    side = n.op("nn.max_pool2d", ["two"], name="side", pool_size=2)
    y = n.op("nn.relu", [two], name="two.relu")
    out = n.conv(y, 16, name="out", padding=1)                       # read by "out.relu", and a graph output
    g, p = n.finish(n.op("nn.relu", [out], name="out.relu"), side, out)
    x = n.inputs()
    mod = build(g, SIM, p, cpu="auto")
    steps = {s.name: s for s in mod.steps}
    assert steps["stem"].fused == ["stem.bias", "stem.relu"] and steps["stem"].backend == "jit"
    assert not steps["two"].fused and not steps["out"].fused and "stem.bias" not in steps
    check_exact(mod, g, p, x)
    check_exact(mod, g, p, n.inputs(seed=2))    # twice in one module
    assert {r["name"]: r["fused"] for r in mod.profile()}["stem"] == 2
    apart = build(g, SIM, p, cpu="numpy")
    assert all(not s.fused for s in apart.steps)
    check_exact(apart, g, p, x)


@needs("llvmlite")
@pytest.mark.parametrize("channels,fused", [(16, 2), (8, 1)])
def test_host_pool_quantize_pack_runs_as_one_jit_step(channels, fused):
    """The region's start, a float max_pool2d whose only reader is the quantize whose only reader packs it (ResNet's
    stem tail), runs as one JIT kernel storing packed int8, with the bits of the three ops run apart (NaN and
    infinities in the input included); with channels that leave a partial block only the quantize is fused."""
    n = Net((1, channels, 10, 10), seed=34)
    y = n.conv(n.x, 16, name="c1", padding=1, relu=True)
    g, p = n.finish(n.conv(y, 16, name="c2", padding=1))
    qg, qp = quantize(g, p, skip_conv_layers=[])
    packed = graph_pack(qg, SIM, start_name="start", stop_name="stop")
    x = n.inputs()
    x["data"].flat[:3] = np.nan, np.inf, -np.inf
    mod = build(packed, SIM, qp, cpu="auto")
    steps = {s.name: s for s in mod.steps}
    assert steps["start"].backend == "jit" and len(steps["start"].fused) == fused
    assert steps["start"].fused[0] == "start.quantize" and "start.quantize" not in steps
    with np.errstate(invalid="ignore"):   # numpy's reference casts NaN
        check_exact(mod, qg, qp, x)
        check_exact(mod, qg, qp, n.inputs(seed=2))    # twice in one module
    assert {r["name"]: r["fused"] for r in mod.profile()}["start"] == fused
    apart = build(packed, SIM, qp, cpu="numpy")
    assert all(not s.fused for s in apart.steps if not isinstance(s, AccelStep))
    with np.errstate(invalid="ignore"):
        check_exact(apart, qg, qp, x)


def test_two_outputs_and_the_jit_host_backend():
    n = Net((1, 16, 6, 6), seed=32)
    y = n.conv(n.x, 16, name="c0", padding=1, relu=True)
    side = n.op("nn.avg_pool2d", [y], name="side", pool_size=3, strides=1, padding=1)
    y = n.conv(y, 16, name="c1", padding=1)
    g, p = n.finish(y, side)
    x = n.inputs()
    qg, qp, packed, mod = pipeline(g, p, x)
    assert mod.get_num_outputs() == 2 and mod.get_output(1).shape == (1, 16, 6, 6)
    auto = build(packed, SIM, qp, cpu="auto")                # llvmlite kernels where available: same bits
    check_exact(auto, qg, qp, x)
    assert auto.cycles == mod.cycles


def test_one_channel_bias():
    """A bias of a single output channel is still a per-channel bias of the accelerator group."""
    for op, attrs in (("nn.conv2d", {"padding": 1}), ("nn.conv2d_transpose", {"strides": 2, "padding": 1})):
        n = Net((2, 16, 5, 5), seed=33)
        y = n.conv(n.x, 1, name="c0", op=op, bias=True, relu=True, **attrs)
        g, p = n.finish(n.conv(y, 16, k=1, name="c1"))
        _, _, packed, mod = pipeline(g, p, n.inputs())
        assert packed.meta["groups"]["c0"].epilogue[0][0] == "bias"
        assert len(accel_steps(mod)) == 2 and not mod.fallbacks


def test_a_group_the_template_refuses_runs_on_the_host():
    """graph_pack cannot see every template limit: a 6x3 input, 5x5 kernel, stride 3 leaves 2 output
    positions, fewer than VTA's GEMM pipeline needs. build runs that group's ops on the host instead."""
    n = Net((1, 12, 6, 3), seed=34)
    y = n.conv(n.x, 16, k=5, name="tiny", strides=3, padding=2, bias=True, relu=True)
    g, p = n.finish(n.conv(y, 16, k=1, name="after"))
    with pytest.warns(HostFallbackWarning, match="accelerator group 'tiny' .* runs on the host"):
        _, qp, packed, mod = pipeline(g, p, n.inputs(), fallback="warn")
    assert "tiny" in packed.meta["groups"] and report(packed)["tiny"][0] == "accelerator"
    assert set(mod.fallbacks) == {"tiny"} and "no config of this template fits" in mod.fallbacks["tiny"]
    with pytest.raises(HostFallbackError, match="'tiny'.*no config of this template fits"):
        build(packed, SIM, qp, cpu="numpy", fallback="error")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert set(build(packed, SIM, qp, cpu="numpy", fallback="allow").fallbacks) == {"tiny"}
    rows = {r["name"]: r for r in mod.profile()}
    assert rows["tiny"]["where"] == "cpu" and rows["after"]["where"] == "accelerator"
    key = workload_key(group_workload(packed, packed.meta["groups"]["tiny"], SIM))
    config = next(iter(accel_steps(build(packed, SIM, qp, cpu="numpy", fallback="allow"))[0].op.space))  # "after"
    with pytest.raises(ScheduleError, match="accelerator group 'tiny'"):   # a config given for it must work
        build(packed, SIM, qp, schedules={key: config}, cpu="numpy")


def test_builds_and_ops_on_a_shared_device_give_its_memory_back():
    """A board, a remote session or a simulator used by several builds outlives each module: a module and an op
    hold that device's memory until closed (then refuse to run), and a group the template refuses or a build
    that fails leaves nothing on it. Each build there used to keep ~30 MB of ResNet-18's for good."""
    from vta.device import SimDevice
    from vta.templates import compile_op

    n, g, p = resnet_block()
    _, qp, packed, own = pipeline(g, p, n.inputs())
    want = own.get_output(0)
    device = SimDevice(SIM)
    for _ in range(3):
        with build(packed, SIM, qp, cpu="numpy", device=device) as mod:
            mod.run(**n.inputs())
            assert np.array_equal(mod.get_output(0), want) and device.sim.regions()
        assert device.sim.regions() == []
    with pytest.raises(GraphError, match="closed"):
        mod.run(**n.inputs())
    op = compile_op("conv2d", SIM, data_shape=(1, 16, 8, 8), kernel_shape=(16, 16, 3, 3), padding=(1, 1),
                    device=device)
    op.close()
    op.close()
    assert device.sim.regions() == []
    with pytest.raises(ScheduleError, match="closed"):
        op.time()
    with pytest.raises(ScheduleError, match="closed"):   # not "missing inputs": what is wrong is that it is closed
        op.run()

    n = Net((1, 12, 6, 3), seed=34)   # "tiny": a group the template refuses (as in the test above)
    y = n.conv(n.x, 16, k=5, name="tiny", strides=3, padding=2, bias=True, relu=True)
    g, p = n.finish(n.conv(y, 16, k=1, name="after"))
    qg, qp = quantize(g, p, skip_conv_layers=[])
    packed = graph_pack(qg, SIM, start_name="start", stop_name="stop")
    mod = build(packed, SIM, qp, cpu="numpy", fallback="allow", device=device)
    assert set(mod.fallbacks) == {"tiny"}
    mod.close()
    assert device.sim.regions() == []
    key = workload_key(group_workload(packed, packed.meta["groups"]["tiny"], SIM))
    config = next(iter(accel_steps(build(packed, SIM, qp, cpu="numpy", fallback="allow"))[0].op.space))
    with pytest.raises(ScheduleError, match="accelerator group 'tiny'"):
        build(packed, SIM, qp, schedules={key: config}, cpu="numpy", device=device)
    assert device.sim.regions() == []


def test_a_closed_module_refuses_to_check_its_steps():
    """check_steps reads each group's buffers back from the device: after close they are freed (another build on
    the shared device may hold them), so it refuses as run does instead of comparing someone else's memory."""
    from vta.device import SimDevice

    n, g, p = resnet_block()
    _, qp, packed, _ = pipeline(g, p, n.inputs())
    device = SimDevice(SIM)
    mod = build(packed, SIM, qp, cpu="numpy", device=device)
    mod.run(**n.inputs())
    mod.close()
    build(packed, SIM, qp, cpu="numpy", device=device).run(**n.inputs())   # now in the memory mod held
    with pytest.raises(GraphError, match="closed"):
        mod.check_steps()


def _dropping(cfg, allocs: int):
    """A device lost as a remote board is (vta.rpc.client.RemoteDevice): the call that meets the broken connection
    fails with why, every call after it with 'the session is closed'. ``allocs``: allocations that succeed first."""
    from vta.device import SimDevice

    class Dropping(SimDevice):
        state = "up"

        def _check(self, name):
            if self.state == "lost":
                raise ConnectionError(f"{name}: the session is closed")
            if self.state == "dropping":
                self.state = "lost"
                raise ConnectionResetError(f"{name} failed: the connection was reset by the peer")

        def alloc(self, nbytes):
            nonlocal allocs
            if allocs == 0 and self.state == "up":
                self.state = "dropping"
            allocs -= 1
            self._check("alloc")
            return super().alloc(nbytes)

        def free(self, buf):
            self._check("free")
            super().free(buf)

        def copy_in(self, *args, **kwargs):
            self._check("copy_in")
            super().copy_in(*args, **kwargs)

        def run(self, *args, **kwargs):
            self._check("run")
            return super().run(*args, **kwargs)

    return Dropping(cfg)


def test_a_device_lost_midway_is_reported_not_the_cleanup_after_it():
    """A board lost in a build (or in a with-block's run, or an op's compile) must say why; freeing what was
    allocated on it then fails too ('the session is closed'), and that must not replace the cause."""
    from vta.templates import compile_op

    n, g, p = resnet_block()
    _, qp, packed, _ = pipeline(g, p, n.inputs())
    for allocs in (1, 5, 9):   # in the first group, in a later one
        with pytest.raises(ConnectionResetError, match="reset by the peer"):
            build(packed, SIM, qp, cpu="numpy", device=_dropping(SIM, allocs))
    device = _dropping(SIM, 10**6)
    with pytest.raises(ConnectionResetError, match="reset by the peer"), \
            build(packed, SIM, qp, cpu="numpy", device=device) as mod:
        device.state = "dropping"
        mod.run(**n.inputs())
    for allocs in (1, 3):   # an operand buffer, the micro-op buffer
        with pytest.raises(ConnectionResetError, match="reset by the peer"):
            compile_op("conv2d", SIM, data_shape=(1, 16, 8, 8), kernel_shape=(16, 16, 3, 3), padding=(1, 1),
                       device=_dropping(SIM, allocs))
    device = _dropping(SIM, 10**6)
    op = compile_op("conv2d", SIM, data_shape=(1, 16, 8, 8), kernel_shape=(16, 16, 3, 3), padding=(1, 1),
                    device=device)
    with pytest.raises(ConnectionResetError, match="reset by the peer"), op:
        device.state = "dropping"
        op.time()


def test_an_immediate_beyond_16_bits_in_a_chain():
    r = rng(35)
    b = GraphBuilder()
    x = b.input("x", (1, 16, 4, 4), "int8")
    s = b.op("nn.relu", [x], name="start")
    c = b.op("nn.conv2d", [s, b.const("w", r.integers(-8, 9, (16, 16, 1, 1)).astype(np.int8))], name="conv",
             out_dtype="int32")
    t = b.op("multiply", [c, b.const("big", np.int32(100_000))], name="mul")     # no 16-bit form
    t = b.op("right_shift", [t, b.const("sh", np.int32(16))], name="shr")
    t = b.op("clip", [t], name="clip", a_min=-127, a_max=127)
    t = b.op("cast", [t], name="out8", dtype="int8")
    g, p = b.finish([b.op("cast", [t], name="stop", dtype="float32")])
    packed = graph_pack(g, SIM, start_name="start", stop_name="stop")
    with pytest.warns(HostFallbackWarning, match="16-bit ALU immediate"):
        mod = build(packed, SIM, p, cpu="numpy")
    out = check_exact(mod, g, p, {"x": r.integers(-128, 128, (1, 16, 4, 4)).astype(np.int8)})[0]
    assert "conv" in mod.fallbacks and "16-bit ALU immediate" in mod.fallbacks["conv"]
    assert np.abs(out).max() > 10 and np.abs(out).max() <= 127


def test_a_packed_graph_without_its_plan_runs_every_head_on_the_host():
    """Without graph.meta the packed convolutions, transposed convolutions and dense layers run on the host
    in the packed layout (the build's fallback path): still bit-exact."""
    cfg = load_config("batch4")
    n = Net((2, 20, 5, 5), seed=36)
    y = n.conv(n.x, 16, k=4, name="up", op="nn.conv2d_transpose", strides=2, padding=1, relu=True, gain=0.5)
    y = n.conv(y, 32, name="g", padding=1, groups=2, bias=True, relu=True)
    f = n.op("nn.batch_flatten", [n.conv(y, 8, name="c", strides=2)], name="flat")
    d = n.op("nn.dense", [f, n.b.const("fc.w", he(n.r, 20, 128))], name="fc")
    g, p = n.b.finish([n.op("nn.softmax", [d], name="stop")])
    qg, qp = quantize(g, p, skip_conv_layers=[], skip_dense_layer=False)
    packed = graph_pack(qg, cfg, start_name="start", stop_name="stop")
    assert len(packed.meta["groups"]) == 4
    planless = packed.copy()
    planless.meta = {}
    mod = build(planless, cfg, qp, cpu="numpy")
    assert not accel_steps(mod)
    assert {s.op for s in mod.steps if s.name in ("up", "g", "c", "fc")} == {"nn.conv2d", "nn.conv2d_transpose",
                                                                            "nn.dense"}
    check_exact(mod, qg, qp, n.inputs())
    check_exact(build(packed, cfg, qp, cpu="numpy"), qg, qp, n.inputs())


@pytest.mark.parametrize("preset, batch", [("sim", 2), ("batch4", 5)])
def test_host_ops_between_accelerator_groups(preset, batch):
    cfg = load_config(preset)
    n = Net((batch, 20, 6, 6), seed=37)
    y = n.conv(n.x, 16, k=4, name="up", op="nn.conv2d_transpose", strides=2, padding=1, relu=True, gain=0.5)
    y = n.op("nn.max_pool2d", [y], name="mp", pool_size=2)                     # int8 max pool on the host
    y = n.conv(y, 48, name="c", padding=1, bias=True, relu=True)
    u = n.op("nn.upsampling", [n.conv(y, 16, k=1, name="c1", strides=2)], name="ups")
    m = n.op("multiply", [u, n.conv(y, 16, k=1, name="c2")], name="mul")      # int32 x int32: an ALU group
    cat = n.op("concatenate", [m, y], name="cat")
    pad = n.op("nn.pad", [cat], name="pad", pad_width=((0, 0), (0, 0), (1, 1), (1, 1)))
    g, p = n.finish(n.conv(pad, 8, name="c3", strides=2))
    qg, _, packed, _ = pipeline(g, p, n.inputs(), cfg=cfg)
    rows = report(packed)
    if cfg.CAPABILITIES == "fsim":
        assert rows["mul"][0] == "accelerator" and "ALU" in rows["mul"][1]
    else:   # VTA's HLS hardware has no ALU MUL: the multiply stays on the CPU, and the report says why
        assert rows["mul"][0] == "CPU" and "no ALU MUL" in rows["mul"][1], rows["mul"]
    assert {"up", "c", "c1", "c3"} <= set(packed.meta["groups"])
    for name in ("mp", "ups", "cat", "pad"):
        assert rows[name][0] == "CPU" and qg[name].dtype == "int8"


def test_check_steps_compares_each_group_with_its_templates_reference():
    """Build's results are checkable step by step: after a run, every accelerator group's output equals its
    template's numpy reference on the very data it read; a corrupted output is named with its group."""
    n, g, p = resnet_block(seed=21)
    _, qp, packed, mod = pipeline(g, p, n.inputs())
    groups = [s for s in mod.steps if isinstance(s, AccelStep)]
    assert len(groups) >= 4 and {s.group.kind for s in groups} == {"conv"}
    for _ in range(2):
        assert mod.check_steps() == {s.name: None for s in groups}
    victim = groups[2]
    out = victim.op.buffers.out
    raw = mod.device.copy_out(out)
    raw[0] ^= 0x5A
    mod.device.copy_in(out, raw)
    problems = {k: v for k, v in mod.check_steps().items() if v}
    # the corrupted group is reported first; groups that read its output afterwards disagree too
    assert next(iter(problems)) == victim.name and "differ from the numpy reference" in problems[victim.name]
    assert set(problems) <= {s.name for s in groups[2:]}
    with pytest.raises(GraphError, match="call run"):
        build(packed, SIM, qp, cpu="numpy").check_steps()


def test_the_layer_table_shows_long_layer_names_whole_up_to_its_width():
    """ONNX node names run long: shown whole up to build.NAME_WIDTH characters (the column widens to fit), a longer
    one by its start and end, so two layers that differ only at the end stay apart."""
    from types import SimpleNamespace

    from graph_pack.build import NAME_WIDTH, GraphModule

    medium = "/features/features.10/Conv_output_0_quantized_and_packed"   # 56 characters
    long_a, long_b = "/m" * 40 + "/a", "/m" * 40 + "/b"
    rows = [{"name": n, "op": "nn.conv2d", "where": "cpu", "host_ms": 1.0} for n in (medium, long_a, long_b)]
    fake = SimpleNamespace(profile=lambda: rows, board_figure=None, stats=None, host_seconds=0.003)
    lines = GraphModule.format_profile(fake).splitlines()
    assert lines[0].index("op") == NAME_WIDTH + 1 and lines[1].startswith(medium + " ")
    assert [len(line.split()[0]) for line in lines[2:4]] == [NAME_WIDTH] * 2
    assert lines[2].split()[0].endswith("/m/a") and lines[3].split()[0].endswith("/m/b") and "..." in lines[2]
