"""Hostile and malformed ONNX files: every one is refused with one line naming the file and the problem,
before the allocation or work it would cause, through ``from_onnx`` and through ``vta run``.

Each offending model is generated here with onnx.helper. The cases that would eat memory if a check
regressed (constant-folding bombs, huge declared inputs, padded or dilated kernel inputs) run in a
subprocess under ``RLIMIT_AS`` of 2 GiB, so a regression fails the test instead of taking the machine.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from extras import need

from graph_pack.frontend_onnx import DEFAULT_MAX_MODEL_BYTES, DEFAULT_MAX_TENSOR_BYTES, from_onnx
from graph_pack.graph import GraphError
from vta.cli import main as vta_main

onnx = need("onnx")
TensorProto, helper, numpy_helper = onnx.TensorProto, onnx.helper, onnx.numpy_helper

MEMORY_LIMIT = 2 << 30   # address space of the subprocesses: a regression dies here, not the machine
ROOT = Path(__file__).resolve().parent.parent


# ---- models ------------------------------------------------------------------------------------------------

def model(nodes, inputs=None, inits=None, opset: int = 17, outputs=("y",)):
    """A ModelProto without shape inference or the checker (some of these models are meant to be bad).
    ``inputs``: name -> shape (float32; strings are symbolic dims)."""
    ins = [helper.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in (inputs or {}).items()]
    outs = [helper.make_empty_tensor_value_info(o) for o in outputs]
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()]
    graph = helper.make_graph(nodes, "limits", ins, outs, inits)
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", opset)])


def const(name: str, value) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value)))


def pad_bomb(length: int):
    """A one-element constant padded to ``length + 1`` float32s at import (constant folding)."""
    return model([const("c", np.zeros(1, np.float32)), const("p", np.array([0, length], np.int64)),
                  helper.make_node("Pad", ["c", "p"], ["y"])])


def upsample_bomb(scale: int):
    """A 1x1 constant image upsampled scale x scale at import."""
    return model([const("c", np.zeros((1, 1, 1, 1), np.float32)),
                  const("s", np.array([1, 1, scale, scale], np.float32)),
                  helper.make_node("Upsample", ["c", "s"], ["y"])], opset=9)


def resize_bomb():
    """Resize of a real input: its index arrays (size x scale) would be made before the node."""
    return model([helper.make_node("Resize", ["x", "", "s"], ["y"], mode="nearest",
                                   coordinate_transformation_mode="asymmetric", nearest_mode="floor")],
                 {"x": [1, 1, 4, 4]}, {"s": np.array([1, 1, 1e9, 1e9], np.float32)})


def pool_pad_bomb():
    """A small output from a window as large as its padding: the padded input would be 37 GiB."""
    return model([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[100_000, 100_000],
                                   pads=[50_000] * 4)], {"x": [1, 1, 4, 4]})


def conv_transpose_bomb():
    """A 1x1 output of a transposed conv whose stride-dilated input would have 10^10 elements."""
    return model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[100_000, 100_000],
                                   pads=[50_000] * 4)], {"x": [1, 1, 2, 2]}, {"w": np.ones((1, 1, 1, 1), np.float32)})


def constant_of_shape_bomb():
    """Zeros of a shape given as a 16-byte constant: 4 TiB at import."""
    return model([const("s", np.array([1 << 20, 1 << 20], np.int64)),
                  helper.make_node("ConstantOfShape", ["s"], ["y"])])


def range_bomb():
    """arange(2**40) at import, from three scalars."""
    return model([const("a", np.int64(0)), const("b", np.int64(1 << 40)), const("d", np.int64(1)),
                  helper.make_node("Range", ["a", "b", "d"], ["y"])])


def expand_bomb():
    """A real input broadcast to 2**17 x 2**17."""
    return model([helper.make_node("Expand", ["x", "s"], ["y"])], {"x": [1, 1]},
                 {"s": np.array([1 << 17, 1 << 17], np.int64)})


def attention_scores_bomb():
    """Attention over a long sequence: its (S, S) scores would be 64 GiB, the inputs are 3 MiB."""
    return model([helper.make_node("Attention", ["x", "x", "x"], ["y"])], {"x": [1, 1, 1 << 17, 4]}, opset=23)


def relu_model(shape):
    return model([helper.make_node("Relu", ["x"], ["y"])], {"x": shape})


def conv_model(shape):
    """conv -> relu -> max pool -> conv -> relu -> global pool -> flatten: runs with vta run's defaults."""
    rng = np.random.default_rng(0)
    w0 = (rng.standard_normal((16, 3, 3, 3)) * 0.3).astype(np.float32)
    w1 = (rng.standard_normal((16, 16, 3, 3)) * 0.1).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1] * 4), helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("MaxPool", ["r0"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p", "w1"], ["c1"], pads=[1] * 4), helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("GlobalAveragePool", ["r1"], ["g"]), helper.make_node("Flatten", ["g"], ["y"])]
    return model(nodes, {"x": shape}, {"w0": w0, "w1": w1})


def save(m, path: Path) -> Path:
    path.write_bytes(m.SerializeToString())
    return path


# ---- running under a memory limit --------------------------------------------------------------------------

def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run_limited(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300, env=env, check=False,
                          preexec_fn=_limit_memory)


API = """
import sys
from graph_pack.frontend_onnx import from_onnx
from graph_pack.graph import GraphError
try:
    from_onnx(sys.argv[1], batch=1)
except GraphError as e:
    print(e)
    sys.exit(3)
print("imported")
"""


def api_refuses(path: Path, *fragments: str) -> str:
    """from_onnx(path) in a memory-limited subprocess raises one GraphError line holding ``fragments``."""
    proc = run_limited([sys.executable, "-c", API, str(path)], path.parent)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 3, (proc.returncode, proc.stdout, proc.stderr)
    message = proc.stdout.strip()
    assert "\n" not in message and message.startswith(f"{path}: "), message
    for f in fragments:
        assert f in message, (f, message)
    return message


def cli_refuses(argv: list[str], cwd: Path, *fragments: str) -> str:
    """``vta ARGV`` in a memory-limited subprocess: exit 2, one ``vta: error:`` line, no traceback."""
    proc = run_limited([sys.executable, "-m", "vta", *argv], cwd)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vta: error: "), proc.stderr
    for f in fragments:
        assert f in lines[0], (f, lines[0])
    return lines[0]


def test_the_memory_limit_is_real(tmp_path):
    """The harness itself: a 3 GiB allocation fails under the limit (so the tests below mean something)."""
    proc = run_limited([sys.executable, "-c", "import numpy; numpy.ones(3 << 30, numpy.uint8)"], tmp_path)
    assert proc.returncode != 0 and "MemoryError" in proc.stderr


# ---- memory bombs ------------------------------------------------------------------------------------------

BOMBS = {
    "pad_1GiB": (lambda: pad_bomb((1 << 28) - 1), ["(Pad)", "(268435456,) float32", "1.0 GiB", "512.0 MiB",
                                                    "max_tensor_bytes", "--max-tensor-mb"]),
    "pad_52GiB": (lambda: pad_bomb(14_000_000_000), ["(Pad)", "52.2 GiB"]),
    "upsample_4GiB": (lambda: upsample_bomb(32768), ["(Upsample)", "(1, 1, 32768, 32768)", "4.0 GiB"]),
    "resize_input": (resize_bomb, ["(Resize)", "the output (1, 1, 4000000000, 4000000000)"]),
    "pool_padding": (pool_pad_bomb, ["(MaxPool)", "the padded input of the nn.max_pool2d", "37.3 GiB"]),
    "conv_transpose_stride": (conv_transpose_bomb, ["(ConvTranspose)", "padded input of the nn.conv2d_transpose"]),
    "huge_input": (lambda: relu_model([1, 3, 100_000, 100_000]), ["input 'x' (1, 3, 100000, 100000)", "111.8 GiB"]),
    "constant_of_shape": (constant_of_shape_bomb, ["(ConstantOfShape)", "the output (1048576, 1048576)", "4096.0 GiB"]),
    "range": (range_bomb, ["(Range)", "the output (1099511627776,) int64", "8192.0 GiB"]),
    "expand": (expand_bomb, ["(Expand)", "the broadcast_to result 'y' (131072, 131072)", "64.0 GiB"]),
    "attention_scores": (attention_scores_bomb, ["(Attention)", "(1, 1, 131072, 131072)", "64.0 GiB"]),
}


@pytest.mark.parametrize("name", list(BOMBS))
def test_bombs_are_refused_before_allocating(name, tmp_path):
    make, fragments = BOMBS[name]
    path = save(make(), tmp_path / f"{name}.onnx")
    api_refuses(path, *fragments)


def test_the_constant_folding_bomb_is_a_few_hundred_bytes(tmp_path):
    m = pad_bomb(14_000_000_000)
    assert len(m.SerializeToString()) < 300
    with pytest.raises(GraphError, match=r"node <Pad producing 'y'> \(Pad\): the nn.pad result 'y'.*52.2 GiB"):
        from_onnx(m)


@pytest.mark.parametrize("name", ["pad_52GiB", "huge_input"])
def test_vta_run_refuses_bombs(name, tmp_path):
    make, fragments = BOMBS[name]
    path = save(make(), tmp_path / f"{name}.onnx")
    cli_refuses(["run", str(path)], tmp_path, str(path), *fragments)


def test_vta_run_refuses_a_20GiB_declared_input(tmp_path):
    path = save(relu_model([1, 5, 32768, 32768]), tmp_path / "big.onnx")
    cli_refuses(["run", str(path)], tmp_path, "input 'x' (1, 5, 32768, 32768) float32 would take 20.0 GiB")


def test_the_limits_are_arguments(tmp_path):
    m = model([helper.make_node("Add", ["x", "w"], ["y"])], {"x": [64, 256]},
              {"w": np.ones((64, 256), np.float32)})   # a 64 KiB initializer
    with pytest.raises(GraphError, match=r"initializer 'w' \(64, 256\) float32 would take 64.0 KiB, over the "
                                         r"32.0 KiB limit on one tensor"):
        from_onnx(m, max_tensor_bytes=32 << 10)
    graph, params = from_onnx(m)
    assert graph["x"].shape == (64, 256) and params["w"].shape == (64, 256)
    with pytest.raises(GraphError, match="would bring the model's constants to 64.0 KiB, over the 16.0 KiB limit"):
        from_onnx(m, max_model_bytes=16 << 10)
    for bad in (0, -1, 1.5, "1", True):
        with pytest.raises(GraphError, match="max_tensor_bytes must be a positive integer"):
            from_onnx(m, max_tensor_bytes=bad)
    assert DEFAULT_MAX_TENSOR_BYTES == 512 << 20 and DEFAULT_MAX_MODEL_BYTES == 2 << 30


def test_many_folded_constants_count_against_the_model_limit():
    nodes = [const("c", np.zeros(1, np.float32)), const("p", np.array([0, 20_000], np.int64))]
    nodes += [helper.make_node("Pad", ["c", "p"], [f"y{k}"]) for k in range(4)]   # 80 KB each
    nodes.append(helper.make_node("Concat", [f"y{k}" for k in range(4)], ["y"], axis=0))
    with pytest.raises(GraphError, match=r"node <Pad producing 'y2'> \(Pad\): the folded value would bring the "
                                         r"model's constants to 234.4 KiB, over the 200.0 KiB limit"):
        from_onnx(model(nodes), max_model_bytes=200 << 10)
    _, params = from_onnx(model(nodes))
    assert params["y"].shape == (80004,)


def test_initializer_sizes_are_checked_before_reading_them():
    huge = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[1 << 20, 1 << 20], raw_data=b"\0" * 16)
    m = model([helper.make_node("Add", ["x", "w"], ["y"])], {"x": [4]})
    m.graph.initializer.append(huge)
    with pytest.raises(GraphError, match=r"initializer 'w' \(1048576, 1048576\) float32 would take 4096.0 GiB"):
        from_onnx(m)
    small = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4, 4], raw_data=b"\0" * 16)
    del m.graph.initializer[:]
    m.graph.initializer.append(small)
    with pytest.raises(GraphError, match=r"initializer 'w' \(4, 4\) float32: its data does not match its shape"):
        from_onnx(m)
    m = model([helper.make_node("Constant", [], ["y"], value=huge)])
    with pytest.raises(GraphError, match=r"node <Constant producing 'y'> \(Constant\): tensor attribute 'value' "
                                         r"\(1048576, 1048576\) float32 would take 4096.0 GiB"):
        from_onnx(m)


