"""Every public name of every package keeps its meaning for the life of the process, whatever was imported
before or after it (a notebook runs the README twice; a CLI imports submodules first)."""

from __future__ import annotations

import subprocess
import sys

import pytest

PACKAGES = ["hw_config", "simulator", "vta", "host", "graph_pack", "tuning"]
MODULE_NAMES = {"graph_pack": {"zoo"}}   # public names that are modules on purpose

_CHECK = r"""
import importlib, pkgutil, sys, types
pkg_name, order, modules_ok = sys.argv[1], sys.argv[2], set(sys.argv[3:])
pkg = importlib.import_module(pkg_name)

def names():
    out = {}
    for name in pkg.__all__:
        value = getattr(pkg, name)
        is_module = isinstance(value, types.ModuleType)
        assert is_module == (name in modules_ok), f"{pkg_name}.{name} is {value!r}"
        out[name] = value
    return out

def import_all_submodules():
    for info in pkgutil.walk_packages(pkg.__path__, pkg_name + "."):
        if info.name.endswith("__main__"):
            continue
        importlib.import_module(info.name)

if order == "names-first":
    first = names(); import_all_submodules()
else:
    import_all_submodules(); first = names()
second = names()
assert all(first[k] is second[k] for k in first), [k for k in first if first[k] is not second[k]]
print("ok", len(first))
"""


@pytest.mark.parametrize("order", ["names-first", "submodules-first"])
@pytest.mark.parametrize("package", PACKAGES)
def test_public_names_survive_submodule_imports(package, order):
    proc = subprocess.run([sys.executable, "-c", _CHECK, package, order, *MODULE_NAMES.get(package, ())],
                          check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("ok")


def test_tuning_exports_its_documented_faces():
    import tuning
    for name in ("extract_tasks", "tune_tasks", "load_best", "RandomTuner", "GridSearchTuner", "GATuner",
                 "XGBTuner", "LocalRunner", "DaskRunner"):
        assert callable(getattr(tuning, name)), name


_WITHOUT_C = r"""
import sys
sys.modules["simulator._vta_sim"] = None   # as on a source tree whose C simulator was never compiled
import graph_pack, vta, vta.isa
from vta import Environment
env = Environment("pynq")
graph, params = graph_pack.zoo.get_model("resnet-18", image_shape=(3, 32, 32))
qgraph, qparams = graph_pack.quantize(graph, params)
packed = graph_pack.graph_pack(qgraph, env, start_name="nn.max_pool2d", stop_name="nn.global_avg_pool2d")
assert len(packed.meta["groups"]) == 19
try:
    graph_pack.build(packed, env, qparams)   # running needs the simulator: a clear message says how to build it
except ImportError as e:
    assert "pip install -e ." in str(e), e
    print("ok")
"""


def test_import_quantize_and_pack_work_without_the_c_simulator():
    proc = subprocess.run([sys.executable, "-c", _WITHOUT_C], check=False, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
