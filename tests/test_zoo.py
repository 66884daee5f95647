"""The built-in model zoo: shapes of every model, VTA's ResNet-18 / MobileNet / DCGAN workloads at full size,
well-scaled random weights, batch-norm folding checked against the unfolded graph, seeds and overrides."""

from __future__ import annotations

import numpy as np
import pytest

from graph_pack import zoo
from graph_pack.graph import Graph, GraphError, find_nodes
from graph_pack.reference import evaluate, run_reference

SMALL = (3, 32, 32)

# VTA's workloads: (H, W, in channels, out channels, kernel, pad, stride) [+ groups]
RESNET18 = {
    "C1": (224, 224, 3, 64, 7, 3, 2),
    "C2": (56, 56, 64, 64, 3, 1, 1), "C3": (56, 56, 64, 128, 3, 1, 2), "C4": (56, 56, 64, 128, 1, 0, 2),
    "C5": (28, 28, 128, 128, 3, 1, 1), "C6": (28, 28, 128, 256, 3, 1, 2), "C7": (28, 28, 128, 256, 1, 0, 2),
    "C8": (14, 14, 256, 256, 3, 1, 1), "C9": (14, 14, 256, 512, 3, 1, 2), "C10": (14, 14, 256, 512, 1, 0, 2),
    "C11": (7, 7, 512, 512, 3, 1, 1),
}
MOBILENET = {
    "D1": (112, 112, 32, 32, 3, 1, 1, 2), "D2": (112, 112, 64, 64, 3, 1, 2, 4),
    "D3": (56, 56, 128, 128, 3, 1, 1, 8), "D4": (56, 56, 128, 128, 3, 1, 2, 8),
    "D5": (28, 28, 256, 256, 3, 1, 1, 16), "D6": (28, 28, 256, 256, 3, 1, 2, 16),
    "D7": (14, 14, 512, 512, 3, 1, 1, 32), "D8": (14, 14, 512, 512, 3, 1, 2, 32),
    "D9": (7, 7, 1024, 1024, 3, 1, 1, 64),
}
DCGAN = {"CT1": (4, 4, 1024, 512), "CT2": (8, 8, 512, 256), "CT3": (16, 16, 256, 128)}


def workload(graph: Graph, node, groups: bool = False) -> tuple:
    """(H, W, CI, CO, K, pad, stride[, groups]) of a conv node, in VTA's workload order."""
    _, ci, h, w = graph[node.inputs[0]].shape
    kernel = graph[node.inputs[1]].shape[2]
    pad, stride = node.attrs["padding"], node.attrs["strides"]
    assert len(set(pad)) == 1 and stride[0] == stride[1]
    out = (h, w, ci, node.shape[1], kernel, pad[0], stride[0])
    return (*out, node.attrs["groups"]) if groups else out


def data_for(graph: Graph, seed: int = 7) -> dict[str, np.ndarray]:
    return {"data": np.random.default_rng(seed).standard_normal(graph["data"].shape).astype(np.float32)}


def values(graph: Graph, params, inputs) -> dict[str, np.ndarray]:
    seen: dict[str, np.ndarray] = {}
    evaluate(graph, params, inputs, observe=seen.__setitem__)
    return seen


@pytest.fixture(scope="module")
def resnet18_224():
    return zoo.get_model("resnet-18")


@pytest.fixture(scope="module")
def resnet18_small():
    return zoo.get_model("resnet-18", batch_size=2, image_shape=SMALL)


# ---- every model -------------------------------------------------------------------------------------------

def check_pack_points(name: str, graph: Graph) -> None:
    """The start/stop exist; the first conv is before the start, every other (accelerator-sized) conv
    between them."""
    order = {n: i for i, n in enumerate(graph.nodes)}
    start, stop = (find_nodes(graph, s) for s in zoo.pack_points(name))
    assert len(start) >= 1 and len(stop) >= 1, zoo.pack_points(name)
    lo, hi = order[start[0].name], order[stop[0].name]
    convs = [n for n in graph.ops() if n.op in ("nn.conv2d", "nn.conv2d_transpose")]
    if name == "dcgan":
        assert order[find_nodes(graph, "nn.dense")[0].name] < lo
        assert stop[0].name == convs[-1].name      # the 128 -> 3 layer stays on the CPU
        convs = convs[:-1]
    else:
        assert order[convs[0].name] < lo and graph[convs[0].inputs[0]].shape[1] == 3
        convs = convs[1:]
    assert convs and all(lo < order[c.name] < hi for c in convs)