def test_costly_folds_stay_in_the_graph():
    """A convolution over constants is folded when cheap, kept as a node (run with the model) when not."""
    rng = np.random.default_rng(0)
    cheap = model([helper.make_node("Conv", ["a", "w"], ["y"])],
                  inits={"a": rng.standard_normal((1, 3, 8, 8)).astype(np.float32),
                         "w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32)})
    graph, params = from_onnx(cheap)
    assert graph["y"].op == "const" and params["y"].shape == (1, 4, 6, 6)
    costly = model([helper.make_node("Conv", ["a", "w"], ["y"])],   # 1.2e9 multiply-adds
                   inits={"a": np.ones((1, 16, 128, 128), np.float32), "w": np.ones((64, 16, 9, 9), np.float32)})
    graph, _ = from_onnx(costly)
    assert graph["y"].op == "nn.conv2d" and graph["y"].shape == (1, 64, 120, 120)


# ---- dynamic, zero and negative dimensions -----------------------------------------------------------------

def test_only_the_batch_dimension_is_filled():
    m = relu_model(["N", 3, "H", "W"])
    with pytest.raises(GraphError, match=r"input 'x': dimension 2 is dynamic \(symbolic 'H'\); only dimension 0 "
                                         r"\(the batch\) is filled from batch=; give its whole shape with "
                                         r"shape=\{'x': \(...\)\} \(vta run: --shape x=D0,D1,...\)"):
        from_onnx(m, batch=4)
    with pytest.raises(GraphError, match=r"dimension 0 is dynamic \(symbolic 'N'\); pass batch= to fill it"):
        from_onnx(m)
    graph, _ = from_onnx(m, shape={"x": (2, 3, 8, 6)}, batch=4)
    assert graph["x"].shape == (2, 3, 8, 6)
    graph, _ = from_onnx(relu_model(["N", 3, 8, 6]), batch=4)
    assert graph["x"].shape == (4, 3, 8, 6)


@pytest.mark.parametrize("shape, match", [
    ([1, 0, 8, 8], r"dimension 1 is declared as 0; only dimension 0"),
    ([1, 3, 8, -1], r"dimension 3 is declared as -1; only dimension 0"),
    ([1, 3, None, 8], r"dimension 2 is dynamic \(unknown\)"),
])
def test_zero_negative_and_unknown_dimensions_are_errors(shape, match):
    with pytest.raises(GraphError, match=match):
        from_onnx(relu_model(shape), batch=2)


def test_a_zero_batch_dimension_is_filled():
    graph, _ = from_onnx(relu_model([0, 3, 8, 8]), batch=2)
    assert graph["x"].shape == (2, 3, 8, 8)


@pytest.mark.parametrize("kwargs, match", [
    ({"shape": {"x": (1, 0, 8, 8)}}, r"shape\['x'\] = \(1, 0, 8, 8\): give a sequence of positive integers"),
    ({"shape": {"x": (1, 3, 8.5, 8)}}, "positive integers"),
    ({"shape": {"x": 5}}, "positive integers"),
    ({"batch": 0}, "batch must be a positive integer, got 0"),
])
def test_shape_and_batch_arguments_are_checked(kwargs, match):
    with pytest.raises(GraphError, match=match):
        from_onnx(relu_model(["N", 3, 8, 8]), **kwargs)


# ---- files that are not ONNX models ------------------------------------------------------------------------

def test_empty_file(tmp_path):
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    with pytest.raises(GraphError, match=f"^{path}: the file is empty \\(0 bytes\\), not an ONNX model$"):
        from_onnx(path)
    with pytest.raises(GraphError, match="the model has no graph"):
        from_onnx(onnx.ModelProto())


@pytest.mark.parametrize("data", [np.random.default_rng(7).integers(0, 256, 4096, dtype=np.uint8).tobytes(),
                                  b"hello, I am a text file\n", b"\x08\x07"], ids=["random", "text", "header_only"])
def test_non_onnx_bytes(data, tmp_path):
    path = tmp_path / "junk.onnx"
    path.write_bytes(data)
    with pytest.raises(GraphError, match=f"^{path}: not an ONNX model") as err:
        from_onnx(path)
    assert "\n" not in str(err.value)


def test_truncated_file(tmp_path):
    m = model([helper.make_node("Add", ["x", "w"], ["y"])], {"x": [256]}, {"w": np.ones(256, np.float32)})
    data = m.SerializeToString()
    for cut in (len(data) // 3, len(data) // 2, len(data) - 40):
        path = tmp_path / "cut.onnx"
        path.write_bytes(data[:cut])
        with pytest.raises(GraphError, match=f"^{path}: not an ONNX model, or a truncated one"):
            from_onnx(path)


def test_missing_file_is_an_oserror(tmp_path):
    with pytest.raises(FileNotFoundError):
        from_onnx(tmp_path / "nothing.onnx")


# ---- external data -----------------------------------------------------------------------------------------

W = np.arange(48, dtype=np.float32).reshape(4, 12)


def external_model(location: str, offset: int | None = None, length: int | None = None):
    """x (3, 12) @ W.T with W's data in an external file at ``location``."""
    m = model([helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)], {"x": [3, 12]}, {"w": W})
    w = m.graph.initializer[0]
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    entries = {"location": location, "offset": offset, "length": length}
    for key, value in entries.items():
        if value is not None:
            w.external_data.add(key=key, value=str(value))
    return m


def test_external_data_inside_the_directory_works(tmp_path):
    x = np.random.default_rng(0).standard_normal((3, 12)).astype(np.float32)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "w.bin").write_bytes(b"\xff" * 8 + W.tobytes() + b"\xff" * 4)
    path = save(external_model("data/w.bin", offset=8, length=W.nbytes), tmp_path / "m.onnx")
    _, params = from_onnx(path)
    np.testing.assert_array_equal(params["w"], W)
    # onnx's own writer: every tensor in one file beside the model
    saved = tmp_path / "saved"
    saved.mkdir()
    inline = model([helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)], {"x": [3, 12]}, {"w": W})
    onnx.save_model(onnx.ModelProto.FromString(inline.SerializeToString()), saved / "m.onnx",
                    save_as_external_data=True, all_tensors_to_one_file=True, location="weights.bin",
                    size_threshold=0)
    assert (saved / "weights.bin").exists()
    from graph_pack import run_reference
    np.testing.assert_array_equal(run_reference(*from_onnx(saved / "m.onnx"), {"x": x}),
                                  run_reference(*from_onnx(inline), {"x": x}))


