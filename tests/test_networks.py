"""Whole networks through quantize -> graph_pack -> build -> run on the simulator, bit-exact against the
numpy run of the same quantized graph (the issue's acceptance list)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from extras import need

from graph_pack import zoo
from graph_pack.build import build
from graph_pack.graph import GraphBuilder
from graph_pack.pack import graph_pack, offload_report
from graph_pack.quantize import quantize
from graph_pack.reference import run_reference
from hw_config import load_config
from vta.cli import main as vta_main


def _flow(graph, params, cfg, start, stop, **quant):
    qgraph, qparams = quantize(graph, params, **quant)
    packed = graph_pack(qgraph, cfg, start_name=start, stop_name=stop)
    mod = build(packed, cfg, qparams, fallback="error")   # a refused group must fail the test, not hide on the CPU
    x = np.random.default_rng(0).standard_normal(graph[graph.inputs[0]].shape).astype(np.float32)
    mod.run(**{graph.inputs[0]: x})
    ref = run_reference(qgraph, qparams, {graph.inputs[0]: x})
    return mod, packed, ref, x


def _accelerator_steps(mod) -> int:
    """Groups that really ran on the accelerator in the last run (not merely planned for it)."""
    assert mod.fallbacks == {}
    return sum(1 for r in mod.profile() if r["where"] == "accelerator")


def _where(packed) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for row in offload_report(packed):
        out.setdefault(row["where"], []).append(row)
    return out


@pytest.mark.slow
def test_resnet18_224_is_bit_exact_and_close_to_float():
    cfg = load_config("pynq")
    graph, params = zoo.get_model("resnet-18", batch_size=1)
    mod, packed, ref, x = _flow(graph, params, cfg, "nn.max_pool2d", "nn.global_avg_pool2d",
                                global_scale=8.0, skip_conv_layers=[0])
    np.testing.assert_array_equal(mod.get_output(0), ref)
    groups = _where(packed)["accelerator"]
    assert len(groups) == 19  # 16 block convs + 3 downsample convs; the stem conv stays on the CPU
    assert _accelerator_steps(mod) == 19
    assert {r["op"] for r in groups} == {"nn.conv2d"}
    # quantization keeps the network's answer: the float and the accelerator logits agree closely
    float_out = run_reference(graph, params, {"data": x})
    assert np.corrcoef(float_out.ravel(), ref.ravel())[0, 1] > 0.9
    assert mod.cycles > 0 and mod.stats.gemm_counter > 0


def test_mobilenet_grouped_convs_offload():
    cfg = load_config("pynq")
    graph, params = zoo.get_model("mobilenet", batch_size=1, image_shape=(3, 64, 64))
    mod, packed, ref, _ = _flow(graph, params, cfg, *zoo.pack_points("mobilenet"))
    np.testing.assert_array_equal(mod.get_output(0), ref)
    heads = [packed[r["name"]] for r in _where(packed)["accelerator"]]
    assert sum(1 for n in heads if n.attrs.get("groups", 1) > 1) == 13  # every grouped 3x3 conv
    assert any(s.workload["op"] == "group_conv2d" for s in mod.steps if hasattr(s, "workload"))
    assert _accelerator_steps(mod) == 26   # 13 grouped + 13 pointwise convs


def test_dcgan_transposed_convs_offload():
    cfg = load_config("pynq")
    graph, params = zoo.get_model("dcgan", batch_size=1)
    mod, packed, ref, _ = _flow(graph, params, cfg, *zoo.pack_points("dcgan"), skip_conv_layers=[])
    np.testing.assert_array_equal(mod.get_output(0), ref)
    heads = [r["op"] for r in _where(packed)["accelerator"]]
    assert heads.count("nn.conv2d_transpose") == 3 and _accelerator_steps(mod) == 3
    assert mod.get_output(0).shape == (1, 3, 64, 64)


@pytest.mark.parametrize("preset", ["batch4", "block32"])
def test_resnet18_small_on_other_presets(preset):
    cfg = load_config(preset)
    graph, params = zoo.get_model("resnet-18", batch_size=cfg.BATCH, image_shape=(3, 64, 64))
    mod, _, ref, _ = _flow(graph, params, cfg, "nn.max_pool2d", "nn.global_avg_pool2d")
    np.testing.assert_array_equal(mod.get_output(0), ref)
    assert _accelerator_steps(mod) == 19


def test_odd_channel_counts_offload_thanks_to_entry_padding():
    """3 input channels and 20 / 24 channel layers: VTA's graph_pack refuses them, ours pads to blocks."""
    rng = np.random.default_rng(3)
    b = GraphBuilder()
    x = b.input("data", (1, 3, 12, 12))
    y = x
    for i, (ci, co) in enumerate([(3, 20), (20, 24), (24, 5)]):
        w = b.const(f"w{i}", (rng.standard_normal((co, ci, 3, 3)) * np.sqrt(2 / (ci * 9))).astype(np.float32))
        y = b.op("nn.conv2d", [y, w], name=f"conv{i}", padding=1)
        y = b.op("nn.bias_add", [y, b.const(f"b{i}", rng.standard_normal(co).astype(np.float32) * 0.1)])
        y = b.op("nn.relu", [y], name=f"relu{i}")
    y = b.op("nn.global_avg_pool2d", [y], name="gap")
    graph, params = b.finish([y])
    cfg = load_config("pynq")
    mod, packed, ref, _ = _flow(graph, params, cfg, "qnn.quantize", "nn.global_avg_pool2d", skip_conv_layers=[])
    np.testing.assert_array_equal(mod.get_output(0), ref)
    assert [r["name"] for r in _where(packed)["accelerator"]] == ["conv0", "conv1", "conv2"]
    assert _accelerator_steps(mod) == 3
    assert mod.get_output(0).shape == (1, 5, 1, 1)


