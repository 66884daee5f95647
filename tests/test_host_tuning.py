"""Tuning the host CPU's operators: tasks of a network's float conv2d / dense, measured on this CPU (mean and std
in the record), the tuners and the log format of the accelerator, and build picking the tuned kernels from the log;
the output checked against the numpy reference of the whole graph."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from extras import need, needs

import tuning
from graph_pack import build
from graph_pack.graph import GraphBuilder
from graph_pack.reference import run_reference
from graph_pack.untuned import UNTUNED
from host.templates import host
from tuning.cpu import CpuRunner, CpuTask, MeasureOption, cpu_task, measure_cpu
from tuning.records import RecordWarning, load_records

pytestmark = needs("llvmlite")


def trials(records) -> list:
    """The records of trials: not the untuned kernel's nor the re-timings that confirm a config against it."""
    return [r for r in records if r.config != UNTUNED and r.tuner != "confirm"]


def untuned_counted(records, tasks: int) -> bool:
    """Whether the untuned kernel was timed once per task, and once more per re-timing of a config against it."""
    return sum(r.config == UNTUNED and r.tuner == "untuned" for r in records) == tasks + sum(
        r.tuner == "confirm" for r in records)


def beat_untuned(records, op: str, workload: str | None = None) -> bool:
    """Whether the fastest trial of ``op`` (and ``workload``) in ``records`` beat the untuned kernel's record: the rule
    build applies a logged config by (graph_pack.untuned; tests/test_untuned.py plants both outcomes)."""
    mine = [r for r in records if r.op == op and r.ok and workload in (None, r.workload)]
    untuned = min(r.rank for r in mine if r.config == UNTUNED)
    return min(r.rank for r in mine if r.config != UNTUNED) < untuned


def small_net():
    """conv -> bias -> relu -> conv -> bias -> + residual -> relu -> conv (same shape again) -> flatten -> dense."""
    rng = np.random.default_rng(0)
    b = GraphBuilder()
    x = b.input("x", (1, 8, 6, 6), "float32")

    def conv(name, inp, co, ci):
        w = b.const(f"{name}.w", (rng.standard_normal((co, ci, 3, 3)) * 0.2).astype(np.float32))
        c = b.op("nn.conv2d", [inp, w], name=name, padding=(1, 1, 1, 1))
        return b.op("nn.bias_add", [c, b.const(f"{name}.b", rng.standard_normal(co).astype(np.float32))],
                    name=f"{name}.bias", axis=1)

    a = b.op("nn.relu", [conv("c1", x, 8, 8)], name="r1")
    y = b.op("add", [conv("c2", a, 8, 8), a], name="res")
    y = b.op("nn.relu", [y], name="r2")
    y = b.op("nn.relu", [conv("c3", y, 8, 8)], name="r3")
    f = b.op("nn.batch_flatten", [y], name="flat")
    d = b.op("nn.dense", [f, b.const("fc.w", rng.standard_normal((10, 288)).astype(np.float32) * 0.1)], name="fc")
    out = b.op("nn.bias_add", [d, b.const("fc.b", rng.standard_normal(10).astype(np.float32))], name="fc.bias",
               axis=1)
    graph, params = b.finish([out])
    return graph, params, rng.standard_normal((1, 8, 6, 6)).astype(np.float32)


def test_a_measurement_is_the_mean_and_std_of_its_repeats_worked_out_by_hand(monkeypatch):
    """The kernel advances a fake clock (tuning.cpu's perf_counter) by 1 ms a call in the first of three timings of
    two calls, 2 ms in the second, 3 ms in the third (its checked call before them: 5 ms, not timed): latency_s
    2 ms, cycles 2,000,000 (ns), std_s the population's sqrt(((1 - 2)^2 + 0 + (3 - 2)^2) / 3) ms = 0.8165 ms."""
    import types

    from tuning import cpu

    graph, _, _ = small_net()
    task = tuning.extract_tasks(graph, target="cpu")[1]
    clock = {"now": 1000.0, "calls": 0}
    per_call_ms = [5, 1, 1, 2, 2, 3, 3]
    build_kernel = CpuTask.compile

    def slow_compile(self, config=None, **kwargs):
        kernel = build_kernel(self, config, **kwargs)

        def timed(**inputs):
            clock["now"] += per_call_ms[clock["calls"]] * 1e-3
            clock["calls"] += 1
            return kernel(**inputs)
        return timed

    monkeypatch.setattr(CpuTask, "compile", slow_compile)
    monkeypatch.setattr(cpu, "time", types.SimpleNamespace(perf_counter=lambda: clock["now"]))
    result = measure_cpu(task, task.default_config, MeasureOption(number=2, repeat=3, min_repeat_ms=0))
    assert result.error is None and result.checked and clock["calls"] == 7
    assert result.latency_s == pytest.approx(2e-3, rel=1e-9) and result.cycles == 2_000_000
    assert result.std_s == pytest.approx((2 / 3) ** 0.5 * 1e-3, rel=1e-9)