@pytest.mark.parametrize("name", zoo.list_models())
def test_every_model_builds_runs_and_is_well_scaled(name):
    graph, params = zoo.get_model(name, batch_size=2, image_shape=SMALL, num_classes=10)
    generator = name == "dcgan"
    assert graph.inputs == ["data"]
    assert graph["data"].shape == ((2, 100) if generator else (2, *SMALL))
    assert graph[graph.outputs[0]].shape == ((2, *SMALL) if generator else (2, 10))
    assert not find_nodes(graph, "nn.batch_norm")
    assert all(graph[p].op == "const" for p in params) and len(params) == sum(n.op == "const" for n in graph)
    check_pack_points(name, graph)

    seen = values(graph, params, data_for(graph))
    out = seen[graph.outputs[0]]
    assert np.isfinite(out).all()
    if generator:
        assert np.abs(out).max() <= 1 and 0.1 < out.std() < 1
    else:
        np.testing.assert_allclose(out.sum(axis=1), 1, rtol=1e-5)
        logits = seen[graph[graph.outputs[0]].inputs[0]]
        assert 0.3 < logits.std() < 10, logits.std()


def test_names_and_aliases():
    models = zoo.list_models()
    for name in ("resnet-18", "resnet-34", "resnet-50", "resnet-18-v2", "resnet-34-v2", "resnet-50-v2",
                 "mobilenet", "mobilenet-depthwise", "vgg-11", "vgg-16", "dcgan"):
        assert name in models
    assert zoo.pack_points("resnet18_v1") == zoo.pack_points("resnet-18")
    assert zoo.pack_points("resnet-18") == ("nn.max_pool2d", "nn.global_avg_pool2d")
    assert zoo.pack_points("resnet50_v2") == zoo.pack_points("resnet-50-v2")
    with pytest.raises(ValueError, match="unknown model 'resnet-19'.*resnet-18.*dcgan"):
        zoo.get_model("resnet-19")
    with pytest.raises(ValueError, match="unknown model"):
        zoo.pack_points("alexnet")


def test_bad_arguments():
    with pytest.raises(ValueError, match="float32"):
        zoo.get_model("resnet-18", dtype="float16")
    with pytest.raises(ValueError, match=r"S = 4 \* 2\^k"):
        zoo.get_model("dcgan", image_shape=(3, 48, 48))
    with pytest.raises(ValueError, match="batch_size"):
        zoo.get_model("mobilenet", batch_size=0)


# ---- VTA's workloads at full size --------------------------------------------------------------------------

def test_resnet18_matches_vta_workloads(resnet18_224):
    graph, _ = resnet18_224
    assert graph["data"].shape == (1, 3, 224, 224) and graph["softmax"].shape == (1, 1000)
    pools = find_nodes(graph, "nn.max_pool2d")
    assert len(pools) == 1 and len(find_nodes(graph, "nn.global_avg_pool2d")) == 1
    assert pools[0].attrs["pool_size"] == (3, 3) and pools[0].attrs["strides"] == (2, 2)
    assert pools[0].attrs["padding"] == (1, 1, 1, 1)
    convs = find_nodes(graph, "nn.conv2d")
    assert len(convs) == 20    # stem + 16 in blocks + 3 downsample
    assert sum(graph[c.inputs[1]].shape[2] == 1 for c in convs) == 3
    assert {workload(graph, c) for c in convs} == set(RESNET18.values())
    users = graph.consumers()
    assert all(graph[users[c.name][0]].op == "nn.bias_add" for c in convs)   # every BN folded into its conv
    assert not find_nodes(graph, "nn.batch_norm") and not find_nodes(graph, "multiply")
    for name in ("stem.conv", "stem.relu", "stem.pool", "layer1.0.conv1", "layer1.0.add", "layer1.0.relu2",
                 "layer2.0.downsample.conv", "pool", "flatten", "fc", "softmax"):
        assert name in graph.nodes