def test_vta_run_cli_checks_and_prints(capsys):
    status = vta_main(["run", "resnet-18", "--image-size", "64", "--check", "--cpu", "numpy", "--report"])
    out = capsys.readouterr().out
    assert status == 0
    assert "top-5" in out and "matches the numpy reference bit-exactly" in out
    assert "accelerator group(s)" in out and "cycles" in out and "layer1.0.conv1" in out
    # import is not a part of compile (it was listed inside it, larger than the whole); the board figure says
    # where it comes from: here the calibrated board model, not a measurement
    timing = next(line for line in out.splitlines() if line.startswith("import "))
    assert "; compile " in timing and "import" not in timing.split("; compile ", 1)[1]
    assert "ms predicted by the board model" in out and "board ms is measured" not in out
    assert re.search(r"^inference: [\d.]+ ms wall on this machine \(host layers [\d.]+ ms\); accelerator [\d,]+ "
                     r"cycles = [\d.]+ ms at 100 MHz \(simulated\); board [\d.]+ ms predicted by the board model$",
                     out, re.MULTILINE)
    assert "top-5 classes (score) (random weights: the zoo's models are untrained, so these are not predictions):" \
        in out


def test_vta_run_claims_a_board_figure_only_where_there_is_one(capsys):
    """pynq has a board model: its board column and totals say "predicted by the board model". sim has none (the
    'board' figure would only repeat the accelerator's time): no board column, no board claim. --target cpu runs no
    accelerator layer: no accelerator columns or cycles."""
    base = ["run", "resnet-18", "--image-size", "32", "--cpu", "numpy"]
    assert vta_main([*base, "--config", "pynq"]) == 0
    out = capsys.readouterr().out
    table = out[out.index("layer "):]
    assert "board ms" in table.splitlines()[0] and "ms on the board, predicted by the board model);" in table
    assert "no board model" not in out
    # issue 39, item 4: the table says the basis of each figure, once, under it
    legend = ("basis: VTA rows' cycles, time ms and GOPS are simulated (cycles at 100 MHz; GOPS = 2 x MACs / that "
              "time); board ms is the board model's prediction of a call on the board")
    assert legend in table and table.rstrip().endswith("CPU rows' time ms is measured on this machine")
    # GOPS is of the simulated time: layer1.0.conv1 at 32x32 images (8x8, 64 -> 64 channels, 3x3) by hand
    row = next(line for line in table.splitlines() if line.startswith("layer1.0.conv1 ")).split()
    cycles, ms, gops = int(row[4].replace(",", "")), float(row[5]), float(row[6])
    assert ms == pytest.approx(cycles / 100e3, abs=1e-3) and gops == pytest.approx(
        2 * 8 * 8 * 64 * 64 * 9 / (cycles / 100e6) / 1e9, abs=0.05)
    assert vta_main([*base, "--config", "sim"]) == 0
    out = capsys.readouterr().out
    table = out[out.index("layer "):]
    assert "board ms" not in table.splitlines()[0] and "cycles" in table.splitlines()[0]
    # no board model: the run says why, in one line (issue 38: no silent loss of the board figure)
    why = (f"no board model: none is calibrated for {load_config('sim').name}'s design (vta calibrate fits one to "
           "board measurements, docs/calibrate.md); times are the simulator's cycles at the clock")
    assert [line for line in out.splitlines() if "board model" in line and not line.startswith("basis")] == [why]
    assert "basis: VTA rows' cycles, time ms and GOPS are simulated (cycles at 100 MHz; GOPS = 2 x MACs / that " \
        "time); CPU rows' time ms is measured on this machine" in table
    assert "board" not in out[out.index("inference: "):]
    total = r"^total: [\d,]+ cycles = [\d.]+ ms on the accelerator at [\d.]+ MHz; host "
    assert re.search(total, table, re.MULTILINE)
    assert vta_main([*base, "--target", "cpu"]) == 0
    out = capsys.readouterr().out
    table = out[out.index("layer "):]
    assert table.splitlines()[0].split() == ["layer", "op", "where", "time", "ms"]
    assert "cycles" not in table
    assert re.search(r"^total: host [\d.]+ ms \(no accelerator layer\)$", table, re.MULTILINE)