@pytest.mark.parametrize("want, got, close", [
    (np.full(4, 1e-3), np.full(4, 1e-3 * (1 + 2e-6)), True),      # 2e-6 relative: inside 1e-5
    (np.full(4, 1e-3), np.full(4, 1e-3 + 1e-6), False),           # 1e-3 relative: outside, however small the values
    (np.full(4, 1e-9), np.zeros(4), False),                       # all of it wrong
    (np.array([1e-9, 100.0]), np.array([0.0, 100.0]), True),      # 1e-9 off beside a 100: 1e-5 of the largest
    (np.array([2e-3, 100.0]), np.array([0.0, 100.0]), False),     # 2e-3 off: more than 1e-5 x 100
    (np.zeros(3), np.zeros(3), True),
])
def test_the_host_check_is_relative_to_the_outputs_own_size(want, got, close):
    """close_to's tolerance, 1e-5 of each value and of the largest: outputs far below 1 are judged at their own
    scale, not against an absolute 1e-5 (cases worked out by hand)."""
    from tuning.cpu import close_to

    assert close_to(got.astype(np.float32), want) is close


def test_tasks_of_a_network_tuned_on_this_cpu_are_logged_and_build_uses_them(tmp_path):
    graph, params, x = small_net()
    tasks = tuning.extract_tasks(graph, target="cpu")
    conv_op = tuning.cpu.host_conv_op()
    assert [(t.op, t.weight) for t in tasks] == [(conv_op, 3), ("dense_pack.x86", 1)]
    assert tasks[0].names == ["c1", "c2", "c3"] and all(isinstance(t, CpuTask) for t in tasks)
    log = tmp_path / "net.cpu.jsonl"
    with CpuRunner(number=2, repeat=3) as runner:
        summary = tuning.tune_tasks(tasks, tuner="random", n_trial=3, runner=runner, log=log, batch_size=3)
    assert len(summary.states) == 2
    records = load_records(log, template=None)
    assert len(trials(records)) == 6 and all(r.ok for r in records) and untuned_counted(records, 2)
    for r in records:
        assert r.hw == host().fingerprint and r.template == "cpu-1" and r.result["device"] == "cpu"
        assert r.result["checked"] and r.result["latency_s"] > 0 and "std_s" in r.result   # the figures: below
    again = io.StringIO()   # the same run again resumes: nothing is measured twice
    with CpuRunner(number=2, repeat=3) as runner:
        tuning.tune_tasks(tuning.extract_tasks(graph, target="cpu"), tuner="random", n_trial=3, runner=runner,
                          log=log, batch_size=3, out=again)
    assert f"resuming from {len(records)} records" in again.getvalue()
    records = load_records(log, template=None)
    assert len(trials(records)) == 6 and untuned_counted(records, 2)
    best = tuning.load_best(log, "cpu")
    won = {t.key for t in tasks if beat_untuned(records, t.op, t.key)}
    assert set(best) == won   # the rest keep host.jit's kernel, faster in the same run
    best = {t.key: best.get(t.key, t.default_config) for t in tasks}   # (every layer tuned: the epilogues below)
    want = run_reference(graph, params, {"x": x})
    for _ in range(2):   # twice in one process
        mod = build(graph, "pynq", params, host_schedules=best)
        tuned = {s.name: s.fused for s in mod.steps if getattr(s, "backend", "") == "tuned"}
        assert tuned == {"c1": ["c1.bias", "r1"], "c2": ["c2.bias", "res", "r2"], "c3": ["c3.bias", "r3"],
                         "fc": ["fc.bias"]}
        mod.run(x=x)
        np.testing.assert_allclose(mod.get_output(0), want, rtol=1e-4, atol=1e-5)
    untuned = build(graph, "pynq", params)
    assert not any(getattr(s, "backend", "") == "tuned" for s in untuned.steps)
    with warnings.catch_warnings():   # the accelerator's reader passes over the CPU records without a word
        warnings.simplefilter("error", RecordWarning)
        assert tuning.load_best(log, "pynq") == {}


