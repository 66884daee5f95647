"""docs/pytorch.md, run as a user runs it, in one fresh clone: its export block twice in one interpreter of the
torch venv (.ci/torch-venv.sh: torch 2.13.0, onnxscript), its commands with this package, its comparison block
twice with this package's Python. Independent checks beside the doc's own: onnxruntime runs the exported file
and agrees with PyTorch's output (the export is the model), and the accelerator really ran part of it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
from extras import need, needs
from test_docs import ROOT, VTA, fenced_blocks, fresh_clone, paste_twice, shell_commands

DOC = ROOT / "docs" / "pytorch.md"
BLOCKS = fenced_blocks(DOC)
PYTHON = [b for b in BLOCKS if b.lang == "python"]
COMMANDS = [c for b in BLOCKS if b.lang == "console" for c in shell_commands(b)]

pytestmark = needs("torch-venv", "onnxruntime")


def _pasted_twice(proc: subprocess.CompletedProcess, what: str) -> None:
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, f"{what}:\n{proc.stdout[-2000:]}\n" \
                                                                    f"{proc.stderr[-3000:]}"
    assert "@@ paste 2 done" in proc.stdout, proc.stdout[-2000:]


def test_the_pytorch_page_runs_as_written(tmp_path: Path):
    torch_python = need("torch-venv")
    ort = need("onnxruntime")
    assert len(PYTHON) == 2 and len(COMMANDS) == 1, (len(PYTHON), [c.text for c in COMMANDS])
    work = fresh_clone(tmp_path / "clone")

    export, compare = PYTHON
    _pasted_twice(paste_twice(f"{DOC.name} export", export.text, "", tmp_path, work, torch_python), "the export")
    for name in ("small_cnn.onnx", "x.npy", "torch_y.npy"):
        assert (work / name).is_file(), f"the export block did not write {name}"

    x, theirs = np.load(work / "x.npy"), np.load(work / "torch_y.npy")
    session = ort.InferenceSession(str(work / "small_cnn.onnx"), providers=["CPUExecutionProvider"])
    (onnx_y,) = session.run(None, {session.get_inputs()[0].name: x})
    np.testing.assert_allclose(onnx_y, theirs, rtol=1e-4, atol=1e-5)   # the file is PyTorch's model

    (cmd,) = COMMANDS
    assert cmd.argv[0] == "vta", cmd.text
    done = subprocess.run([*VTA, *cmd.argv[1:]], cwd=work, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0 and "Traceback" not in done.stderr, f"{cmd.text}\n{done.stdout}\n{done.stderr}"
    on_vta = [line for line in done.stdout.splitlines() if " conv2d " in line and " VTA " in line]
    assert len(on_vta) == 3, done.stdout   # the three convolutions after the first, as the page says
    assert any(" nn.conv2d " in line and " CPU " in line for line in done.stdout.splitlines()), done.stdout

    proc = paste_twice(f"{DOC.name} comparison", compare.text, "", tmp_path, work, sys.executable)
    _pasted_twice(proc, "the comparison")
    cosine = [line for line in proc.stdout.splitlines() if line.startswith("cosine similarity with PyTorch")]
    assert len(cosine) == 2 and cosine[0] == cosine[1], proc.stdout
    said = re.search(r"the cosine similarity is about ([\d.]+)", " ".join(DOC.read_text().split())).group(1)
    value = float(re.search(r"PyTorch: ([\d.]+),", cosine[0]).group(1))
    assert abs(value - float(said)) < 10.0 ** -len(said.split(".")[1]), f"the page says about {said}: {cosine[0]}"


def test_a_model_exported_without_onnxscript_says_what_the_page_says(tmp_path: Path):
    """The page's first bullet: the default exporter needs onnxscript; ``dynamo=False`` does not. Checked in the
    torch venv with onnxscript hidden, so the page cannot go stale when torch changes its default."""
    torch_python = need("torch-venv")
    hide = ("import importlib.abc, sys\n"   # onnxscript as if it were not installed
            "class Hide(importlib.abc.MetaPathFinder):\n"
            "    def find_spec(self, name, path, target=None):\n"
            "        if name.partition('.')[0] == 'onnxscript':\n"
            "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
            "sys.meta_path.insert(0, Hide())\n")
    model = ("import torch\nm = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()).eval()\n"
             "x = torch.randn(1, 3, 8, 8)\n")
    default = subprocess.run([torch_python, "-c", hide + model + "torch.onnx.export(m, (x,), 'a.onnx')"],
                             cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert default.returncode != 0 and "No module named 'onnxscript'" in default.stderr, default.stderr[-2000:]
    legacy = subprocess.run([torch_python, "-c", hide + model +
                             "torch.onnx.export(m, (x,), 'b.onnx', dynamo=False, opset_version=17)"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert legacy.returncode == 0 and (tmp_path / "b.onnx").is_file(), legacy.stderr[-2000:]
