"""Today's network families as users export them (tests/data/onnx: made by make_models.py with torch.onnx.export,
both exporters; weights stripped and refilled from a seeded generator, tests/onnx_models.py): each imports, runs on
the host in float as onnxruntime runs it, and runs with ``vta run`` bit-exactly against the quantized numpy
reference, with its convolutions / dense layers on the simulated accelerator.

Regions: no family names one; ``vta run`` without ``--start`` / ``--stop`` offloads every region the accelerator
can run, found automatically."""

from __future__ import annotations

import json

import numpy as np
import onnx_models
import pytest
from extras import needs

from graph_pack import run_reference
from graph_pack.frontend_onnx import from_onnx
from graph_pack.graph import GraphError

pytestmark = needs("onnx", "onnxruntime")

EXPORTED = [f + e for f in onnx_models.FAMILIES for e in onnx_models.EXPORTS] + onnx_models.VARIANTS

# vta run keeps dense layers in float (VTA's default); the transformers' run through the Python API below, and
# BERT's quantization stops at its integer token ids and boolean mask (quantize takes float graphs only)
TRANSFORMERS = ("vit_tiny", "bert_tiny")


def test_the_models_say_how_they_were_made() -> None:
    made = json.loads((onnx_models.MODELS / "models.json").read_text())
    assert made["versions"]["torch"] and made["versions"]["onnx"] and "make_models.py" in made["made_by"]
    for name in EXPORTED:
        path = onnx_models.MODELS / f"{name}.onnx"
        assert path.stat().st_size < 200_000, f"{name}.onnx is {path.stat().st_size} bytes: keep it small"


@pytest.mark.parametrize("name", EXPORTED)
def test_family_runs_on_the_host_as_onnxruntime(name: str) -> None:
    model = onnx_models.load(name)
    feeds = onnx_models.inputs(model)
    expected = onnx_models.onnxruntime_outputs(model, feeds)
    graph, params = from_onnx(model)
    got = run_reference(graph, params, feeds)
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert g.shape == e.shape and g.dtype == e.dtype
        assert np.std(e) > 1e-3, "the refilled weights must give a non-trivial output"
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5 * float(np.abs(e).max()))


def test_a_dynamic_input_says_which_input_to_fix_and_shape_fixes_it() -> None:
    model = onnx_models.load("shufflenet_v2_ts17")   # Shape / Gather / Div arithmetic: folded from the fixed shape
    feeds = onnx_models.inputs(model)
    dims = model.graph.input[0].type.tensor_type.shape.dim
    for k, sym in ((0, "batch"), (2, "height"), (3, "width")):
        dims[k].ClearField("dim_value")
        dims[k].dim_param = sym
    with pytest.raises(GraphError) as err:
        from_onnx(model, batch=1)
    assert str(err.value).count("\n") == 0
    assert "input 'x': dimension 2 is dynamic (symbolic 'height')" in str(err.value)
    assert "shape={'x': (...)}" in str(err.value) and "--shape x=" in str(err.value)
    graph, params = from_onnx(model, shape={"x": (1, 3, 32, 32)})
    np.testing.assert_allclose(run_reference(graph, params, feeds), onnx_models.onnxruntime_outputs(model, feeds)[0],
                               rtol=1e-4, atol=1e-6)


def test_a_planted_unsupported_op_is_one_line_naming_it() -> None:
    from onnx import helper

    model = onnx_models.load("mobilenet_v3")
    node = model.graph.node[5]
    planted = helper.make_node("Sin", [node.output[0]], ["planted_out"], name="planted_sin")
    for user in model.graph.node:
        for k, i in enumerate(user.input):
            if i == node.output[0]:
                user.input[k] = "planted_out"
    model.graph.node.insert(6, planted)
    with pytest.raises(GraphError) as err:
        from_onnx(model)
    assert "\n" not in str(err.value)
    assert "unsupported ONNX op(s): Sin (node(s): planted_sin)" in str(err.value)


