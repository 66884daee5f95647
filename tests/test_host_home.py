"""The host compiler's one home (issue 43 item 5): host.jit and host.templates under their old import paths are the
same modules, and both back ends (the fixed JIT kernels and the auto-scheduler's code generation) compile under one
LLVM lock."""

from __future__ import annotations

import threading

from extras import needs


def test_the_old_import_paths_are_the_same_modules():
    import graph_pack.host_templates
    import graph_pack.jit
    from graph_pack import jit as old_jit
    from host import jit, templates
    assert graph_pack.jit is jit and old_jit is jit and graph_pack.host_templates is templates
    limit = jit.MAX_CACHED_KERNELS
    try:
        graph_pack.jit.MAX_CACHED_KERNELS = 7   # docs/limits.md: a user's setting reaches the cache
        assert jit.MAX_CACHED_KERNELS == 7
    finally:
        jit.MAX_CACHED_KERNELS = limit
    from graph_pack.host_templates import host_template_of
    assert host_template_of is templates.host_template_of


@needs("llvmlite")
def test_both_back_ends_compile_under_one_lock():
    from host import compile_schedule, default_schedule, jit, llvm_backend, ops
    assert llvm_backend._LOCK is jit._LOCK
    dag = ops.elementwise((4, 8), [("erf",)])
    done = threading.Event()

    def compile_one() -> None:
        compile_schedule(dag, default_schedule(dag))
        done.set()
    with jit._LOCK:   # held as the fixed kernels' compiler holds it
        worker = threading.Thread(target=compile_one, daemon=True)
        worker.start()
        worker.join(0.5)
        assert not done.is_set(), "the auto-scheduler compiled while host.jit held the LLVM lock"
    worker.join(120)
    assert done.is_set()


def test_tuning_targets_are_a_registry_a_module_extends():
    """extract_tasks and task_of dispatch through tuning.targets: a new target is a registration, not an edit."""
    import pytest

    from graph_pack.graph import GraphBuilder
    from tuning import targets
    from tuning.cpu import CpuTask
    from tuning.task import Task, extract_tasks, task_of
    with pytest.raises(ValueError, match=r"target='gpu'; allowed: 'vta' \(the accelerator's layers.*'cpu' \(the host"):
        extract_tasks(None, target="gpu")
    assert type(task_of({"op": "dense_pack.x86", "data_shape": (1, 8), "kernel_shape": (4, 8)}, None)) is CpuTask
    b = GraphBuilder()
    x = b.input("x", (1, 4), "float32")
    graph, _ = b.finish([b.op("nn.relu", [x], name="r")])
    made = []

    def extract(g, env, ops):
        made.append(Task({"op": "toy", "nodes": [n.name for n in g.ops()]}, env))
        return made
    targets.register_target(targets.TuningTarget("toy", extract, lambda w: w.get("op") == "toy",
                                                 lambda w, cfg: Task(w, cfg), "a test's"))
    try:
        assert extract_tasks(graph, "pynq", target="toy") == made and made[0].workload["nodes"] == ["r"]
        assert task_of({"op": "toy"}, "pynq").workload == {"op": "toy"}
    finally:
        del targets._TARGETS["toy"]


def test_without_llvmlite_graph_pack_and_tuning_import_and_build_on_numpy(tmp_path):
    """A Pynq image has no llvmlite: the host package's code generator is imported on first use only."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    script = tmp_path / "no_llvmlite.py"
    script.write_text(
        "import importlib.abc, sys, warnings\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name.split('.')[0] == 'llvmlite':\n"
        "            raise ImportError('no llvmlite on this board')\n"
        "sys.meta_path.insert(0, Block())\n"
        "import numpy as np\n"
        "import graph_pack, tuning\n"
        "from graph_pack.graph import GraphBuilder\n"
        "from graph_pack.reference import run_reference\n"
        "b = GraphBuilder()\n"
        "x = b.input('x', (2, 8), 'float32')\n"
        "graph, params = b.finish([b.op('erf', [b.op('nn.relu', [x], name='r')], name='e')])\n"
        "with warnings.catch_warnings(record=True):\n"
        "    mod = graph_pack.build(graph, 'pynq', params)\n"
        "v = np.linspace(-2, 2, 16, dtype=np.float32).reshape(2, 8)\n"
        "mod.run(x=v)\n"
        "assert {s.backend for s in mod.steps} == {'numpy'}\n"
        "assert np.array_equal(mod.get_output(0), run_reference(graph, params, {'x': v}))\n"
        "assert not any(m.split('.')[0] == 'llvmlite' for m in sys.modules)\n"
        "print('ok')\n")
    root = str(Path(__file__).resolve().parents[1])
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "PYTHONPATH": root})
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
