"""Regions found automatically, --explain, and the quantization that holds (issue 40, items 1 and 4), through the
public faces: ``vta run`` as a subprocess on small ONNX models built here with onnx.helper, and the Python API called
twice in one process. References: onnxruntime's float outputs, the numpy run of the quantized graph (bit-exact), and
the MACs counted from the ONNX model's own shapes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from extras import needs

import graph_pack
from graph_pack.calibration import cosine
from graph_pack.graph import GraphBuilder
from graph_pack.pack import WHY_KINDS
from hw_config import load_config

pytestmark = needs("onnx", "onnxruntime")
CFG = load_config("pynq")


def vta(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vta", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=600, check=False)


def _conv(name: str, x: str, cin: int, cout: int, rng, inits: list, nodes: list, scale: float = 1.0,
          k: int = 3, group: int = 1) -> str:
    from onnx import helper, numpy_helper
    w = (rng.standard_normal((cout, cin // group, k, k)) * scale * np.sqrt(2.0 / (cin // group * k * k)))
    inits.append(numpy_helper.from_array(w.astype(np.float32), f"{name}.w"))
    inits.append(numpy_helper.from_array((rng.standard_normal(cout) * 0.1 * scale).astype(np.float32), f"{name}.b"))
    nodes.append(helper.make_node("Conv", [x, f"{name}.w", f"{name}.b"], [name], pads=[k // 2] * 4, group=group))
    return name


def two_region_model(path: Path, scale: float = 1.0) -> Path:
    """stem conv -> relu -> conv -> relu -> MaxPool (no template: the host runs it) -> conv -> relu -> conv -> relu
    -> GlobalAveragePool -> Flatten -> Gemm. ``scale`` multiplies every conv's weights and biases (a quarter leaves
    the activations far inside VTA's global scale of 8). The max pool is not where VTA's default region would start
    (it would leave the first two convolutions out)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(7)
    nodes, inits = [], []
    x = "input"
    for i, (cin, cout) in enumerate(((3, 16), (16, 32))):
        x = _conv(f"c{i}", x, cin, cout, rng, inits, nodes, scale)
        nodes.append(helper.make_node("Relu", [x], [f"r{i}"]))
        x = f"r{i}"
    nodes.append(helper.make_node("MaxPool", [x], ["pool"], kernel_shape=[2, 2], strides=[2, 2]))
    x = "pool"
    for i, (cin, cout) in enumerate(((32, 32), (32, 32)), 2):
        x = _conv(f"c{i}", x, cin, cout, rng, inits, nodes, scale)
        nodes.append(helper.make_node("Relu", [x], [f"r{i}"]))
        x = f"r{i}"
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"]))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"]))
    inits.append(numpy_helper.from_array((rng.standard_normal((10, 32)) * 0.3).astype(np.float32), "fc.w"))
    inits.append(numpy_helper.from_array(np.zeros(10, np.float32), "fc.b"))
    nodes.append(helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["logits"], transB=1))
    graph = helper.make_graph(nodes, "two_regions", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                                                   [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    return path


def onnx_macs(path: Path) -> dict[str, int]:
    """Multiply-adds of each Conv / Gemm from the ONNX model's shapes (onnx's shape inference), independently of
    graph_pack: output elements x input channels per group x kernel area, or x the Gemm's reduced dimension."""
    import onnx
    model = onnx.shape_inference.infer_shapes(onnx.load(path))
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in [*model.graph.value_info, *model.graph.input, *model.graph.output]}
    weights = {t.name: list(t.dims) for t in model.graph.initializer}
    out = {}
    for node in model.graph.node:
        if node.op_type == "Conv":
            out[node.output[0]] = int(np.prod(shapes[node.output[0]]) * np.prod(weights[node.input[1]][1:]))
        elif node.op_type == "Gemm":
            out[node.output[0]] = int(np.prod(shapes[node.output[0]]) * weights[node.input[1]][1])
    return out


def ort(path: Path, x: np.ndarray) -> np.ndarray:
    import onnxruntime
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"input": x})[0]


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> tuple[Path, np.ndarray]:
    folder = tmp_path_factory.mktemp("regions")
    x = np.random.default_rng(1).random((1, 3, 16, 16)).astype(np.float32)
    np.save(folder / "x.npy", x)
    return two_region_model(folder / "two.onnx"), x