@pytest.mark.parametrize("location, match", [
    ("../../etc/passwd", "external data '../../etc/passwd' lies outside the model's directory"),
    ("/etc/passwd", "external data '/etc/passwd' lies outside the model's directory"),
    ("link.bin", "external data 'link.bin' lies outside the model's directory"),
    ("nothere.bin", "external data file 'nothere.bin' is missing"),
    ("", "is marked as external data but names no location"),
])
def test_external_data_must_be_a_file_in_the_directory(location, match, tmp_path):
    outside = tmp_path / "outside.bin"
    outside.write_bytes(W.tobytes())
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "link.bin").symlink_to(outside)
    path = save(external_model(location), model_dir / "m.onnx")
    with pytest.raises(GraphError, match=f"^{path}: tensor 'w'.*{match}") as err:
        from_onnx(path)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("offset, length, match", [
    (0, 100, r"holds 100 bytes, but its shape \(4, 12\) needs 192"),
    (None, None, r"holds 200 bytes, but its shape \(4, 12\) needs 192"),
    (180, 192, r"range offset=180, length=192 does not fit in 'w.bin' \(200 bytes\)"),
    ("x", 192, "offset/length 'x'/'192' are not integers"),
])
def test_external_data_ranges_are_checked(offset, length, match, tmp_path):
    (tmp_path / "w.bin").write_bytes(b"\0" * 200)
    path = save(external_model("w.bin", offset, length), tmp_path / "m.onnx")
    with pytest.raises(GraphError, match=match):
        from_onnx(path)


