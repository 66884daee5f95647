"""The MXNet frontend against mxnet's own forward pass (the independent reference).

Weights are random (pretrained ones cannot be downloaded here) but fixed by seeds; the batch norms get
random statistics and affine parameters, so folding them into the convolutions is really exercised.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from extras import needs

from graph_pack import run_reference
from graph_pack.frontend_mxnet import from_mxnet, import_mxnet, supported_ops
from graph_pack.graph import GraphError, find_nodes

try:
    mx = import_mxnet()
except ImportError:   # tests marked needs_mxnet then skip (fail under CI) with the install hint
    mx = None

needs_mxnet = needs("mxnet")
pytestmark = pytest.mark.filterwarnings("ignore:Please import `csr_matrix`:DeprecationWarning")  # mxnet on scipy


def _randomize_batch_norms(block, rng: np.random.Generator) -> None:
    """Non-trivial running statistics, gamma and beta (initialisation leaves 0, 1, 1, 0)."""
    for name, p in block.collect_params().items():
        n = p.shape[0]
        if name.endswith("running_mean"):
            p.set_data(rng.normal(0, 0.2, n).astype(np.float32))
        elif name.endswith("running_var"):
            p.set_data(rng.uniform(0.5, 2.0, n).astype(np.float32))
        elif name.endswith("gamma"):
            p.set_data(rng.uniform(0.5, 1.5, n).astype(np.float32))
        elif name.endswith("beta"):
            p.set_data(rng.normal(0, 0.2, n).astype(np.float32))


def _init(block, x: np.ndarray, seed: int = 0):
    """Seeded Xavier init, one forward to settle deferred shapes, random batch norms, hybridized."""
    mx.random.seed(seed)
    block.initialize(mx.init.Xavier())
    block.hybridize()
    block(mx.nd.array(x))
    _randomize_batch_norms(block, np.random.default_rng(seed))
    return block


def _mx_forward(block, x: np.ndarray) -> list[np.ndarray]:
    out = block(mx.nd.array(x))
    return [o.asnumpy() for o in (out if isinstance(out, (list, tuple)) else [out])]


def _assert_close(ours, ref, rtol: float = 1e-3) -> None:
    """Close relative to the output's magnitude (float32 sums in a different order drift a little)."""
    ours = ours if isinstance(ours, tuple) else (ours,)
    assert len(ours) == len(ref)
    for o, r in zip(ours, ref, strict=True):
        assert o.shape == r.shape and o.dtype == r.dtype
        scale = float(np.abs(r).max())
        assert scale > 0 and np.isfinite(o).all()
        np.testing.assert_allclose(o / scale, r / scale, rtol=rtol, atol=rtol / 10)


# ---- resnet18_v1: the network of VTA's tutorials ------------------------------------------------------------

@pytest.fixture(scope="module")
def resnet18():
    from mxnet.gluon.model_zoo import vision
    x = np.random.default_rng(1).normal(size=(1, 3, 224, 224)).astype(np.float32)
    net = _init(vision.get_model("resnet18_v1", pretrained=False), x)
    graph, params = from_mxnet(net, {"data": x.shape})
    return net, x, graph, params


@needs_mxnet
def test_resnet18_v1_matches_mxnet(resnet18):
    net, x, graph, params = resnet18
    (ref,) = _mx_forward(net, x)
    assert ref.std() > 0.1 * np.abs(ref).max()   # logits are not degenerate
    _assert_close(run_reference(graph, params, {"data": x}), [ref])