def test_two_regions_with_a_host_op_between_run_bit_exact_and_close_to_float(model):
    """vta run without region flags: two accelerator regions (the host's max pool between them), the output
    bit-exact against the quantized numpy reference (--check) and close to onnxruntime's float output."""
    path, x = model
    done = vta("run", path.name, "--input", "x.npy", "--out", "y.npz", "--explain", "--check", "--no-layers",
               "--skip-conv", "none", cwd=path.parent)
    assert done.returncode == 0, done.stderr
    assert "check: output matches the numpy reference bit-exactly" in done.stdout
    regions = re.search(r"^(\d+) accelerator region\(s\), found automatically: (.*)$", done.stdout, re.MULTILINE)
    assert regions and regions.group(1) == "2", done.stdout
    assert "R1 2 group(s) from c0" in regions.group(2) and "R2 2 group(s) from c2" in regions.group(2)
    pool = re.search(r"^pool\s+nn.max_pool2d\s+host\s+\[no-template\]", done.stdout, re.MULTILINE)
    assert pool, done.stdout
    y = np.load(path.parent / "y.npz")["output_0"]
    assert cosine(y, ort(path, x)) > 0.99


def test_explain_accounts_for_every_op_and_the_macs(model):
    """--explain names every op of the network with where it ran; every host op has a reason of a known kind; the
    MAC share is what the ONNX model's own shapes give for the offloaded convolutions."""
    path, x = model
    done = vta("run", path.name, "--input", "x.npy", "--explain", "--no-layers", cwd=path.parent)
    assert done.returncode == 0, done.stderr
    graph, params = graph_pack.from_onnx(path)
    qgraph, _ = graph_pack.quantize(graph, params, dataset=[{"input": x}], skip_conv_layers=())   # vta run's default
    rows = {}
    for line in done.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] in qgraph.nodes:
            rows[parts[0]] = line
    assert set(rows) == {n.name for n in qgraph.ops()}
    for line in rows.values():
        if " host " in line:
            kind = re.search(r"host\s+\[([a-z-]+)\]", line)
            assert kind and kind.group(1) in WHY_KINDS, line
    macs = onnx_macs(path)
    # regions found automatically: the stem is quantized and offloaded too (--skip-conv's default without
    # --start/--stop), its 3 input channels padded to a block, which --explain counts beside the model's MACs
    share = re.search(r"MACs on the accelerator: ([\d,]+) of ([\d,]+)", done.stdout)
    assert share and int(share.group(1).replace(",", "")) == sum(macs[f"c{i}"] for i in range(4))   # dense: float
    assert int(share.group(2).replace(",", "")) == sum(macs.values())
    assert not [line for line in rows.values() if " nn.conv2d " in line and " host " in line]
    stem = rows["c0_conv"]
    assert f"executes {16 / 3:.2f}x its MACs (channels padded to whole blocks)" in stem, stem
    assert "--skip-conv default with regions found automatically: every convolution quantized" in done.stdout
    # VTA's convention where the region is named, or with --skip-conv 0
    for flags in (["--start", "qnn.quantize", "--stop", "gap"], ["--skip-conv", "0"]):
        kept = vta("run", path.name, "--input", "x.npy", "--explain", "--no-layers", *flags, cwd=path.parent)
        assert kept.returncode == 0, kept.stderr
        stem = [line for line in kept.stdout.splitlines() if line.startswith("c0_conv ")]
        assert len(stem) == 1 and " host " in stem[0], (flags, stem)   # (before a named region's start: [region])
        assert ("[float] kept in float by the quantizer" in stem[0]) == (flags[0] == "--skip-conv"), stem
        assert ("--skip-conv default with --start/--stop: the first convolution (the stem) kept in float"
                in kept.stdout) == (flags[0] == "--start"), kept.stdout