@pytest.mark.parametrize("name", [f for f in onnx_models.FAMILIES if f not in TRANSFORMERS] + ["shufflenet_v2_ts17"])
def test_vta_run_is_bit_exact_with_the_accelerator_running_the_convolutions(name: str, tmp_path, capsys) -> None:
    import onnx

    from vta.cli import main

    family = name.removesuffix("_ts17")
    model = onnx_models.load(name)
    path, x = tmp_path / f"{family}.onnx", tmp_path / "x.npy"
    onnx.save(model, str(path))
    np.save(x, next(iter(onnx_models.inputs(model).values())))
    status = main(["run", str(path), "--input", str(x), "--check", "--out", str(tmp_path / "y.npz")])
    out = capsys.readouterr().out
    assert status == 0, out[-3000:]
    assert "output matches the numpy reference bit-exactly" in out or "outputs match the numpy reference" in out, out
    on_vta = [row[1] for row in (line.split() for line in out.splitlines()) if len(row) > 2 and row[2] == "VTA"]
    assert "conv2d" in on_vta, out
    saved = np.load(tmp_path / "y.npz")
    assert len([k for k in saved.files if k.startswith("output_")]) == len(model.graph.output)


# the CNN families: with no layer skipped (vta run's default with regions found automatically), >= 90 % of their
# MACs on the accelerator (issue 40's acceptance; bench/families.py measures every family), dilated convolutions
# (DeepLabV3), depthwise and narrow grouped ones (MobileNets, EfficientNet, RegNet, ShuffleNetV2) and per-channel
# weight scales (the depthwise layers under per_channel="auto") included.
FIT_THE_ISA = ("resnet50", "shufflenet_v2", "squeezenet", "googlenet", "densenet", "unet", "yolo_neck", "deeplabv3",
               "mobilenet_v2", "mobilenet_v3", "efficientnet_b0", "regnet")


@pytest.mark.parametrize("name", FIT_THE_ISA)
def test_a_family_that_fits_the_isa_has_its_macs_on_the_accelerator(name: str) -> None:
    """Concatenated branches (SqueezeNet, GoogLeNet, DenseNet, UNet, YOLO) requantize each input once, to the
    concatenation's scale, so each branch's convolution keeps its fused requantization."""
    from graph_pack import explain, graph_pack, quantize
    from vta import Environment

    model = onnx_models.load(name)
    graph, params = from_onnx(model)
    qgraph, _ = quantize(graph, params, calibrate_mode="percentile", dataset=[onnx_models.inputs(model)],
                         skip_conv_layers=[])
    placement = explain(graph_pack(qgraph, Environment("pynq")))
    on_host = [(p.name, p.why) for p in placement.ops if p.macs and p.where != "accelerator"]
    assert placement.mac_share >= 0.9, on_host


def test_a_relu6_after_a_conv_is_fused_into_the_accelerators_epilogue() -> None:
    """MobileNetV2's ReLU6 (``Clip``) of a conv's accumulator: its bound 6 at the accumulator's scale is beyond the
    ALU's 16-bit immediates, so the quantizer clips after the requantization (monotone: the same result) and the
    conv runs on the accelerator."""
    from graph_pack import explain, graph_pack, quantize
    from vta import Environment

    model = onnx_models.load("mobilenet_v2")
    graph, params = from_onnx(model)
    qgraph, _ = quantize(graph, params, calibrate_mode="percentile", dataset=[onnx_models.inputs(model)],
                         skip_conv_layers=[])
    placement = explain(graph_pack(qgraph, Environment("pynq")))
    convs = [p for p in placement.ops if p.op == "nn.conv2d"]
    on_host = [(p.name, p.why) for p in convs if p.where != "accelerator"]
    assert len([n for n in graph.ops() if n.op == "clip"]) >= 5
    assert not [why for _, why in on_host if "clip" in why], on_host
    assert not on_host, on_host   # the depthwise ones too (block-diagonal groups, per-channel shifts)


@pytest.mark.parametrize("name", ["vit_tiny", "vit_tiny_ts17"])
def test_a_vit_runs_its_dense_layers_and_attention_on_the_accelerator_bit_exactly(name: str) -> None:
    from graph_pack import build, graph_pack, quantize
    from vta import Environment

    env = Environment("pynq")
    model = onnx_models.load(name)
    feeds = onnx_models.inputs(model)
    graph, params = from_onnx(model)
    qgraph, qparams = quantize(graph, params, global_scale=8.0, skip_conv_layers=[0], skip_dense_layer=False)
    mod = build(graph_pack(qgraph, env), env, qparams)   # regions found automatically
    mod.run(**feeds)
    np.testing.assert_array_equal(mod.get_output(0), run_reference(qgraph, qparams, feeds))
    rows = [line.split() for line in mod.format_profile().splitlines()]
    on_vta = [row[1] for row in rows if len(row) > 2 and row[2] == "VTA"]
    dense = [n for n in qgraph.ops() if n.op == "nn.dense"]
    assert len(dense) == 9 and sorted(on_vta) == ["batch_matmul"] * 4 + ["dense"] * 9, on_vta   # and attention's
    assert not any(" nn.batch_matmul " in line and " CPU " in line for line in mod.format_profile().splitlines())