@needs_mxnet
def test_resnet18_v1_ops_and_names_for_vta(resnet18):
    _, x, graph, params = resnet18
    assert graph.inputs == ["data"] and graph["data"].shape == x.shape
    assert [n.name for n in find_nodes(graph, "nn.max_pool2d")] == ["resnetv10_pool0_fwd"]
    assert [n.name for n in find_nodes(graph, "nn.global_avg_pool2d")] == ["resnetv10_pool1_fwd"]
    assert not find_nodes(graph, "nn.batch_norm") and not find_nodes(graph, "multiply")
    convs = find_nodes(graph, "nn.conv2d")
    assert len(convs) == 20 and convs[0].name == "resnetv10_conv0_fwd"
    assert all(n.name.startswith("resnetv10_") for n in graph.ops())
    # each batch norm folded into its convolution: conv -> bias_add named after the batch norm
    assert graph["resnetv10_batchnorm0_fwd"].op == "nn.bias_add"
    assert graph["resnetv10_batchnorm0_fwd"].inputs[0] == "resnetv10_conv0_fwd"
    assert graph["resnetv10_pool0_fwd"].attrs["pool_size"] == (3, 3)
    assert graph["resnetv10_pool0_fwd"].attrs["padding"] == (1, 1, 1, 1)
    assert [n.op for n in graph.ops()][-3:] == ["nn.batch_flatten", "nn.dense", "nn.bias_add"]
    order = list(graph.nodes)
    assert order.index("resnetv10_pool0_fwd") < order.index("resnetv10_pool1_fwd")
    assert all(graph[n].op == "const" for n in params)


# ---- other networks and blocks ------------------------------------------------------------------------------

@needs_mxnet
def test_mobilenet0_25_depthwise():
    from mxnet.gluon.model_zoo import vision
    x = np.random.default_rng(2).normal(size=(2, 3, 64, 64)).astype(np.float32)
    net = _init(vision.get_model("mobilenet0.25", pretrained=False), x, seed=2)
    graph, params = from_mxnet(net, {"data": x.shape})
    depthwise = [n for n in find_nodes(graph, "nn.conv2d") if n.attrs["groups"] > 1]
    assert len(depthwise) == 13 and all(n.attrs["groups"] == n.shape[1] for n in depthwise)
    assert not find_nodes(graph, "nn.batch_norm")
    _assert_close(run_reference(graph, params, {"data": x}), _mx_forward(net, x))


def _decoder():
    from mxnet.gluon import HybridBlock, nn

    class Decoder(HybridBlock):
        """Deconvolution (+ folded batch norm), nearest UpSampling, Concat, Dropout, tanh."""

        def __init__(self, **kw):
            super().__init__(**kw)
            with self.name_scope():
                self.conv = nn.Conv2D(8, 3, padding=1)
                self.bn = nn.BatchNorm(scale=False)              # fix_gamma=True: gamma is ignored
                self.deconv = nn.Conv2DTranspose(4, 3, strides=2, padding=1, output_padding=1)
                self.bn2 = nn.BatchNorm()
                self.drop = nn.Dropout(0.5)
                self.act = nn.Activation("tanh")

        def hybrid_forward(self, F, x):
            y = self.bn(self.conv(x))
            a = self.bn2(self.deconv(y))                                  # (N, 4, 2H, 2W)
            b = F.UpSampling(y, scale=2, sample_type="nearest")           # (N, 8, 2H, 2W)
            return self.act(self.drop(F.concat(a, b, dim=1)))

    return Decoder(prefix="decoder_")


@needs_mxnet
def test_decoder_block():
    x = np.random.default_rng(3).normal(size=(2, 3, 6, 5)).astype(np.float32)
    net = _init(_decoder(), x, seed=3)
    graph, params = from_mxnet(net, {"data": x.shape})
    ops = {n.op for n in graph.ops()}
    assert {"nn.conv2d_transpose", "nn.upsampling", "concatenate", "tanh"} <= ops
    assert not ops & {"nn.batch_norm", "nn.dropout"}
    assert graph["decoder_conv1_fwd"].attrs["output_padding"] == (1, 1)
    (ref,) = _mx_forward(net, x)
    assert ref.shape == (2, 12, 12, 10)
    _assert_close(run_reference(graph, params, {"data": x}), [ref], rtol=1e-5)