def test_external_data_size_is_checked_before_reading(tmp_path):
    m = external_model("w.bin")
    m.graph.initializer[0].dims[:] = [1 << 20, 1 << 20]
    (tmp_path / "w.bin").write_bytes(b"\0" * 16)
    path = save(m, tmp_path / "m.onnx")
    with pytest.raises(GraphError, match=r"tensor 'w' \(1048576, 1048576\) float32 would take 4096.0 GiB"):
        from_onnx(path)


def test_unloaded_external_data_in_a_modelproto_is_an_error():
    with pytest.raises(GraphError, match=r"tensor\(s\) \['w'\] keep their data in external files that were not "
                                         r"loaded; pass the model's path"):
        from_onnx(external_model("w.bin"))


# ---- vta run -----------------------------------------------------------------------------------------------

BAD_FILES = {
    "empty": (lambda d: b"", ["the file is empty"]),
    "random": (lambda d: np.random.default_rng(1).integers(0, 256, 999, dtype=np.uint8).tobytes(),
               ["not an ONNX model"]),
    "etc_passwd": (lambda d: external_model("../../etc/passwd").SerializeToString(),
                   ["tensor 'w'", "lies outside the model's directory"]),
    "dynamic_hw": (lambda d: relu_model(["N", 3, "H", "W"]).SerializeToString(),
                   ["input 'x': dimension 2 is dynamic (symbolic 'H')", "--shape x=D0,D1,..."]),
    "zero_dim": (lambda d: relu_model([1, 3, 0, 8]).SerializeToString(), ["dimension 2 is declared as 0"]),
    "pool_padding": (lambda d: pool_pad_bomb().SerializeToString(), ["the padded input of the nn.max_pool2d"]),
}


