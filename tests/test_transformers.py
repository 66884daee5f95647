"""Transformers on the accelerator (issue 40, item 3): the batch_matmul template (attention's product of two
activations, one operand loaded as the weight tile), dense projections through the dense template under ``vta run``'s
defaults (``--dense``), and BERT's integer ids and boolean mask passed through the quantizer.

References: numpy's matmul written here (the template's whole knob space, bit for bit), ``program_check`` (what the
program may touch), the numpy run of the quantized graph (bit-exact), onnxruntime's float output (cosine) and the
MACs of the ONNX models' own shapes. The exported models are tests/data/onnx's BERT-tiny and ViT-tiny with their
seeded weights; ``vta run`` runs as a subprocess once, the Python API twice in one process."""

from __future__ import annotations

import io
import re
import subprocess
import sys

import numpy as np
import pytest
from extras import needs

from hw_config import load_config
from simulator.core import Simulator
from vta import compile_op
from vta.device import SimDevice
from vta.program_check import ProgramRejected, check_program
from vta.runtime import ScheduleError
from vta.templates import TEMPLATES
from vta.templates.batch_matmul import BatchMatmulTemplate

CFG = load_config("pynq")
SMALL = {"data_shape": (3, 5, 40), "kernel_shape": (3, 24, 40)}   # B, M, K and B, N, K: K and N not whole blocks
EPILOGUE = [("shr", 6), ("clip", -127, 127)]


def numpy_batch_matmul(data: np.ndarray, kernel: np.ndarray, shift: int) -> np.ndarray:
    """out[b] = data[b] @ kernel[b].T, arithmetic shift right, clipped to +-127: the template's meaning, written
    again here (not its ``reference``)."""
    acc = np.einsum("bmk,bnk->bmn", data.astype(np.int64), kernel.astype(np.int64))
    return np.clip(acc >> shift, -127, 127).astype(np.int8)


def test_every_config_of_the_space_runs_bit_exact_or_is_refused_with_a_reason():
    rng = np.random.default_rng(0)
    data = rng.integers(-128, 128, SMALL["data_shape"], dtype=np.int8)
    kernel = rng.integers(-128, 128, SMALL["kernel_shape"], dtype=np.int8)
    want = numpy_batch_matmul(data, kernel, 6)
    op0 = compile_op("batch_matmul", CFG, epilogue=EPILOGUE, **SMALL)
    assert [k.name for k in op0.space.knobs] == ["tile_b", "tile_ci", "tile_co", "oc_nthread"]
    ran = refused = 0
    for config in op0.space:
        reason = op0.template.check(config)
        if reason is not None:
            with pytest.raises(ScheduleError, match=re.escape(reason)):
                compile_op("batch_matmul", CFG, epilogue=EPILOGUE, config=config, **SMALL)
            refused += 1
            continue
        op = compile_op("batch_matmul", CFG, epilogue=EPILOGUE, config=config, **SMALL)
        np.testing.assert_array_equal(op.run(data, kernel), want, err_msg=str(config))
        ran += 1
    assert ran > 1 and refused > 0, (ran, refused)


def test_rows_of_several_batch_blocks_and_a_wider_block_run_bit_exact():
    """BATCH = 4 (rows padded to whole batch blocks) and BLOCK = 32 (K and N padded to whole 32-blocks)."""
    rng = np.random.default_rng(1)
    for preset in ("batch4", "block32"):
        op = compile_op("batch_matmul", preset, epilogue=EPILOGUE, data_shape=(2, 6, 24), kernel_shape=(2, 40, 24))
        data = rng.integers(-128, 128, (2, 6, 24), dtype=np.int8)
        kernel = rng.integers(-128, 128, (2, 40, 24), dtype=np.int8)
        np.testing.assert_array_equal(op.run(data, kernel), numpy_batch_matmul(data, kernel, 6), err_msg=preset)