def _ops_block():
    from mxnet.gluon import HybridBlock, nn

    class Ops(HybridBlock):
        """Pooling conventions, dense without flatten, shape ops, scalar arithmetic, three outputs."""

        def __init__(self, **kw):
            super().__init__(**kw)
            with self.name_scope():
                self.conv = nn.Conv2D(6, 3, padding=1, use_bias=True)
                self.bn = nn.BatchNorm(center=False)
                self.relu = nn.LeakyReLU(0.0)
                self.max_full = nn.MaxPool2D(3, 2, 1, ceil_mode=True)
                self.avg_full_incl = nn.AvgPool2D(3, 2, 1, ceil_mode=True, count_include_pad=True)
                self.avg_full_excl = nn.AvgPool2D(3, 2, 1, ceil_mode=True, count_include_pad=False)
                self.avg_valid = nn.AvgPool2D(2, 2, 1)
                self.gmax = nn.GlobalMaxPool2D()
                self.dense3d = nn.Dense(5, flatten=False)
                self.fc = nn.Dense(4)

        def hybrid_forward(self, F, x):
            y = self.relu(self.bn(self.conv(x)))                                   # (N, 6, 6, 6)
            z = F.concat(self.max_full(y), self.avg_full_incl(y), self.avg_full_excl(y), dim=1)   # (N, 18, 4, 4)
            z = F.clip(z * 0.5 + 1, 0.2, 1.5) - 0.1
            t = F.transpose(F.reshape(z, shape=(0, 0, -1)), axes=(0, 2, 1))        # (N, 16, 18)
            t = F.softmax(self.dense3d(t), axis=1)                                 # (N, 16, 5)
            s = 1 - F.sigmoid(self.fc(self.avg_valid(y)))
            s = F.elemwise_sub(2 / (s + 1), F.broadcast_mul(s, F.relu(s)))
            g = F.maximum(F.Flatten(self.gmax(y)), 0.1) / 3
            g = F.SoftmaxActivation(F.Cast(F.Cast(g, "float16"), "float32"))
            return t, s, g

    return Ops(prefix="ops_")


@needs_mxnet
def test_ops_block_several_outputs():
    x = np.random.default_rng(4).normal(size=(2, 3, 6, 6)).astype(np.float32)
    net = _init(_ops_block(), x, seed=4)
    graph, params = from_mxnet(net, {"data": x.shape})
    assert len(graph.outputs) == 3
    pools = {n.name: n for n in graph.ops() if "pool" in n.op}
    assert pools["ops_pool0_fwd"].attrs["ceil_mode"] and pools["ops_pool0_fwd"].op == "nn.max_pool2d"
    # count_include_pad with a last window past the padding: explicit pad, then count real elements
    assert graph["ops_pool1_fwd"].inputs == ["ops_pool1_fwd_pad"]
    assert graph["ops_pool1_fwd"].attrs["count_include_pad"] is False
    assert graph["ops_pool4_fwd"].op == "nn.max_pool2d" and graph["ops_pool4_fwd"].attrs["pool_size"] == (6, 6)
    _assert_close(run_reference(graph, params, {"data": x}), _mx_forward(net, x), rtol=1e-5)


@needs_mxnet
def test_pooling_full_keeps_windows_relay_would_drop():
    """mxnet's 'full' convention keeps a last window that starts in the padding; Relay's ceil_mode drops it."""
    x = np.random.default_rng(5).normal(size=(1, 2, 5, 5)).astype(np.float32)
    for pool_type in ("max", "avg"):
        sym = mx.sym.Pooling(mx.sym.var("data"), kernel=(2, 2), stride=(2, 2), pad=(1, 1), pool_type=pool_type,
                             pooling_convention="full", name="pool")   # count_include_pad: default True
        ref = sym.bind(mx.cpu(), {"data": mx.nd.array(x)}).forward()[0].asnumpy()
        graph, params = from_mxnet(sym, {"data": x.shape})
        out = run_reference(graph, params, {"data": x})
        assert out.shape == ref.shape == (1, 2, 4, 4)
        # windows with no input element are undefined (mxnet: its lowest float or 0/0); compare the rest
        np.testing.assert_allclose(out[:, :, :3, :3], ref[:, :, :3, :3], rtol=1e-6)


