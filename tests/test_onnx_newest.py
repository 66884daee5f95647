"""The ONNX path with the newest onnx, onnxruntime and protobuf: what `pip install 'vta-stack[onnx]'` alone brings
today (the venv of .ci/onnx-venv.sh), which the test extras never see (pynq pins protobuf < 6 there). protobuf 7
dropped FieldDescriptor.label and every ONNX load ended in an AttributeError. The checkout is installed into a
directory of its own with that venv's pip and `vta run` runs an ONNX model there: the same output and cycles as in
this environment, and a malformed model still a one-line error.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from checkout_install import ROOT, install_checkout
from extras import need, needs

from vta.cli import main as vta_main

pytestmark = needs("onnx-venv", "cc")
RUN = ["run", "examples/digits_cnn.onnx", "--start", "qnn.quantize", "--stop", "nn.batch_flatten", "--no-layers"]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """(the venv's python, the directory the checkout is installed into)."""
    python = need("onnx-venv")
    return python, install_checkout(python, tmp_path_factory.mktemp("onnx-newest"))


def _vta(installed: tuple[str, Path], *argv: str) -> subprocess.CompletedProcess:
    python, site = installed
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}, "PYTHONPATH": str(site)}
    return subprocess.run([python, "-m", "vta", *argv], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600, check=False)


def _total(out: str) -> str:
    return re.search(r"^total: .* cycles", out, re.MULTILINE).group(0) if "total:" in out else \
        re.search(r"accelerator [\d,]+ cycles", out).group(0)


def test_an_onnx_model_runs_as_in_this_environment(installed, tmp_path, capsys):
    python, _ = installed
    versions = subprocess.run([python, "-c", "import google.protobuf as p, onnx; print(p.__version__, onnx.__version__)"],
                              capture_output=True, text=True, timeout=120, check=True).stdout.split()
    done = _vta(installed, *RUN, "--out", str(tmp_path / "newest.npz"))
    assert done.returncode == 0, f"protobuf {versions[0]}, onnx {versions[1]}:\n{done.stderr[-3000:]}"
    assert vta_main([*RUN, "--out", str(tmp_path / "here.npz")]) == 0
    here = capsys.readouterr().out
    assert _total(done.stdout) == _total(here)
    newest, mine = np.load(tmp_path / "newest.npz"), np.load(tmp_path / "here.npz")
    assert sorted(newest.files) == sorted(mine.files)
    for name in mine.files:
        np.testing.assert_array_equal(newest[name], mine[name])


def test_a_name_that_is_not_utf8_is_a_one_line_error_there_too(installed, tmp_path):
    data = (ROOT / "tests" / "data" / "digits_cnn.onnx").read_bytes()
    name = b"/0/Conv_output_0"
    bad = tmp_path / "bad_name.onnx"
    bad.write_bytes(data.replace(name, name[:-1] + b"\xff", 1))
    done = _vta(installed, "run", str(bad))
    err = done.stderr.strip()
    assert done.returncode == 2 and "Traceback" not in err and err.count("\n") == 0, err
    assert err.startswith(f"vta: error: {bad}: model.graph.") and "is not valid UTF-8" in err