def test_its_program_passes_program_check_and_loads_the_weight_tile_from_the_kernel_buffer():
    device = SimDevice(CFG, Simulator(CFG))
    op = compile_op("batch_matmul", CFG, epilogue=EPILOGUE, device=device, **SMALL)
    regions = device.sim._space.regions()
    page = 4096
    insn = ((max(a + n for a, n in regions) + page) // page * page, max(len(s.insns) for s in op.program.streams) * 16)
    for stream in op.program.streams:
        check_program(stream.insns, CFG, [*regions, insn], (insn[0], len(stream.insns) * 16))
    without_kernel = [r for r in regions if r[0] != op.buffers.kernel.addr]
    with pytest.raises(ProgramRejected, match=r"LOAD WGT"):
        check_program(op.program.streams[0].insns, CFG, [*without_kernel, insn], (insn[0], len(op.program.streams[0].insns) * 16))


def test_bad_workloads_are_refused_naming_what_is_wrong():
    with pytest.raises(ValueError, match=r"must agree on B and K"):
        compile_op("batch_matmul", CFG, data_shape=(2, 4, 16), kernel_shape=(3, 4, 16))
    with pytest.raises(ValueError, match=r"need 3 positive dims"):
        compile_op("batch_matmul", CFG, data_shape=(4, 16), kernel_shape=(4, 16))
    with pytest.raises(ValueError, match=r"epilogue 'bias' is not supported"):
        compile_op("batch_matmul", CFG, epilogue=[("bias",)], data_shape=(2, 4, 16), kernel_shape=(2, 4, 16))


# ---- the exported transformers -----------------------------------------------------------------------------------

def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@needs("onnx", "onnxruntime")
def test_bert_through_vta_run_defaults_offloads_dense_and_attention(tmp_path):
    """``vta run bert_tiny.onnx`` with no region or dense flags: both int64 inputs given by name, every dense and
    batch_matmul on the accelerator (100 % of the MACs the ONNX shapes give), bit-exact against the quantized numpy
    reference (--check) and within cosine 0.98 of onnxruntime's float output."""
    import onnx
    import onnx_models

    model = onnx_models.load("bert_tiny")
    onnx.save(model, tmp_path / "bert.onnx")
    feeds = onnx_models.inputs(model)
    for name, value in feeds.items():
        np.save(tmp_path / f"{name}.npy", value)
    done = subprocess.run([sys.executable, "-m", "vta", "run", "bert.onnx", "--input", "input_ids=input_ids.npy",
                           "--input", "attention_mask=attention_mask.npy", "--explain", "--check", "--no-layers",
                           "--out", "y.npz"], cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    assert "check: output matches the numpy reference bit-exactly" in done.stdout
    placed = re.findall(r"^(\S+)\s+(nn\.dense|nn\.batch_matmul)\s+(\S+)", done.stdout, re.MULTILINE)
    assert sorted({op for _, op, _ in placed}) == ["nn.batch_matmul", "nn.dense"]
    assert len([p for p in placed if p[1] == "nn.batch_matmul"]) == 4 and len(placed) == 13, placed
    assert all(where == "accelerator" for _, _, where in placed), placed
    share = re.search(r"MACs on the accelerator: ([\d,]+) of ([\d,]+)", done.stdout)
    macs = _onnx_macs(model)
    assert share and int(share.group(1).replace(",", "")) == int(share.group(2).replace(",", "")) == macs
    y = np.load(tmp_path / "y.npz")
    np.testing.assert_array_equal(y["input"], feeds["input_ids"])
    np.testing.assert_array_equal(y["input_attention_mask"], feeds["attention_mask"])
    assert _cosine(y["output_0"], onnx_models.onnxruntime_outputs(model, feeds)[0]) > 0.98


def _onnx_macs(model) -> int:
    """Multiply-accumulates of the model's MatMul and Gemm nodes, from the shapes onnx's inference gives."""
    import onnx
    from onnx import numpy_helper

    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]}
    shapes.update({t.name: list(numpy_helper.to_array(t).shape) for t in inferred.graph.initializer})
    total = 0
    for node in inferred.graph.node:
        if node.op_type in ("MatMul", "Gemm"):
            a, out = shapes[node.input[0]], shapes[node.output[0]]
            k = a[-1] if node.op_type == "MatMul" or not any(x.name == "transA" and x.i for x in node.attribute) \
                else a[-2]
            total += int(np.prod(out)) * k
    return total