def test_top5_names_imagenet_classes_and_says_which_weights_are_random():
    """A 1000-class output is printed with ImageNet's class names (class 0 is the tench, 1 the goldfish, 999
    toilet tissue, as in ImageNet's synset list), beside the index; another width with indices only."""
    from graph_pack.cli import _top5
    y = np.zeros((1, 1000), np.float32)
    y[0, [0, 1, 999, 417, 2]] = [5, 4, 3, 2, 1]
    out = _top5(y, random_weights=False)
    first = ("  image 0: tench #0 (5.0000), goldfish #1 (4.0000), toilet tissue #999 (3.0000), balloon #417 (2.0000), "
             "great white shark #2 (1.0000)")
    assert out.splitlines() == ["top-5 classes (score):", first]
    assert "not predictions" in _top5(y, random_weights=True)
    assert _top5(np.eye(1, 10, 3, dtype=np.float32), False).splitlines()[1].startswith("  image 0: 3 (1.0000), 0 (")


def test_vta_run_threads_flag_sets_the_simulators_gemm_threads(capsys):
    """--threads reaches the simulator (results do not depend on it); a count outside 1..64 is refused."""
    outs = {}
    for threads in ("1", "3"):
        assert vta_main(["run", "resnet-18", "--image-size", "32", "--no-layers", "--threads", threads]) == 0
        out = capsys.readouterr().out
        assert f"{threads} GEMM thread(s)" in out
        outs[threads] = out.split("top-5", 1)[1].split("\nimport ", 1)[0]
    assert outs["1"] == outs["3"]   # the same top-5 scores
    assert vta_main(["run", "resnet-18", "--threads", "0"]) == 2
    assert "--threads: 0 is out of range; the GEMM thread count is 1..64" in capsys.readouterr().err


def test_vta_run_cli_rejects_unknown_model(capsys):
    assert vta_main(["run", "no-such-net"]) == 2
    err = capsys.readouterr().err
    assert "resnet-18" in err  # the message lists what is available


def test_gluon_resnet18_v1_flow_of_the_tutorials():
    """VTA's deploy/tune tutorials: Gluon resnet18_v1 -> quantize -> graph_pack(max_pool2d .. global_avg_pool2d)."""
    from graph_pack.frontend_mxnet import from_mxnet
    mx = need("mxnet")
    mx.random.seed(0)
    block = mx.gluon.model_zoo.vision.get_model("resnet18_v1", pretrained=False, prefix="flow_")
    block.initialize(mx.init.Xavier(magnitude=2.0))
    graph, params = from_mxnet(block, shape={"data": (1, 3, 64, 64)})
    cfg = load_config("pynq")
    mod, packed, ref, _ = _flow(graph, params, cfg, "nn.max_pool2d", "nn.global_avg_pool2d")
    np.testing.assert_array_equal(mod.get_output(0), ref)
    assert len(_where(packed)["accelerator"]) == 19 and _accelerator_steps(mod) == 19