def test_a_model_the_default_region_refused_now_runs(tmp_path):
    """The digits CNN has no nn.max_pool2d: VTA's default region stopped it at once; regions found automatically
    run it, bit-exact; naming the old region still refuses as before."""
    digits = Path(__file__).parent / "data" / "digits_cnn.onnx"
    done = vta("run", str(digits), "--check", "--no-layers", "--explain", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "check: output matches the numpy reference bit-exactly" in done.stdout
    assert re.search(r"MACs on the accelerator: [\d,]+ of [\d,]+ \(9\d\.\d %\)", done.stdout), done.stdout
    named = vta("run", str(digits), "--start", "nn.max_pool2d", cwd=tmp_path)
    assert named.returncode == 2
    assert "vta: error: --start nn.max_pool2d: no operator matches it" in named.stderr


@pytest.mark.parametrize("arrays, expected", [
    ({"images": np.zeros((1, 3, 16, 16), np.float32)},
     "--calibrate cal.npz: array 'images' is not an input of the model; its inputs: input"),
    ({"input": np.zeros((1, 3, 8, 8), np.float32)},
     ("--calibrate cal.npz: array 'input' has shape (1, 3, 8, 8); the input is (1, 3, 16, 16): give (1, 3, 16, 16) "
     "(one batch) or (K, 1, 3, 16, 16)")),
    ({"input": np.full((1, 3, 16, 16), np.nan, np.float32)},
     "--calibrate cal.npz: array 'input' holds NaN or infinite values"),
])
def test_calibrate_file_refuses_bad_inputs_in_one_line(model, arrays, expected):
    path, _ = model
    np.savez(path.parent / "cal.npz", **arrays)
    done = vta("run", path.name, "--calibrate", "cal.npz", cwd=path.parent)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("vta: error: ")]
    assert len(errors) == 1 and errors[0].startswith("vta: error: " + expected), done.stderr


def test_calibrate_file_and_the_quantization_report(model):
    """--calibrate FILE.npz with K stacked batches: the report counts them, and its figures are the float and
    quantized numpy runs compared here again (cosine, top-1 against onnxruntime's class)."""
    path, _x = model
    batches = np.random.default_rng(3).random((3, 1, 3, 16, 16)).astype(np.float32)
    np.savez(path.parent / "cal3.npz", input=batches)
    done = vta("run", path.name, "--input", "x.npy", "--calibrate", "cal3.npz", "--quant-report", "--check",
               "--no-layers", cwd=path.parent)
    assert done.returncode == 0, done.stderr
    line = re.search(r"quantization \(percentile\) against the float network on 3 calibration batch\(es\): cosine "
                     r"similarity ([\d.]+) .*top-1 agreement ([\d.]+) %", done.stdout)
    assert line, done.stdout
    graph, params = graph_pack.from_onnx(path)
    qgraph, qparams = graph_pack.quantize(graph, params, dataset=[{"input": b} for b in batches])
    q = np.concatenate([graph_pack.run_reference(qgraph, qparams, {"input": b}) for b in batches])
    f = np.concatenate([ort(path, b) for b in batches])
    assert abs(float(line.group(1)) - cosine(q, f)) < 1e-5
    assert float(line.group(2)) == pytest.approx(100 * np.mean(q.argmax(1) == f.argmax(1)))