@pytest.mark.parametrize("name", list(BAD_FILES))
def test_vta_run_refuses_bad_files_in_one_line(name, tmp_path):
    make, fragments = BAD_FILES[name]
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(make(tmp_path))
    cli_refuses(["run", str(path)], tmp_path, f"vta: error: {path}: ", *fragments)


def test_vta_run_shape_fixes_dynamic_dimensions(tmp_path, capsys):
    path = save(conv_model(["N", 3, "H", "W"]), tmp_path / "dyn.onnx")
    assert vta_main(["run", str(path), "--shape", "x=1,3,16,12", "--skip-conv", "none", "--no-layers",
                     "--cpu", "numpy", "--check"]) == 0
    out = capsys.readouterr().out
    assert "input (1, 3, 16, 12)" in out and "bit-exactly" in out


def test_vta_run_limit_flags(tmp_path, capsys):
    path = save(model([helper.make_node("Add", ["x", "w"], ["y"])], {"x": [512, 1024]},
                      {"w": np.ones((512, 1024), np.float32)}), tmp_path / "w2mib.onnx")
    assert vta_main(["run", str(path), "--max-tensor-mb", "1"]) == 2
    assert "initializer 'w' (512, 1024) float32 would take 2.0 MiB, over the 1.0 MiB limit" in capsys.readouterr().err
    assert vta_main(["run", str(path), "--max-model-mb", "3"]) == 2
    assert "over the 3.0 MiB limit on a model" in capsys.readouterr().err
    # with room enough the import succeeds (and the run stops at the next, unrelated, check)
    assert vta_main(["run", str(path), "--max-tensor-mb", "4", "--start", "no.such.op"]) == 2
    err = capsys.readouterr().err
    assert "limit" not in err and "no.such.op" in err