def test_a_dropped_tuned_module_leaves_its_weights_to_the_collector():
    """Tuned kernels are compiled once per process and shared by every module that uses them; each keeps the
    packed copy of the weights it ran with while those weights live. It held the weight array itself: a dropped
    module's weights and their packed copies stayed for the life of the process (88 MB of ResNet-18's)."""
    import gc
    import weakref

    graph, params, x = small_net()
    schedules = {t.key: t.default_config for t in tuning.extract_tasks(graph, target="cpu")}
    want = run_reference(graph, params, {"x": x})
    mod = build(graph, "pynq", params, host_schedules=schedules)
    assert {s.name for s in mod.steps if getattr(s, "backend", "") == "tuned"} == {"c1", "c2", "c3", "fc"}
    for _ in range(2):
        mod.run(x=x)
        np.testing.assert_allclose(mod.get_output(0), want, rtol=1e-4, atol=1e-5)
    weights = [weakref.ref(v) for v in [*params.values(), *mod.consts.values()] if isinstance(v, np.ndarray)]
    assert len(weights) >= 8
    del mod, graph, params
    gc.collect()
    assert sum(w() is not None for w in weights) == 0   # weight arrays still referenced


def test_a_record_of_another_cpu_is_never_applied(tmp_path):
    task = cpu_task("dense_pack.x86", data_shape=(1, 16), kernel_shape=(8, 16))
    log = tmp_path / "other.jsonl"
    tuning.tune_tasks([task], tuner="gridsearch", n_trial=2, runner=CpuRunner(isolate=False), log=log,
                      out=io.StringIO())
    lines = log.read_text().splitlines()
    moved = [json.dumps({**json.loads(line), "hw": "cpu:aarch64-unknown-linux-gnu:cortex-a53:0"}) for line in lines]
    log.write_text("\n".join(moved) + "\n")
    with pytest.warns(RecordWarning, match="another hardware config"):
        assert tuning.load_best(log, "cpu") == {}


def test_measurement_checks_the_output_and_names_what_failed():
    task = cpu_task("dense_pack.x86", data_shape=(1, 16), kernel_shape=(8, 16))
    option = MeasureOption(number=1, repeat=2)
    good = measure_cpu(task, task.default_config, option)
    assert good.ok and good.checked and good.latency_s > 0 and good.device == "cpu"
    refused = measure_cpu(task, {**task.default_config, "tile_x": [3, 3]}, option)
    assert refused.error.startswith("invalid config: knob tile_x=[3, 3] is not allowed")
    broken = CpuTask(task.workload, task.cfg)
    real = broken.template.build

    def off_by_a_little(config=None, epilogue=()):
        kernel = real(config, epilogue)
        return lambda **arrays: kernel(**arrays) + np.float32(1e-3)

    broken.template.build = off_by_a_little
    wrong = measure_cpu(broken, task.default_config, option)
    assert wrong.error.startswith("wrong output") and not wrong.ok
    for bad in ({"number": 0}, {"repeat": 0}, {"timeout": 0}, {"min_repeat_ms": -1}):
        with pytest.raises(ValueError, match=f"{next(iter(bad))}="):
            MeasureOption(**bad)
    with pytest.raises(ValueError, match="target='gpu'; allowed: 'vta'"):
        tuning.extract_tasks(small_net()[0], target="gpu")