def _tiny_onnx(path):
    """A conv whose 6x3 input, 5x5 kernel and stride 3 leave 2 output positions: fewer than VTA's GEMM
    pipeline needs, so the template refuses it although graph_pack plans it for the accelerator."""
    onnx = need("onnx")
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    w0 = numpy_helper.from_array((rng.standard_normal((16, 12, 5, 5)) * 0.1).astype(np.float32), "w0")
    w1 = numpy_helper.from_array((rng.standard_normal((16, 16, 1, 1)) * 0.2).astype(np.float32), "w1")
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], kernel_shape=[5, 5], strides=[3, 3], pads=[2] * 4),
             helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("Conv", ["r0", "w1"], ["c1"], kernel_shape=[1, 1]),
             helper.make_node("GlobalAveragePool", ["c1"], ["y"])]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 12, 6, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 1, 1])], [w0, w1])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


def test_vta_run_names_each_host_fallback_and_can_refuse_them(tmp_path, capsys):
    _tiny_onnx(tmp_path / "tiny.onnx")
    args = ["run", str(tmp_path / "tiny.onnx"), "--start", "qnn.quantize", "--stop", "nn.global_avg_pool2d",
            "--skip-conv", "none", "--check"]
    assert vta_main(args) == 0
    out = capsys.readouterr().out
    fallbacks = [line for line in out.splitlines() if line.startswith("host fallback:")]
    assert len(fallbacks) == 1 and "'c0'" in fallbacks[0] and "no config of this template fits" in fallbacks[0]
    assert "bit-exactly" in out
    assert vta_main([*args, "--fallback", "error"]) == 2
    err = capsys.readouterr().err
    assert "accelerator group 'c0'" in err and "refused every config" in err


@pytest.mark.parametrize("value, message", [("-1", "negative"), ("x", "not a conv layer index")])
def test_vta_run_skip_conv_refuses_bad_values(value, message, capsys):
    assert vta_main(["run", "resnet-18", "--skip-conv", value]) == 2
    assert message in capsys.readouterr().err


def test_vta_run_skip_conv_none_offloads_every_conv(capsys):
    base = ["run", "resnet-18", "--image-size", "32", "--start", "qnn.quantize", "--no-layers", "--report"]
    assert vta_main([*base, "--skip-conv", "none"]) == 0
    assert "20 accelerator group(s)" in capsys.readouterr().out   # the stem conv too
    assert vta_main(base) == 0
    assert "19 accelerator group(s)" in capsys.readouterr().out   # by default the stem stays in float


def test_build_runs_every_accelerator_group_on_the_device_it_is_given():
    from graph_pack.graph import GraphError
    from vta.device import SimDevice

    class Counting(SimDevice):
        runs = 0

        def run(self, insns, **kw):
            Counting.runs += 1
            return super().run(insns, **kw)

    cfg = load_config("pynq")
    graph, params = zoo.get_model("resnet-18", batch_size=1, image_shape=(3, 32, 32))
    qgraph, qparams = quantize(graph, params)
    packed = graph_pack(qgraph, cfg, start_name="nn.max_pool2d", stop_name="nn.global_avg_pool2d")
    device = Counting(cfg)
    mod = build(packed, cfg, qparams, device=device, fallback="error")
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    mod.run(data=x)
    assert mod.device is device and Counting.runs >= 19 and device.last_stats is not None
    np.testing.assert_array_equal(mod.get_output(0), run_reference(qgraph, qparams, {"data": x}))
    with pytest.raises(GraphError, match="the device is a"):
        build(packed, cfg, qparams, device=SimDevice(load_config("batch4")))
    with pytest.raises(TypeError, match="is not a device"):
        build(packed, cfg, qparams, device="pynq")


def test_vta_run_saves_its_outputs_whole(tmp_path):
    """--out: the input and every output in one .npz (DCGAN's images here), the numpy reference's bits (--check
    passes), written only after the run; an unwritable path is refused before any work."""
    import subprocess
    import sys
    out = tmp_path / "dcgan.npz"
    done = subprocess.run([sys.executable, "-m", "vta", "run", "dcgan", "--check", "--no-layers", "--out", str(out)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert "matches the numpy reference bit-exactly" in done.stdout and f"to {out}" in done.stdout
    with np.load(out) as z:
        assert sorted(z) == ["input", "output_0"] and z["input"].shape == (1, 100)
        assert z["output_0"].shape == (1, 3, 64, 64) and z["output_0"].dtype == np.float32
    refused = subprocess.run([sys.executable, "-m", "vta", "run", "dcgan", "--out", str(tmp_path / "no" / "x.npz")],
                             capture_output=True, text=True, timeout=60, check=False)
    assert refused.returncode == 2 and refused.stderr.strip().endswith("does not exist")
    assert "compile" not in refused.stdout and not (tmp_path / "no").exists()