def test_a_vit_quantized_whole_runs_on_the_accelerator_close_to_onnxruntime() -> None:
    """Patch conv and dense layers quantized (no layer skipped): the class token, a constant concatenated with the
    patch embeddings, is quantized at build; bit-exact against numpy and close to onnxruntime's float output."""
    from graph_pack import build, explain, graph_pack, quantize
    from vta import Environment

    env = Environment("pynq")
    model = onnx_models.load("vit_tiny")
    feeds = onnx_models.inputs(model)
    graph, params = from_onnx(model)
    qgraph, qparams = quantize(graph, params, calibrate_mode="percentile", dataset=[feeds], skip_conv_layers=[],
                               skip_dense_layer=False)
    packed = graph_pack(qgraph, env)
    mod = build(packed, env, qparams)
    mod.run(**feeds)
    np.testing.assert_array_equal(mod.get_output(0), run_reference(qgraph, qparams, feeds))
    assert explain(packed, mod.fallbacks).mac_share > 0.8
    got, want = mod.get_output(0).ravel(), onnx_models.onnxruntime_outputs(model, feeds)[0].ravel()
    assert got @ want / (np.linalg.norm(got) * np.linalg.norm(want)) > 0.98


def test_bert_builds_and_runs_on_the_host_as_onnxruntime() -> None:
    from graph_pack import build
    from vta import Environment

    model = onnx_models.load("bert_tiny")
    feeds = onnx_models.inputs(model)
    graph, params = from_onnx(model)
    mod = build(graph, Environment("pynq"), params)
    mod.run(**feeds)
    np.testing.assert_array_equal(mod.get_output(0), run_reference(graph, params, feeds))
    np.testing.assert_allclose(mod.get_output(0), onnx_models.onnxruntime_outputs(model, feeds)[0], rtol=1e-4,
                               atol=1e-6)


def _onnxruntime_quantized(family: str, tmp_path, quant_format: str):
    """``family`` quantized by onnxruntime's quantize_static (tests/onnx_models.py): (model, feeds, path)."""
    model = onnx_models.load(family)
    feeds = onnx_models.inputs(model)
    quantized, path = onnx_models.onnxruntime_quantized(model, feeds, tmp_path, quant_format)
    return quantized, feeds, path


@pytest.mark.parametrize("family", ["resnet50", "mobilenet_v2"])
def test_an_onnxruntime_qdq_model_imports_exactly_and_runs_on_vta(family: str, tmp_path, capsys) -> None:
    from vta.cli import main

    model, feeds, path = _onnxruntime_quantized(family, tmp_path, "QDQ")
    assert {"QuantizeLinear", "DequantizeLinear"} <= {n.op_type for n in model.graph.node}
    graph, params = from_onnx(model)
    np.testing.assert_array_equal(run_reference(graph, params, feeds), onnx_models.onnxruntime_outputs(model, feeds)[0])
    np.save(tmp_path / "x.npy", feeds["x"])
    assert main(["run", str(path), "--input", str(tmp_path / "x.npy"), "--check"]) == 0
    out = capsys.readouterr().out
    assert "check: output matches the numpy reference bit-exactly" in out, out
    assert "conv2d" in [row[1] for row in (line.split() for line in out.splitlines()) if len(row) > 2 and
                        row[2] == "VTA"], out


def test_an_onnxruntime_qoperator_model_names_its_contrib_ops_in_one_line(tmp_path) -> None:
    model, _, _ = _onnxruntime_quantized("resnet50", tmp_path, "QOperator")
    with pytest.raises(GraphError) as err:
        from_onnx(model)
    assert "\n" not in str(err.value)
    assert str(err.value).startswith("unsupported ONNX op(s): com.microsoft.QGemm (node(s): ")
    assert "com.microsoft.QLinearAdd (node(s): " in str(err.value) and "QLinearConv" not in str(err.value).split(
        "Supported ops")[0]