def test_mobilenet_grouped_convs_match_vta_workloads():
    graph, _ = zoo.get_model("mobilenet")
    assert graph["softmax"].shape == (1, 1000)
    convs = find_nodes(graph, "nn.conv2d")
    grouped = [c for c in convs if c.attrs["groups"] > 1]
    assert len(grouped) == 13 and len(convs) == 27
    assert all(c.attrs["groups"] == c.shape[1] // 16 for c in grouped)
    assert {workload(graph, c, groups=True) for c in grouped} == set(MOBILENET.values())
    assert graph[graph["block1.conv_dw"].inputs[1]].shape == (32, 16, 3, 3)


def test_mobilenet_depthwise_has_one_channel_per_group():
    graph, _ = zoo.get_model("mobilenet-depthwise", image_shape=SMALL)
    dw = [c for c in find_nodes(graph, "nn.conv2d") if c.attrs["groups"] > 1]
    assert len(dw) == 13 and all(c.attrs["groups"] == c.shape[1] == graph[c.inputs[0]].shape[1] for c in dw)


def test_dcgan_transposed_convs_match_vta_workloads():
    graph, params = zoo.get_model("dcgan")
    assert graph["data"].shape == (1, 100) and graph[graph.outputs[0]].shape == (1, 3, 64, 64)
    assert graph[graph.outputs[0]].op == "tanh"
    assert graph["fc.reshape"].shape == (1, 1024, 4, 4)
    deconvs = find_nodes(graph, "nn.conv2d_transpose")
    shapes = [(*graph[d.inputs[0]].shape[2:], graph[d.inputs[0]].shape[1], d.shape[1]) for d in deconvs]
    assert shapes == [*DCGAN.values(), (32, 32, 128, 3)]
    for d in deconvs:
        assert d.attrs["strides"] == (2, 2) and d.attrs["padding"] == (1, 1, 1, 1)
        assert params[d.inputs[1]].shape[2:] == (4, 4)


# ---- weights -----------------------------------------------------------------------------------------------

def test_resnet18_activations_stay_well_scaled():
    graph, params = zoo.get_model("resnet-18", batch_size=2, image_shape=(3, 64, 64))
    seen = values(graph, params, data_for(graph))
    stds = {name: float(v.std()) for name, v in seen.items() if name != "softmax"}
    bad = {name: s for name, s in stds.items() if not 0.1 <= s <= 10}
    assert not bad
    assert 0.3 < stds["fc.bias_add"] < 10


@pytest.mark.parametrize("name", ["resnet-18", "resnet-18-v2"])
def test_folding_matches_the_unfolded_graph(name):
    raw, raw_params = zoo.get_raw_model(name, image_shape=SMALL)
    graph, params = zoo.get_model(name, image_shape=SMALL)
    bns = len(find_nodes(raw, "nn.batch_norm"))
    assert bns == (20 if name == "resnet-18" else 19)
    assert not find_nodes(graph, "nn.batch_norm")
    lowered = find_nodes(graph, "multiply")
    # v2: the data BN, each block's first BN (it reads the residual sum) and the final BN cannot fold
    assert len(lowered) == (0 if name == "resnet-18" else 10)
    assert all(n.name.endswith("_mul") for n in lowered)
    inputs = data_for(graph)
    want, got = values(raw, raw_params, inputs), values(graph, params, inputs)
    np.testing.assert_allclose(got["fc.bias_add"], want["fc.bias_add"], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got["softmax"], want["softmax"], rtol=1e-4, atol=1e-7)


def test_raw_batch_norms_are_calibrated():
    """Every BN's running statistics are its input's: on a fresh batch its outputs are about unit scale."""
    raw, params = zoo.get_raw_model("resnet-18", image_shape=(3, 64, 64))
    seen = values(raw, params, data_for(raw))
    for bn in find_nodes(raw, "nn.batch_norm"):
        gamma = params[bn.inputs[1]]
        normalized = (seen[bn.name] - params[bn.inputs[2]].reshape(-1, 1, 1)) / gamma.reshape(-1, 1, 1)
        assert abs(normalized.mean()) < 0.5 and 0.5 < normalized.std() < 2, bn.name


def test_deterministic_for_a_seed(resnet18_small):
    graph, params = resnet18_small
    again_graph, again = zoo.get_model("resnet-18", batch_size=2, image_shape=SMALL)
    assert str(again_graph) == str(graph) and again.keys() == params.keys()
    assert all(np.array_equal(params[k], again[k]) for k in params)
    _, other = zoo.get_model("resnet-18", batch_size=2, image_shape=SMALL, seed=1)
    assert other.keys() == params.keys()
    assert not np.array_equal(params["fc.weight"], other["fc.weight"])
    assert not np.allclose(params["layer1.0.conv1.bias_bn"], other["layer1.0.conv1.bias_bn"])


@pytest.mark.parametrize("op", ["nn.conv2d", "nn.conv2d_transpose", "nn.dense"])
def test_calibration_products_are_the_same_in_any_summation_order(op):
    """The batch-norm statistics come from these products: were they float sums in BLAS's order, the zoo's
    weights would differ between CPUs (OpenBLAS picks its kernel per CPU). Reordering the summed channels
    changes BLAS's order, and must not change one bit."""
    from vta.numerics import conv2d_im2col, conv2d_transpose_scatter
    rng = np.random.default_rng(5)
    kernel = zoo._CALIBRATION_KERNELS[op]
    if op == "nn.dense":
        x, w = rng.standard_normal((4, 4608), np.float32), rng.standard_normal((8, 4608), np.float32)
        attrs, axis_x, axis_w = {}, 1, 1
        exact = x.astype(np.float64) @ w.astype(np.float64).T
    elif op == "nn.conv2d":
        x, w = rng.standard_normal((2, 256, 7, 7), np.float32), rng.standard_normal((16, 256, 3, 3), np.float32)
        attrs = {"strides": (1, 1), "padding": (1, 1, 1, 1), "dilation": (1, 1), "groups": 1}
        axis_x, axis_w = 1, 1
        exact = conv2d_im2col(x, w, attrs["strides"], attrs["padding"], dtype=np.float64)
    else:
        x, w = rng.standard_normal((2, 256, 4, 4), np.float32), rng.standard_normal((256, 8, 4, 4), np.float32)
        attrs, axis_x, axis_w = {"strides": (2, 2), "padding": (1, 1, 1, 1), "output_padding": (0, 0)}, 1, 0
        exact = conv2d_transpose_scatter(x, w, attrs["strides"], attrs["padding"], dtype=np.float64)
    got = kernel(attrs, x, w)
    perm = rng.permutation(x.shape[axis_x])
    again = kernel(attrs, np.take(x, perm, axis=axis_x), np.take(w, perm, axis=axis_w))
    assert got.dtype == np.float32 and np.array_equal(got, again)
    np.testing.assert_allclose(got, exact, rtol=1e-4, atol=1e-4 * np.abs(exact).max())


@pytest.mark.parametrize("terms", [9, 4608, 25088])
def test_calibration_sums_are_exact_integers(terms):
    """What makes the order free: the fixed-point operands' products and partial sums are integers below 2^53
    even when every operand sits at full scale, so float64 BLAS adds them exactly (checked against Python
    integers), while the operands keep float32-like precision."""
    rng = np.random.default_rng(terms)
    x, w = rng.uniform(1.0, 2.0, (2, terms)), rng.uniform(-2.0, -1.0, (3, terms))   # sums of one sign: worst case
    seen = []

    def product(xq, wq):
        seen.append((xq, wq))
        return xq @ wq.T

    got = zoo._exact_product(product, x, w, terms)
    (xq, wq), = seen
    assert np.array_equal(xq, np.rint(xq)) and np.array_equal(wq, np.rint(wq))
    blas = xq @ wq.T
    for i, xr in enumerate(xq.astype(np.int64).tolist()):
        for j, wr in enumerate(wq.astype(np.int64).tolist()):
            assert blas[i, j] == sum(a * b for a, b in zip(xr, wr)), (i, j)
    np.testing.assert_allclose(got, x @ w.T, rtol=2e-6)


def test_weights_override():
    graph, params = zoo.get_model("mobilenet-depthwise", image_shape=SMALL, num_classes=10,
                                  weights={"fc.weight": np.zeros((10, 1024)), "fc.bias": np.zeros(10)})
    assert params["fc.weight"].dtype == np.float32 and not params["fc.weight"].any()
    np.testing.assert_allclose(run_reference(graph, params, data_for(graph)), 0.1, rtol=1e-6)
    with pytest.raises(GraphError, match=r"no parameter 'fc.weights'.*fc.weight"):
        zoo.get_model("mobilenet-depthwise", image_shape=SMALL, weights={"fc.weights": np.zeros(1)})
    expects = r"'stem.conv.weight_bn' expects shape \(32, 3, 3, 3\), got \(32, 3\)"
    with pytest.raises(GraphError, match=expects):
        zoo.get_model("mobilenet-depthwise", image_shape=SMALL,
                      weights={"stem.conv.weight_bn": np.zeros((32, 3))})


def test_an_absurd_image_shape_is_refused_before_anything_is_built():
    with pytest.raises(zoo.TooLarge, match="largest tensor would take about"):
        zoo.get_model("resnet-18", image_shape=(3, 100_000, 100_000))
    with pytest.raises(zoo.TooLarge):
        zoo.get_model("vgg-11", batch_size=64, image_shape=(3, 512, 512))
    graph, _ = zoo.get_model("vgg-11", image_shape=(3, 32, 32), max_tensor_bytes=1 << 30)
    assert graph[graph.inputs[0]].shape == (1, 3, 32, 32)