# ---- the Symbol + params path -------------------------------------------------------------------------------

@needs_mxnet
def test_exported_block_via_load_checkpoint(tmp_path):
    x = np.random.default_rng(6).normal(size=(1, 3, 4, 4)).astype(np.float32)
    net = _init(_decoder(), x, seed=6)
    (ref,) = _mx_forward(net, x)
    net.export(str(tmp_path / "decoder"), epoch=3)
    sym, arg_params, aux_params = mx.model.load_checkpoint(str(tmp_path / "decoder"), 3)
    graph, params = from_mxnet(sym, {"data": x.shape}, arg_params=arg_params, aux_params=aux_params)
    block_graph, _ = from_mxnet(net, {"data": x.shape})
    assert [(n.name, n.op) for n in graph.ops()] == [(n.name, n.op) for n in block_graph.ops()]
    _assert_close(run_reference(graph, params, {"data": x}), [ref], rtol=1e-5)


@needs_mxnet
def test_symbol_api_model_with_softmax_output(tmp_path):
    """A classic Symbol-API classifier: BatchNorm with mxnet's defaults (fix_gamma, eps 1e-3), a label."""
    data = mx.sym.var("data")
    y = mx.sym.Convolution(data, kernel=(3, 3), num_filter=8, pad=(1, 1), name="conv0")
    y = mx.sym.Activation(mx.sym.BatchNorm(y, name="bn0"), act_type="relu", name="relu0")
    y = mx.sym.Pooling(y, kernel=(2, 2), stride=(2, 2), pool_type="max", name="pool0")
    y = mx.sym.FullyConnected(mx.sym.Flatten(y, name="flat0"), num_hidden=10, name="fc0")
    y = mx.sym.SoftmaxOutput(y, name="softmax")
    x = np.random.default_rng(7).normal(size=(2, 3, 8, 8)).astype(np.float32)
    arg_shapes, _, aux_shapes = y.infer_shape(data=x.shape)
    rng = np.random.default_rng(8)
    arg = {n: mx.nd.array(rng.normal(0, 0.5, s)) for n, s in zip(y.list_arguments(), arg_shapes, strict=True)
           if n not in ("data", "softmax_label")}
    aux = {n: mx.nd.array(rng.uniform(0.5, 2.0, s)) for n, s in zip(y.list_auxiliary_states(), aux_shapes,
                                                                     strict=True)}
    mx.model.save_checkpoint(str(tmp_path / "clf"), 0, y, arg, aux)
    sym, arg_params, aux_params = mx.model.load_checkpoint(str(tmp_path / "clf"), 0)
    graph, params = from_mxnet(sym, {"data": x.shape}, arg_params=arg_params, aux_params=aux_params)
    assert "softmax_label" not in graph.nodes and graph["softmax"].op == "nn.softmax"
    exe = sym.bind(mx.cpu(), {**arg_params, "data": mx.nd.array(x), "softmax_label": mx.nd.zeros((2,))},
                   aux_states=aux_params, grad_req="null")
    ref = exe.forward(is_train=False)[0].asnumpy()
    _assert_close(run_reference(graph, params, {"data": x}), [ref], rtol=1e-5)