def test_the_cost_model_tuner_ranks_host_configs():
    need("xgboost")
    task = cpu_task("conv2d_NCHWc.x86", data_shape=(1, 8, 8, 8), kernel_shape=(16, 8, 3, 3), padding=(1, 1))
    tuner = tuning.make_tuner("xgb", task, seed=0)
    with CpuRunner(number=1, repeat=2) as runner:
        result = tuner.tune(6, runner, batch_size=3)
    assert result.trials == 6 and result.best_config is not None and task.check(result.best_config) is None
    assert tuner.fits >= 1


def _vta(*argv: str, cwd, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["vta", *argv], capture_output=True, text=True, cwd=cwd, timeout=600, check=False,
                          env={**os.environ, **env})


def test_vta_tune_and_run_target_cpu_use_the_log(tmp_path):
    tuned = _vta("tune", "resnet-18", "--target", "cpu", "--image-size", "32", "--n-trial", "2", "--tuner", "random",
                 "--ops", "dense_pack.x86", "--log", "r18.cpu.jsonl", "--repeat", "2", cwd=tmp_path)
    assert tuned.returncode == 0, tuned.stderr
    assert "resnet-18: 1 host task(s) on" in tuned.stdout and "outputs agree" in tuned.stdout
    assert "vta run resnet-18 --target cpu --image-size 32 --log r18.cpu.jsonl" in tuned.stdout
    records = load_records(tmp_path / "r18.cpu.jsonl", template=None)
    assert len(trials(records)) == 2 and {r.op for r in records} == {"dense_pack.x86"} and untuned_counted(records, 1)
    won = beat_untuned(records, "dense_pack.x86")
    ran = _vta("run", "resnet-18", "--target", "cpu", "--image-size", "32", "--log", "r18.cpu.jsonl", "--check",
               "--no-layers", "--report", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert f"schedules: {int(won)} of 12 task(s) from r18.cpu.jsonl" in ran.stdout
    assert f"{int(won)} layer(s) with tuned host kernels" in ran.stdout
    assert re.search(r"inference: mean [\d.]+ ms, std [\d.]+ ms over 10 runs", ran.stdout)
    assert "check: output matches the numpy reference" in ran.stdout
    fc = r"^fc +nn.dense +tuned +fc.bias" if won else r"^fc +nn.dense +jit"   # which kernel runs each node
    assert re.search(fc, ran.stdout, re.MULTILINE)
    assert re.search(r"^stem.conv +nn.conv2d +jit +stem.bn, stem.relu", ran.stdout, re.MULTILINE)
    if host().vector_bits == 512:   # the same CPU without AVX-512 is another target: its records are not applied
        limited = _vta("run", "resnet-18", "--target", "cpu", "--image-size", "32", "--log", "r18.cpu.jsonl",
                       "--no-layers", cwd=tmp_path, VTA_HOST_ISA="avx2")
        assert limited.returncode == 2, limited.stderr   # nothing in the log applies: an error, not an untuned run
        assert limited.stderr.splitlines()[1:] == [
            f"  {len(records)} record(s) were made on another CPU (or with another feature set: VTA_HOST_ISA)"], \
            limited.stderr
    # a VTA build runs its host part (the float stem and classifier) with the host's tuned kernels from the same log
    packed = _packed_r18()
    assert [t.op for t in tuning.extract_tasks(packed, target="cpu")] == [tuning.cpu.host_conv_op(), "dense_pack.x86"]
    stem = tuning.extract_tasks(packed, target="cpu", ops=(tuning.cpu.host_conv_op(),))
    with CpuRunner(number=1, repeat=2) as runner:
        tuning.tune_tasks(stem, tuner="random", n_trial=1, runner=runner, log=tmp_path / "r18.cpu.jsonl",
                          out=io.StringIO())
    # (--skip-conv 0 keeps the stem in float on the host, as VTA's region does; regions found automatically offload it)
    vta = _vta("run", "resnet-18", "--image-size", "32", "--log", "r18.cpu.jsonl", "--no-layers", "--skip-conv", "0",
               cwd=tmp_path)
    assert vta.returncode == 0, vta.stderr
    records = load_records(tmp_path / "r18.cpu.jsonl", template=None)
    won = sum(beat_untuned(records, t.op, t.key) for t in tuning.extract_tasks(packed, target="cpu"))
    assert f"schedules: {won} of 2 task(s) from r18.cpu.jsonl" in vta.stdout


def _packed_r18():
    from graph_pack.cli import load_model
    from graph_pack.pack import graph_pack
    from graph_pack.quantize import quantize
    graph, params, (start, stop) = load_model("resnet-18", 1, 32, 0)
    qgraph, _ = quantize(graph, params)
    return graph_pack(qgraph, "pynq", start_name=start, stop_name=stop)


@pytest.mark.parametrize(("argv", "message"), [
    (["run", "resnet-18", "--target", "cpu", "--device", "pynq"], "--target cpu runs the float network on this CPU"),
    (["tune", "resnet-18", "--target", "cpu", "--dask", "local"], "--dask do(es) not apply"),
    (["run", "resnet-18", "--target", "cpu", "--log", "missing.jsonl"], "--log missing.jsonl: no such tuning log"),
])
def test_the_cli_refuses_what_target_cpu_cannot_do(tmp_path, argv, message):
    done = _vta(*argv, cwd=tmp_path)
    assert done.returncode != 0 and message in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def processes_running(text: str) -> list[str]:
    """The command lines of this machine's processes that contain ``text`` (Linux /proc)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmd:
                out.append(f"{d.name}: {cmd}")
    return out


def test_tuning_over_rpc_on_a_cpu_server_writes_records_that_build_uses(tmp_path):
    from vta.rpc import LocalCluster
    from vta.rpc.client import RemoteDevice, request_board
    graph, params, x = small_net()
    with LocalCluster(boards=1, key="cpu", server_args=("--device", "cpu"), log_dir=tmp_path) as cluster:
        tracker = f"--tracker {cluster.address} "
        runner = tuning.RPCCpuRunner("cpu", *cluster.tracker, number=1, repeat=2)
        assert runner.cpu_target == host()   # the server reports its own CPU
        tasks = tuning.extract_tasks(graph, runner.cpu_target, target="cpu")
        log = tmp_path / "rpc.jsonl"
        tuning.tune_tasks(tasks, tuner="random", n_trial=2, runner=runner, log=log, batch_size=2, out=io.StringIO())
        assert sum(runner.boards_used.values()) == len(load_records(log, template=None))   # every timing, there
        address, port, matchkey = request_board(cluster.tracker, "cpu")
        with RemoteDevice(address, port, matchkey=matchkey) as board:
            workload = json.loads(tasks[1].key)
            with pytest.raises(ValueError, match=r"measure option\(s\) \['rounds'\] unknown"):
                board.measure_cpu(workload, tasks[1].default_config, {"rounds": 3})
            with pytest.raises(ValueError, match="repeat=5000 is outside 0..1000"):
                board.measure_cpu(workload, tasks[1].default_config, {"repeat": 5000})
            with pytest.raises(ValueError, match="unknown host template 'conv9'"):
                board.measure_cpu({**workload, "op": "conv9"}, {}, {})
            with pytest.raises(ValueError, match="this server takes at most 67108864"):   # before allocating anything
                board.measure_cpu({**workload, "data_shape": [1, 1 << 27], "kernel_shape": [1, 1 << 27]}, {}, {})
            bad = board.measure_cpu(workload, {**tasks[1].default_config, "tile_x": [7, 7]}, {})
            assert bad["error"].startswith("invalid config")
        assert processes_running(tracker)   # the server, and the worker it measures in
    deadline = time.monotonic() + 15
    while processes_running(tracker):   # a stopped server leaves no measuring worker behind
        assert time.monotonic() < deadline, f"left running: {processes_running(tracker)}"
        time.sleep(0.1)
    records = load_records(log, template=None)
    assert len(trials(records)) == 4 and all(r.ok and r.hw == host().fingerprint for r in records)
    assert untuned_counted(records, 2)
    mod = build(graph, "pynq", params, host_schedules=tuning.load_best(log, "cpu"))
    assert sum(getattr(s, "backend", "") == "tuned" for s in mod.steps) == sum(
        t.weight for t in tasks if beat_untuned(records, t.op, t.key))
    mod.run(x=x)
    np.testing.assert_allclose(mod.get_output(0), run_reference(graph, params, {"x": x}), rtol=1e-4, atol=1e-5)


def test_a_simulated_board_refuses_cpu_measurements(tmp_path):
    from vta.rpc import BoardLost, LocalCluster
    with LocalCluster(boards=1, key="sim", log_dir=tmp_path) as cluster:
        runner = tuning.RPCCpuRunner("sim", *cluster.tracker)
        with pytest.raises(BoardLost, match="is not a CPU server: start it with vta rpc server "
                                                               "--device cpu"):
            runner.cpu_target  # noqa: B018


def test_an_int8_conv_is_tuned_and_built_exactly():
    rng = np.random.default_rng(3)
    b = GraphBuilder()
    x = b.input("x", (1, 16, 5, 5), "int8")
    w = b.const("w", rng.integers(-128, 128, (32, 16, 3, 3), dtype=np.int8))
    c = b.op("nn.conv2d", [x, w], name="conv", padding=(1, 1, 1, 1), out_dtype="int32")
    graph, params = b.finish([b.op("nn.relu", [c], name="relu")])
    tasks = tuning.extract_tasks(graph, target="cpu")
    assert [t.op for t in tasks] == ["conv2d_NCHWc_int8.x86"]
    with CpuRunner(number=1, repeat=2) as runner:
        summary = tuning.tune_tasks(tasks, tuner="random", n_trial=2, runner=runner, out=io.StringIO())
    assert all(r.ok and r.checked for _, r in summary.states[0].tuner.history)
    mod = build(graph, "pynq", params, host_schedules={tasks[0].key: summary.states[0].tuner.best_config})
    assert [getattr(s, "backend", "") for s in mod.steps][:1] == ["tuned"]
    data = rng.integers(-128, 128, (1, 16, 5, 5), dtype=np.int8)
    mod.run(x=data)
    np.testing.assert_array_equal(mod.get_output(0), run_reference(graph, params, {"x": data}))


def test_a_config_that_hangs_or_kills_its_worker_is_a_failed_trial(monkeypatch):
    import os
    import time as time_

    import tuning.cpu as cpu_module
    task = cpu_task("dense_pack.x86", data_shape=(1, 16), kernel_shape=(8, 16))
    real = cpu_module.measure_cpu

    def misbehave(task, config, option, seed=0):   # the forked worker inherits it
        if config["tile_x"][1] == 8:
            time_.sleep(30)
        if config["tile_x"][1] == 4:
            os._exit(3)
        return real(task, config, option, seed)

    monkeypatch.setattr(cpu_module, "measure_cpu", misbehave)
    configs = [{**task.default_config, "tile_x": [8 // b, b]} for b in (8, 4, 2)]
    with CpuRunner(timeout=1.0) as runner:
        hung, died, fine = runner.measure(task, configs)
    assert hung.error == "failed: timed out after 1 s"
    assert died.error == "failed: the measuring process died (exit code 3)"
    assert fine.ok and fine.latency_s > 0


def test_a_worker_is_replaced_after_its_share_of_configs_and_none_is_left_behind(monkeypatch):
    """llvmlite keeps ~110 KB of every compile for the life of the process: the worker that compiles the configs
    is replaced every MEASUREMENTS_PER_WORKER of them, so that a long tuning run (a --device cpu server) does not
    grow without bound; results are unchanged and, closed, the runner leaves no process behind."""
    import multiprocessing
    import os

    import tuning.cpu as cpu_module
    task = cpu_task("dense_pack.x86", data_shape=(1, 16), kernel_shape=(8, 16))
    real = cpu_module.measure_cpu

    def tagged(task, config, option, seed=0):   # the forked worker inherits it: which process measured
        result = real(task, config, option, seed)
        result.config = {**result.config, "pid": os.getpid()}
        return result

    monkeypatch.setattr(cpu_module, "measure_cpu", tagged)
    monkeypatch.setattr(cpu_module, "MEASUREMENTS_PER_WORKER", 2, raising=False)
    before = len(multiprocessing.active_children())
    with CpuRunner(number=1, repeat=1) as runner:
        results = runner.measure(task, [task.default_config] * 5)
    assert all(r.ok for r in results)
    pids = [r.config["pid"] for r in results]
    assert pids[0] == pids[1] != pids[2] == pids[3] != pids[4] and len(set(pids)) == 3 and os.getpid() not in pids
    assert len(multiprocessing.active_children()) == before


def test_a_runner_interrupted_mid_config_never_hands_that_result_to_the_next(monkeypatch):
    """Ctrl-C in a notebook's tuning run stops it while the worker still measures a config; the same runner used
    again must not take that config's late result for the next config's (a wrong record in the log).

    No timer races the work: the worker says when it has the config, SIGINT comes then, and the worker holds the
    config until the test releases it. SIGINT's default handler is installed for the test: a suite run as a
    shell's background job has SIGINT ignored (that made this test fail on CI machines, issue 39)."""
    import os
    import select
    import signal
    import threading

    import tuning.cpu as cpu_module
    task = cpu_task("dense_pack.x86", data_shape=(1, 16), kernel_shape=(8, 16))
    real = cpu_module.measure_cpu
    # pipes, not multiprocessing Events: an Event's set() waits for a sleeper that the runner has killed
    started_r, started_w = os.pipe()
    release_r, release_w = os.pipe()

    def held(task, config, option, seed=0):   # the forked worker inherits it
        if config["tile_x"][1] == 8:
            os.write(started_w, b"!")
            select.select([release_r], [], [], 60)
        return real(task, config, option, seed)

    def interrupt_once_started() -> None:
        if select.select([started_r], [], [], 60)[0]:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(cpu_module, "measure_cpu", held)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        first, second = ({**task.default_config, "tile_x": [8 // b, b]} for b in (8, 2))
        with CpuRunner(timeout=60.0) as runner:
            interrupter = threading.Thread(target=interrupt_once_started)
            interrupter.start()
            with pytest.raises(KeyboardInterrupt):
                runner.measure(task, [first])
            interrupter.join()
            os.write(release_w, b"!")
            kept = runner._worker   # a runner that kept its worker: wait until the late result is in its pipe
            if kept is not None:
                kept.conn.poll(60)
            (got,) = runner.measure(task, [second])
    finally:
        signal.signal(signal.SIGINT, previous)
        for fd in (started_r, started_w, release_r, release_w):
            os.close(fd)
    assert got.config == second and got.ok


@pytest.mark.parametrize("bad, error, message", [
    ({"number": 1.5}, TypeError, "number=1.5: an integer 1..1,048,576"),
    ({"number": float("nan")}, TypeError, "number=nan: an integer"),
    ({"number": "2"}, TypeError, "number='2': an integer"),
    ({"number": None}, TypeError, "number=None: an integer"),
    ({"number": True}, TypeError, "number=True: an integer"),
    ({"number": 1 << 21}, ValueError, "number=2097152: an integer 1..1,048,576"),
    ({"repeat": 1001}, ValueError, "repeat=1001: an integer 1..1,000"),
    ({"min_repeat_ms": float("inf")}, ValueError, "min_repeat_ms=inf: a number of ms, 0..60000"),
    ({"min_repeat_ms": float("nan")}, ValueError, "min_repeat_ms=nan: a number of ms, 0..60000"),
    ({"min_repeat_ms": "10"}, TypeError, "min_repeat_ms='10': a number of ms"),
    ({"timeout": 1e30}, ValueError, "timeout=1e+30: a number of seconds, 0.1..3600"),
    ({"timeout": float("inf")}, ValueError, "timeout=inf: a number of seconds, 0.1..3600"),
    ({"timeout": None}, TypeError, "timeout=None: a number of seconds"),
    ({"check": "no"}, TypeError, "check='no': True or False"),     # truthy: it checked
    ({"check": 0}, TypeError, "check=0: True or False"),
])
def test_measure_options_are_refused_by_type_and_range_as_the_cli_flags_are(bad, error, message):
    with pytest.raises(error, match=re.escape(message)):
        CpuRunner(isolate=False, **bad)
    with pytest.raises(error, match=re.escape(message)):
        MeasureOption(**bad)


def test_measure_options_take_numpy_numbers():
    option = MeasureOption(number=np.int64(2), repeat=np.int32(3), min_repeat_ms=np.float32(0.5),
                           timeout=np.int64(5), check=np.bool_(False))
    assert option.check is False
    assert (option.number, option.repeat, option.min_repeat_ms, option.timeout) == (2, 3, 0.5, 5.0)
    assert type(option.number) is int and type(option.timeout) is float