@pytest.mark.parametrize("argv, fragments", [
    (["--batch", "0"], ["argument --batch: 0 is out of range; the batch size is 1..4096"]),
    (["--batch", "100000"], ["argument --batch: 100000 is out of range"]),
    (["--batch", "two"], ["argument --batch: 'two' is not an integer"]),
    (["--global-scale", "1e308"], ["argument --global-scale: 1e308 is out of range",
                                   "the activation range is 2^-16..2^16"]),
    (["--global-scale", "inf"], ["argument --global-scale: 'inf' is not a finite number"]),
    (["--global-scale", "nan"], ["argument --global-scale: 'nan' is not a finite number"]),
    (["--global-scale", "0"], ["argument --global-scale: 0 is out of range"]),
    (["--image-size", "100000"], ["argument --image-size: 100000 is out of range; the image size is 8..4096"]),
    (["--image-size", "4"], ["argument --image-size: 4 is out of range"]),
    (["--max-tensor-mb", "0"], ["argument --max-tensor-mb: 0 is out of range"]),
    (["--shape", "1,3,224,224"], ["argument --shape: '1,3,224,224': give NAME=D0,D1,..."]),
    (["--shape", "x=1,a"], ["argument --shape: 'x=1,a': the dimensions must be integers"]),
    (["--shape", "x=1,0,4"], ["argument --shape: 'x=1,0,4': every dimension must be >= 1"]),
])
def test_vta_run_refuses_bad_flag_values(argv, fragments, capsys):
    assert vta_main(["run", "resnet-18", *argv]) == 2
    err = capsys.readouterr().err
    for f in fragments:
        assert f in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize("argv, fragments", [
    (["resnet-18", "--image-size", "4096"], ["--image-size 4096 with --batch 1: resnet-18's largest tensor",
                                             "over the 512 MiB limit", "raise --max-tensor-mb"]),
    (["vgg-16", "--image-size", "512"], ["vgg-16's largest tensor"]),
    (["resnet-18", "--batch", "4096"], ["--image-size 224 with --batch 4096"]),
    (["resnet-18", "--shape", "data=1,3,8,8"], ["--shape applies to ONNX files"]),
])
def test_vta_run_checks_zoo_sizes_before_building(argv, fragments, capsys):
    assert vta_main(["run", *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    for f in fragments:
        assert f in err, err


def test_vta_run_image_size_is_for_zoo_models(tmp_path, capsys):
    path = save(relu_model([1, 3, 8, 8]), tmp_path / "m.onnx")
    assert vta_main(["run", str(path), "--image-size", "64"]) == 2
    assert "--image-size applies to zoo models; give an ONNX model's input shape with --shape" in \
        capsys.readouterr().err


def test_vta_run_input_file_shape_is_checked_before_reading(tmp_path, capsys):
    path = save(relu_model([1, 3, 8, 8]), tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", np.zeros((1, 3, 5, 5), np.float32))
    assert vta_main(["run", str(path), "--input", str(tmp_path / "x.npy")]) == 2
    err = capsys.readouterr().err
    assert "shape (1, 3, 5, 5) float32, but the model's input 'x' is (1, 3, 8, 8) float32" in err
    (tmp_path / "empty.npy").write_bytes(b"")
    assert vta_main(["run", str(path), "--input", str(tmp_path / "empty.npy")]) == 2
    assert "the file is empty or truncated, not a .npy array" in capsys.readouterr().err


# ---- text that is not UTF-8 --------------------------------------------------------------------------------

def test_a_name_that_is_not_utf8_is_a_one_line_error(tmp_path):
    """Issue 25 item 9: one byte of a tensor name in the shipped digits CNN changed to invalid UTF-8 (protobuf
    then hands the name over as bytes) ended `vta run` in a TypeError from deep in the frontend; now it is a
    GraphError naming the field, and `vta run` says so in one line."""
    data = (ROOT / "tests" / "data" / "digits_cnn.onnx").read_bytes()
    name = b"/0/Conv_output_0"
    assert name in data
    path = tmp_path / "bad_name.onnx"
    path.write_bytes(data.replace(name, name[:-1] + b"\xff", 1))
    with pytest.raises(GraphError, match="is not valid UTF-8") as err:
        from_onnx(path)
    assert "\n" not in str(err.value) and str(err.value).startswith(f"{path}: model.graph.")
    cli_refuses(["run", str(path)], tmp_path, f"vta: error: {path}: ", "b'/0/Conv_output_\\xff'",
                "is not valid UTF-8")


class _AsProtobuf7:
    """A message as protobuf 7 shows it: its field descriptors have ``is_repeated`` and no ``label``."""

    def __init__(self, message):
        self.message = message

    def ListFields(self):   # protobuf's name
        for fd, value in self.message.ListFields():
            repeated = fd.label == fd.LABEL_REPEATED
            seven = SimpleNamespace(name=fd.name, type=fd.type, TYPE_STRING=fd.TYPE_STRING,
                                    TYPE_MESSAGE=fd.TYPE_MESSAGE, is_repeated=repeated)
            if fd.type == fd.TYPE_MESSAGE:
                value = [_AsProtobuf7(v) for v in value] if repeated else _AsProtobuf7(value)
            yield seven, value


def test_the_text_check_reads_protobuf_7_descriptors():
    """protobuf 7 (what `pip install 'vta-stack[onnx]'` alone brings) dropped FieldDescriptor.label: the UTF-8
    check ended every ONNX load in an AttributeError. It reads is_repeated where there is one."""
    from graph_pack.frontend_onnx import _check_text

    data = (ROOT / "tests" / "data" / "digits_cnn.onnx").read_bytes()
    _check_text(_AsProtobuf7(onnx.load_from_string(data)))
    name = b"/0/Conv_output_0"
    bad = onnx.load_from_string(data.replace(name, name[:-1] + b"\xff", 1))
    with pytest.raises(GraphError, match="is not valid UTF-8") as want:
        _check_text(bad)
    with pytest.raises(GraphError) as got:
        _check_text(_AsProtobuf7(bad))
    assert str(got.value) == str(want.value)


def test_an_onnx_that_cannot_load_says_how_to_fix_it(tmp_path):
    """Installing the pynq extra after the onnx one downgrades protobuf under onnx, whose import then raises
    protobuf's VersionError (not an ImportError): one line saying so and how to reinstall, no traceback."""
    shadow = tmp_path / "shadow" / "onnx"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        "class VersionError(Exception):\n    pass\n"
        "raise VersionError('Detected incompatible Protobuf Gencode/Runtime versions when loading onnx/onnx-ml.proto:"
        " gencode 6.31.1 runtime 5.29.6. Runtime version cannot be older than the linked gencode version.')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shadow.parent), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "vta", "run", str(ROOT / "tests" / "data" / "digits_cnn.onnx"),
                           "--start", "qnn.quantize", "--stop", "nn.batch_flatten"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env, check=False)
    assert "Traceback" not in proc.stderr and proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vta: error: the onnx package is installed but cannot load "
                                                   "(VersionError: Detected incompatible Protobuf"), lines
    assert "pip install -e '.[onnx,pynq]'" in lines[0]