def _symbol_only_net(**deconv):
    data = mx.sym.var("data")
    d = mx.sym.Deconvolution(data, kernel=(4, 4), stride=(2, 2), num_filter=3, no_bias=False, name="deconv",
                             **deconv)
    p = mx.sym.Pad(d, mode="constant", pad_width=(0, 0, 0, 0, 1, 2, 2, 1), constant_value=0.5, name="pad")
    s = mx.sym.add_n(p, mx.sym.BlockGrad(p), p * p, name="sum3")
    t = mx.sym.transpose(mx.sym.Reshape(s, shape=(0, -1, 4)), name="t")                # default axes: reverse
    return mx.sym.Group([
        mx.sym.SoftmaxOutput(s, name="so"), mx.sym.SoftmaxOutput(s, multi_output=True, name="so_multi"),
        mx.sym.SoftmaxActivation(s, name="sa"), mx.sym.SoftmaxActivation(s, mode="channel", name="sa_chan"),
        mx.sym.softmax(s, axis=2, temperature=2.0, name="sm"), t, mx.sym.LeakyReLU(1 - s, slope=0.0, name="relu0"),
        mx.sym.Pooling(s, kernel=(1, 1), global_pool=True, pool_type="max", name="gmax")])


@needs_mxnet
def test_symbol_only_ops():
    """Ops Gluon layers do not emit: Deconvolution's target_shape, Pad, add_n, softmax variants on 4-D data
    (mxnet 1.9 normalises SoftmaxOutput and instance-mode SoftmaxActivation over the last axis)."""
    x = np.random.default_rng(9).normal(size=(2, 2, 4, 5)).astype(np.float32)
    sym = _symbol_only_net(target_shape=(9, 12))
    # mxnet's MKLDNN deconvolution cannot run a target_shape that implies padding, so mxnet runs the pad/adj
    # it infers itself (its InferPad; checked against MXNET_MKLDNN_ENABLED=0 when this test was written)
    same = _symbol_only_net(pad=(1, 0), adj=(1, 0))
    assert sym.infer_shape(data=x.shape)[1] == same.infer_shape(data=x.shape)[1]
    arg_shapes, _, _ = sym.infer_shape(data=x.shape)
    rng = np.random.default_rng(10)
    args = {n: mx.nd.array(rng.normal(0, 0.5, s)) for n, s in zip(sym.list_arguments(), arg_shapes, strict=True)}
    args["data"] = mx.nd.array(x)
    ref = [o.asnumpy() for o in same.bind(mx.cpu(), args, grad_req="null").forward()]
    params = {n: v for n, v in args.items() if n.startswith("deconv")}
    graph, gparams = from_mxnet(sym, {"data": x.shape}, arg_params=params)
    assert graph["deconv"].attrs["padding"] == (1, 0, 1, 0) and graph["deconv"].attrs["output_padding"] == (1, 0)
    assert graph["so"].attrs["axis"] == -1 and graph["so_multi"].attrs["axis"] == 1
    _assert_close(run_reference(graph, gparams, {"data": x}), ref, rtol=1e-5)


# ---- errors -------------------------------------------------------------------------------------------------

@needs_mxnet
def test_unsupported_ops_are_all_listed_with_their_nodes():
    from mxnet.gluon import HybridBlock, nn

    class Bad(HybridBlock):
        def __init__(self, **kw):
            super().__init__(**kw)
            with self.name_scope():
                self.conv = nn.Conv2D(4, 3)
                self.leaky = nn.LeakyReLU(0.1)

        def hybrid_forward(self, F, x):
            y = F.SwapAxis(self.leaky(self.conv(x)), dim1=2, dim2=3)
            return F.Activation(F.SwapAxis(y, dim1=1, dim2=2), act_type="softrelu")

    x = np.zeros((1, 3, 8, 8), np.float32)
    net = _init(Bad(prefix="bad_"), x)
    nodes = json.loads(net(mx.sym.var("data")).tojson())["nodes"]
    names = {op: [n["name"] for n in nodes if n["op"] == op] for op in ("LeakyReLU", "SwapAxis", "Activation")}
    assert len(names["SwapAxis"]) == 2
    with pytest.raises(GraphError) as info:
        from_mxnet(net, {"data": x.shape})
    msg = str(info.value)
    assert "4 node(s)" in msg
    for op, op_names in names.items():
        assert op in msg and all(n in msg for n in op_names)
    assert "slope=0.1" in msg and "softrelu" in msg
    assert "supported mxnet ops: " in msg and "Convolution" in msg and "BatchNorm" in msg
    assert "SwapAxis" not in supported_ops()