def test_default_calibration_holds_where_vtas_global_scale_does_not(tmp_path):
    """Activations far inside +-8 (weights a quarter of He's per layer, as an export without batch-norm statistics
    may leave them): VTA's global scale gives them a few of its int8 steps and loses accuracy (cosine 0.93); the
    default (percentile ranges calibrated on the input) keeps it. Both runs are bit-exact on the accelerator."""
    path = two_region_model(tmp_path / "small.onnx", scale=0.25)
    x = np.random.default_rng(2).random((1, 3, 16, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    ref = ort(path, x)
    sims = {}
    for flags in ((), ("--calibrate", "global_scale")):
        done = vta("run", path.name, "--input", "x.npy", "--out", "y.npz", "--check", "--no-layers", *flags,
                   cwd=tmp_path)
        assert done.returncode == 0 and "bit-exactly" in done.stdout, done.stderr
        sims[flags] = cosine(np.load(tmp_path / "y.npz")["output_0"], ref)
    assert sims[()] > 0.99
    assert sims[("--calibrate", "global_scale")] < 0.95


def _depthwise_block(rng) -> tuple:
    """A depthwise 3x3 convolution (batch norm folded into it, as exporters leave it) whose channels' inputs differ in
    range by 16x and whose folded weights make up for it: one per-tensor weight scale, set by the largest weights,
    leaves the small ones a few bits."""
    c = 32
    spread = 2.0 ** rng.uniform(-2, 2, c)
    b = GraphBuilder()
    x = b.input("data", (1, c, 16, 16))
    w = (rng.standard_normal((c, 1, 3, 3)) / spread[:, None, None, None] / 3).astype(np.float32)
    y = b.op("nn.relu", [b.op("nn.conv2d", [x, b.const("w", w)], padding=(1, 1), groups=c)])
    graph, params = b.finish([y])
    samples = [(rng.standard_normal((1, c, 16, 16)) * spread[None, :, None, None]).astype(np.float32)
               for _ in range(2)]
    return graph, params, samples


def test_per_channel_scales_improve_a_depthwise_block():
    """Against the float block (numpy), per-channel weight scales (the default, auto) halve the error of VTA's
    per-tensor scale on held-out input; the quantized block still builds and runs bit-exact."""
    graph, params, (calib, held_out) = _depthwise_block(np.random.default_rng(1))
    want = graph_pack.run_reference(graph, params, {"data": held_out})
    errors = {}
    for per_channel in ("none", "auto"):
        qgraph, qparams = graph_pack.quantize(graph, params, dataset=[{"data": calib}], skip_conv_layers=(),
                                              per_channel=per_channel)
        got = graph_pack.run_reference(qgraph, qparams, {"data": held_out})
        errors[per_channel] = 1 - cosine(got, want)
        mod = graph_pack.build(graph_pack.graph_pack(qgraph, CFG), CFG, qparams)
        mod.run(data=held_out)
        np.testing.assert_array_equal(mod.get_output(0), got)
    assert errors["auto"] < 0.6 * errors["none"], errors


def test_python_api_twice_in_one_process_gives_the_same_plan(model):
    """quantize -> graph_pack -> explain -> build twice in one process: the same regions, explanation and output
    (nothing kept between calls); the named region is VTA's, as before."""
    path, x = model
    results = []
    for _ in range(2):
        graph, params = graph_pack.from_onnx(path)
        qgraph, qparams = graph_pack.quantize(graph, params, dataset=[{"input": x}])
        packed = graph_pack.graph_pack(qgraph, CFG)
        explanation = graph_pack.explain(packed)
        mod = graph_pack.build(packed, CFG, qparams)
        mod.run(input=x)
        results.append((explanation, mod.get_output(0), graph_pack.run_reference(qgraph, qparams, {"input": x})))
    (e1, y1, r1), (e2, y2, _r2) = results
    assert e1 == e2 and len(e1.regions) == 2
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_array_equal(y1, r1)
    named = graph_pack.explain(graph_pack.graph_pack(qgraph, CFG, start_name="pool", stop_name="gap"))
    assert named.named_region and [len(r) for r in named.regions] == [2]
    assert {p.kind for p in named.ops if p.name in ("c1", "r0")} == {"region"}


def test_explain_names_a_capability_the_config_lacks():
    """A convolution whose chain multiplies by a constant: the pynq bitstream's ALU has no MUL, so the host runs it
    and explain says so (kind "capability"); on the sim preset (the whole ISA) the same graph offloads it whole."""
    rng = np.random.default_rng(4)
    b = GraphBuilder()
    x = b.input("data", (1, 16, 8, 8))
    w = (rng.standard_normal((16, 16, 3, 3)) * 0.1).astype(np.float32)
    y = b.op("multiply", [b.op("nn.conv2d", [x, b.const("w", w)], padding=(1, 1), name="conv"),
                          b.const("three", np.float32(3.0))], name="times3")
    graph, params = b.finish([b.op("nn.relu", [y], name="act")])
    data = rng.standard_normal((1, 16, 8, 8)).astype(np.float32)
    qgraph, qparams = graph_pack.quantize(graph, params, dataset=[{"data": data}], skip_conv_layers=())
    on_pynq = {p.name: p for p in graph_pack.explain(graph_pack.graph_pack(qgraph, CFG)).ops}
    assert on_pynq["conv"].where == "host" and on_pynq["conv"].kind == "capability", on_pynq["conv"]
    assert "no ALU MUL" in on_pynq["conv"].why
    sim = load_config("sim")
    packed = graph_pack.graph_pack(qgraph, sim)
    on_sim = graph_pack.explain(packed)
    assert {p.name: p.where for p in on_sim.ops}["times3"] == "accelerator" and on_sim.mac_share == 1.0
    mod = graph_pack.build(packed, sim, qparams)
    mod.run(data=data)
    np.testing.assert_array_equal(mod.get_output(0), graph_pack.run_reference(qgraph, qparams, {"data": data}))


def test_per_channel_scales_on_squeeze_excite_are_all_not_auto():
    """A squeeze-excite block: auto leaves its 1x1 convolutions per-tensor (their output channels share one input, so
    per-channel weight scales gain nothing behind a per-tensor int8 output: the float block's cosine stays within
    1e-4), "all" gives every convolution per-channel scales, and the main one still runs on the accelerator (its
    per-channel requantization is a per-channel add and the epilogue's per-channel shift); every variant runs
    bit-exact."""
    rng = np.random.default_rng(5)
    c = 32
    b = GraphBuilder()
    x = b.input("data", (1, c, 8, 8))
    main = b.op("nn.relu", [b.op("nn.conv2d", [x, b.const("w_main", (rng.standard_normal((c, c, 3, 3)) * 0.08)
                                                          .astype(np.float32))], padding=(1, 1), name="main")])
    squeeze = b.op("nn.global_avg_pool2d", [main], name="squeeze")
    # the reduce convolution's output channels differ 16x in weight range (as batch norms folded into it leave them)
    w1 = (rng.standard_normal((8, c, 1, 1)) * 2.0 ** rng.uniform(-4, 0, 8)[:, None, None, None]).astype(np.float32)
    reduce = b.op("nn.relu", [b.op("nn.conv2d", [squeeze, b.const("w1", w1)], name="reduce")])
    expand = b.op("nn.conv2d", [reduce, b.const("w2", (rng.standard_normal((c, 8, 1, 1)) * 0.5).astype(np.float32))],
                  name="expand")
    graph, params = b.finish([b.op("multiply", [main, b.op("sigmoid", [expand])], name="excite")])
    data = [{"data": rng.standard_normal((1, c, 8, 8)).astype(np.float32)} for _ in range(2)]
    want = graph_pack.run_reference(graph, params, data[1])
    sims = {}
    for per_channel, expected in (("none", set()), ("auto", set()), ("all", {"main", "reduce", "expand"})):
        qgraph, qparams = graph_pack.quantize(graph, params, dataset=data[:1], skip_conv_layers=(),
                                              per_channel=per_channel)
        aligned = {n.name.split(".")[0] for n in qgraph.ops() if n.name.endswith(".channel_shr")}
        assert aligned == expected, (per_channel, aligned)
        got = graph_pack.run_reference(qgraph, qparams, data[1])
        sims[per_channel] = cosine(got, want)
        packed = graph_pack.graph_pack(qgraph, CFG)
        assert "main" in packed.meta["groups"]
        assert (("channel_shr", ) in [e[:1] for e in packed.meta["groups"]["main"].epilogue]) == (per_channel == "all")
        mod = graph_pack.build(packed, CFG, qparams)
        mod.run(**data[1])
        np.testing.assert_array_equal(mod.get_output(0), got)
    assert abs(sims["all"] - sims["none"]) < 1e-4 and sims["auto"] == sims["none"], sims