@needs("onnx", "onnxruntime")
@pytest.mark.parametrize("name", ["bert_tiny", "vit_tiny"])
def test_the_python_api_offloads_dense_and_batch_matmul_bit_exactly(name):
    """from_onnx -> quantize (dense quantized, as vta run's default) -> graph_pack (regions found) -> build -> run:
    every dense and batch_matmul on the accelerator, bit-exact against numpy, close to onnxruntime; run twice in
    one process (the two models), so nothing of one build leaks into the other."""
    import onnx_models

    from graph_pack import build, explain, from_onnx, graph_pack, quantize, run_reference
    from vta import Environment

    env = Environment("pynq")
    model = onnx_models.load(name)
    feeds = onnx_models.inputs(model)
    graph, params = from_onnx(model)
    qgraph, qparams = quantize(graph, params, dataset=[feeds], skip_dense_layer=False, skip_conv_layers=[])
    packed = graph_pack(qgraph, env)
    mod = build(packed, env, qparams, fallback="error")
    mod.run(**feeds)
    np.testing.assert_array_equal(mod.get_output(0), run_reference(qgraph, qparams, feeds))
    placement = explain(packed, mod.fallbacks)
    products = [p for p in placement.ops if p.op in ("nn.dense", "nn.batch_matmul")]
    assert len([p for p in products if p.op == "nn.batch_matmul"]) == 4
    assert all(p.where == "accelerator" for p in products), [(p.name, p.why) for p in products]
    assert placement.mac_share == 1.0 and placement.total_macs == _onnx_macs(model) + _conv_macs(name)
    assert _cosine(mod.get_output(0), onnx_models.onnxruntime_outputs(model, feeds)[0]) > 0.98


def _conv_macs(name: str) -> int:
    """ViT's patch embedding (a 4 x 4 stride-4 conv of 3 channels to 32, 64 patches); BERT has none."""
    return 64 * 32 * 3 * 4 * 4 if name == "vit_tiny" else 0


@needs("onnx")
def test_vta_tune_extracts_batch_matmul_as_a_task_and_its_best_config_builds_bit_exact():
    """The graph's batch_matmul groups are tuning tasks (two workloads of BERT's attention); a few trials of the
    random tuner measure configs of the batch_matmul space with the output checked, and the network built with
    the best records gives the untuned build's output."""
    import onnx_models

    from graph_pack import build, from_onnx, graph_pack, quantize
    from tuning import extract_tasks, tune_tasks
    from tuning.measure import LocalRunner

    model = onnx_models.load("bert_tiny")
    feeds = onnx_models.inputs(model)
    graph, params = from_onnx(model)
    qgraph, qparams = quantize(graph, params, dataset=[feeds], skip_dense_layer=False)
    packed = graph_pack(qgraph, CFG)
    tasks = extract_tasks(packed, CFG, ops=("batch_matmul",))
    assert [t.name for t in tasks] == ["batch_matmul_2x16x16_2x16x16"] and tasks[0].weight == 4
    with LocalRunner(n_parallel=1, check=True) as runner:
        summary = tune_tasks(tasks, tuner="random", n_trial=4, runner=runner, out=io.StringIO())
    state = summary.states[0]
    assert state.trials == 4 and sorted(state.tuner.best_config) == ["oc_nthread", "tile_b", "tile_ci", "tile_co"]
    tuned = build(packed, CFG, qparams, schedules={tasks[0].key: state.tuner.best_config})
    untuned = build(packed, CFG, qparams)
    for mod in (tuned, untuned):
        mod.run(**feeds)
    np.testing.assert_array_equal(tuned.get_output(0), untuned.get_output(0))


@needs("onnx")
def test_dense_defaults_to_on_where_matrix_products_carry_the_macs():
    """--dense not given: on for a transformer (BERT: all its MACs in matrix products), off for a CNN (ResNet-50's
    classifier head, 0.1 % of its MACs: VTA's float head) and off in a region named by --start / --stop (VTA's
    graph_pack); given, it is what it says."""
    import onnx_models

    from graph_pack import from_onnx
    from graph_pack.cli import quantize_dense
    from graph_pack.macs import matrix_share

    bert, _ = from_onnx(onnx_models.load("bert_tiny"))
    cnn, _ = from_onnx(onnx_models.load("resnet50"))
    assert matrix_share(bert) == 1.0 and 0 < matrix_share(cnn) < 0.01
    assert quantize_dense(None, None, None, bert) is True and quantize_dense(None, None, None, cnn) is False
    assert quantize_dense(None, "nn.dense", None, bert) is False and quantize_dense(None, None, "nn.dense", bert) is False
    assert quantize_dense("off", None, None, bert) is False and quantize_dense("on", "nn.conv2d", None, cnn) is True