@needs_mxnet
def test_missing_values_and_bad_arguments():
    sym = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=3, name="fc")
    with pytest.raises(GraphError, match="'fc_weight' has no value"):
        from_mxnet(sym, {"data": (1, 4)})
    with pytest.raises(GraphError, match=r"input\(s\) \['image'\] the model does not have"):
        from_mxnet(sym, {"image": (1, 4)}, arg_params={"fc_weight": np.zeros((3, 4), np.float32)})
    with pytest.raises(GraphError, match="plain gluon Block"):
        from_mxnet(mx.gluon.nn.Block(), {"data": (1, 4)})
    with pytest.raises(GraphError, match="block.initialize"):
        from_mxnet(mx.gluon.nn.Dense(3, in_units=4), {"data": (1, 4)})
    with pytest.raises(GraphError, match="only for a Symbol"):
        from_mxnet(mx.gluon.nn.Dense(3, in_units=4), {"data": (1, 4)}, arg_params={})


@needs_mxnet
def test_deferred_initialisation_is_completed():
    """initialize() without a forward pass leaves in_units unknown; the frontend runs one pass itself."""
    net = mx.gluon.nn.Dense(3)
    net.initialize(mx.init.Xavier())
    graph, params = from_mxnet(net, {"data": (2, 4)})
    (dense,) = find_nodes(graph, "nn.dense")
    assert params[dense.inputs[1]].shape == (3, 4)
    x = np.random.default_rng(11).normal(size=(2, 4)).astype(np.float32)
    _assert_close(run_reference(graph, params, {"data": x}), _mx_forward(net, x), rtol=1e-5)


def test_import_errors_say_how_to_install(monkeypatch):
    monkeypatch.setattr(np, "__version__", "2.1.0")
    with pytest.raises(ImportError, match=r"mxnet 1\.9 needs numpy<2 \(found numpy 2\.1\.0\)"):
        import_mxnet()
    monkeypatch.undo()
    monkeypatch.setitem(sys.modules, "mxnet", None)   # as if not installed
    with pytest.raises(ImportError, match=r"pip install 'vta-stack\[mxnet\]'"):
        import_mxnet()


@needs_mxnet
def test_a_users_import_mxnet_fails_as_the_docs_say_and_graph_pack_import_mxnet_works():
    """docs/networks.md: a plain ``import mxnet`` fails on numpy >= 1.24 (mxnet 1.9.1 reads ``numpy.bool``), and
    ``graph_pack.import_mxnet()`` or ``numpy.bool = bool`` first make it work. Run as a user runs them, each in a
    fresh interpreter; if numpy or mxnet change so that the plain import works, the doc must change too."""
    import subprocess

    def python(code: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)

    plain = python("import mxnet")
    if tuple(int(p) for p in np.__version__.split(".")[:2]) >= (1, 24):
        assert plain.returncode != 0 and "module 'numpy' has no attribute 'bool'" in plain.stderr, plain.stderr[-500:]
    ours = python("import graph_pack; mx = graph_pack.import_mxnet(); print(mx.nd.ones((2,)).sum().asscalar())")
    assert ours.returncode == 0 and ours.stdout.split()[-1] == "2.0", ours.stderr[-1000:]
    alias = python("import numpy; numpy.bool = bool; import mxnet; print(mxnet.__version__)")
    assert alias.returncode == 0 and alias.stdout.strip() == "1.9.1", alias.stderr[-1000:]