def test_a_packed_batch_matmul_runs_on_the_host_when_the_template_refuses_it(monkeypatch):
    """build's fallback for a batch_matmul group (its packed layouts unpacked, multiplied, packed again) gives the
    accelerator's bits."""
    from graph_pack import build, graph_pack, quantize, run_reference
    from graph_pack.graph import GraphBuilder

    rng = np.random.default_rng(5)
    b = GraphBuilder()
    q = b.input("q", (2, 20, 24), "float32")
    k = b.input("k", (2, 24, 20), "float32")
    g, p = b.finish([b.op("nn.batch_matmul", [q, k], name="scores")])
    feeds = {"q": rng.standard_normal((2, 20, 24)).astype(np.float32),
             "k": rng.standard_normal((2, 24, 20)).astype(np.float32)}
    qg, qp = quantize(g, p, dataset=[feeds], skip_dense_layer=False)
    packed = graph_pack(qg, CFG)
    assert [grp.op for grp in packed.meta["groups"].values()] == ["batch_matmul"]
    want = run_reference(qg, qp, feeds)
    on_vta = build(packed, CFG, qp)
    on_vta.run(**feeds)
    np.testing.assert_array_equal(on_vta.get_output(0), want)

    class Refusing(BatchMatmulTemplate):
        def default_config(self):
            raise ScheduleError("no config of this template fits (refused for the test)")

    monkeypatch.setitem(TEMPLATES, "batch_matmul", Refusing)
    refusing = build(graph_pack(qg, CFG), CFG, qp, fallback="allow")
    refusing.run(**feeds)
    assert list(refusing.fallbacks) == ["scores"]
    np.testing.assert_array_equal(refusing.get_output(0), want)


def test_broadcast_batch_dims_stay_on_the_host_with_the_reason():
    from graph_pack import graph_pack, quantize
    from graph_pack.graph import GraphBuilder

    b = GraphBuilder()
    q = b.input("q", (2, 16, 16), "float32")
    k = b.input("k", (1, 16, 16), "float32")
    g, p = b.finish([b.op("nn.batch_matmul", [q, k], name="scores")])
    qg, _ = quantize(g, p, skip_dense_layer=False)
    packed = graph_pack(qg, CFG)
    assert not packed.meta["groups"]
    assert "broadcasting is not supported" in packed.meta["notes"]["scores"]


@needs("onnx")
def test_inputs_not_given_are_drawn_ids_over_their_table_and_masks_ones(tmp_path):
    """vta run's inputs for a model of several: token ids uniform over the embedding table's rows (here 100 of
    ``word.weight``'s rows), the attention mask ones (nothing masked), a file given by name taken as it is; a name
    the model lacks or given twice is refused naming the model's inputs."""
    import onnx_models

    from graph_pack import from_onnx
    from graph_pack.cli import model_inputs

    graph, params = from_onnx(onnx_models.load("bert_tiny"))
    rows = params["word.weight"].shape[0]
    drawn = model_inputs(graph, None, np.random.default_rng(0))
    ids, mask = drawn["input_ids"], drawn["attention_mask"]
    assert ids.dtype == np.int64 and 0 <= ids.min() and ids.max() < rows and len(np.unique(ids)) > 4
    np.testing.assert_array_equal(mask, np.ones((1, 16), np.int64))
    given = np.zeros((1, 16), np.int64)
    np.save(tmp_path / "mask.npy", given)
    taken = model_inputs(graph, [("attention_mask", str(tmp_path / "mask.npy"))], np.random.default_rng(0))
    np.testing.assert_array_equal(taken["attention_mask"], given)
    with pytest.raises(ValueError, match=r"no input 'mask'; its inputs: input_ids, attention_mask"):
        model_inputs(graph, [("mask", str(tmp_path / "mask.npy"))], np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"gives input 'input_ids' twice"):
        model_inputs(graph, [(None, "a.npy"), ("input_ids", "b.npy")], np.random.default_rng(0))
