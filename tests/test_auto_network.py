"""The auto-scheduler across a network (issue 43 item 3): `vta tune --target cpu --scheduler auto` through the task
scheduler, the CPU runner and the tuning log (resume, Ctrl-C, --plot), and `vta run --log` / build applying the
logged schedules; every output is compared with graph_pack's numpy reference of the whole graph."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import time

import numpy as np
import pytest
from extras import needs
from test_host_tuning import beat_untuned, small_net, trials, untuned_counted

from graph_pack import build
from graph_pack.host_auto import read_auto_schedules
from graph_pack.reference import run_reference
from graph_pack.untuned import UNTUNED
from host.knobs import AUTO_VERSION
from host.templates import host
from tuning import tune_tasks
from tuning.auto_network import AutoScheduleTask, auto_tasks_of
from tuning.cpu import CpuRunner
from tuning.records import load_records

pytestmark = [needs("llvmlite"), needs("xgboost")]
TUNE = ("tune", "resnet-18", "--target", "cpu", "--scheduler", "auto", "--image-size", "32", "--repeat", "1",
        "--min-repeat-ms", "1")


def _vta(*argv: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(["vta", *argv], capture_output=True, text=True, cwd=cwd, timeout=600, check=False)


def test_vta_tune_scheduler_auto_logs_plots_resumes_and_vta_run_applies_the_log(tmp_path):
    tuned = _vta(*TUNE, "--ops", "dense,softmax", "--n-trial", "3", "--log", "r18.auto.jsonl", "--plot", "p.html",
                 cwd=tmp_path)
    assert tuned.returncode == 0, tuned.stderr[-3000:]
    assert "resnet-18: 2 host task(s) on" in tuned.stdout and "(auto-scheduler)" in tuned.stdout
    assert "outputs agree" in tuned.stdout and "plot: p.html" in tuned.stdout
    assert "vta run resnet-18 --target cpu --image-size 32 --log r18.auto.jsonl" in tuned.stdout
    records = load_records(tmp_path / "r18.auto.jsonl", template=None)
    assert len(trials(records)) == 6 and {r.op for r in records} == {"auto.dense", "auto.softmax"}
    assert {(r.template, r.hw) for r in records} == {(AUTO_VERSION, host().fingerprint)}
    assert {r.tuner for r in trials(records)} == {"auto"}
    assert untuned_counted(records, 2)   # each task's untuned kernel (the build's), timed too
    assert sum(r.config == {"sketch": -1} for r in trials(records)) == 2   # each task's default schedule, measured first
    page = (tmp_path / "p.html").read_text()
    assert "auto.dense_1x512_1000x512_1000+add" in page and "auto.softmax_1x1000" in page

    again = _vta(*TUNE, "--ops", "dense,softmax", "--n-trial", "4", "--log", "r18.auto.jsonl", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resuming from {len(records)} records in r18.auto.jsonl: 2 of 2 tasks measured before" in again.stdout
    records = load_records(tmp_path / "r18.auto.jsonl", template=None)
    assert len(trials(records)) == 8   # two more trials, none measured twice
    assert len({(r.workload, json.dumps(r.config, sort_keys=True)) for r in trials(records)}) == 8

    ran = _vta("run", "resnet-18", "--target", "cpu", "--image-size", "32", "--log", "r18.auto.jsonl", "--check",
               "--no-layers", "--report", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr[-3000:]
    best = {op: beat_untuned(records, op) for op in ("auto.dense", "auto.softmax")}   # else numpy's / the JIT's runs
    assert f"auto-scheduled: {sum(best.values())} host op(s) from r18.auto.jsonl" in ran.stdout
    assert "check: output matches the numpy reference" in ran.stdout
    fc = "auto" if best["auto.dense"] else "jit"
    assert any(line.split()[:3] == ["fc", "nn.dense", fc] for line in ran.stdout.splitlines()), ran.stdout[-2000:]
    # the accelerator's run keeps its float host ops (the classifier, softmax) on the CPU: the same log applies there
    vta = _vta("run", "resnet-18", "--image-size", "32", "--log", "r18.auto.jsonl", "--no-layers", "--check",
               cwd=tmp_path)
    assert vta.returncode == 0, vta.stderr[-3000:]   # softmax's schedules too: its kernels are bit-exact
    assert "check: output matches the numpy reference bit-exactly" in vta.stdout
    # the same ops take the same decisions as in the CPU run (softmax included: its kernels are bit-exact)
    lines = [[line for line in run.stdout.splitlines() if line.startswith("auto-scheduled:")] for run in (ran, vta)]
    assert lines[1] == lines[0] if any(best.values()) else lines[1] in ([], lines[0]), (lines, best)


def test_scheduler_auto_flags_that_do_not_apply_are_one_line(tmp_path):
    for argv, message in (
            (("tune", "resnet-18", "--scheduler", "auto"), ("--scheduler auto searches the host CPU's schedules: give "
                                                           "--target cpu")),
            ((*TUNE, "--tuner", "random"), "--tuner random picks a template tuner; --scheduler auto searches"),
            ((*TUNE, "--ops", "conv9"), ("no host op for the auto-scheduler among --ops conv9; this network's are "
                                         "conv2d, dense, global_avg_pool2d, max_pool2d, softmax"))):
        done = _vta(*argv, cwd=tmp_path)
        assert done.returncode == 2 and message in done.stderr, done.stderr[-3000:]
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_ctrl_c_keeps_the_trials_measured_and_the_same_command_resumes(tmp_path):
    argv = ["vta", *TUNE, "--ops", "conv2d", "--n-trial", "2", "--log", "c.jsonl"]
    log = tmp_path / "c.jsonl"
    old = signal.signal(signal.SIGINT, signal.default_int_handler)   # (a background job ignores SIGINT)
    try:
        proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
    finally:
        signal.signal(signal.SIGINT, old)
    try:
        deadline = time.monotonic() + 300
        while not (log.exists() and len(load_records(log, template=None)) >= 2):
            assert proc.poll() is None and time.monotonic() < deadline, "no record before the end"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(60) == 130
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    err = proc.stderr.read()
    saved = len(load_records(log, template=None))
    assert f"vta: interrupted: {saved} record(s) saved in c.jsonl ({saved} by this run); run the same command again " \
           "to resume" in err, err[-3000:]
    again = _vta(*TUNE, "--ops", "conv2d", "--n-trial", "2", "--log", "c.jsonl", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resuming from {saved} records in c.jsonl" in again.stdout
    records = trials(load_records(log, template=None))   # (the re-timings against the untuned kernel repeat configs)
    assert len({(r.workload, json.dumps(r.config, sort_keys=True)) for r in records}) == len(records)


def test_the_python_api_tunes_twice_in_one_process_and_build_is_exact(tmp_path):
    """Tasks of a small conv net (residual add, biases, relus, dense) tuned through the task scheduler, twice in one
    process (kernels, LLVM state and the runner's worker reused), each build bit-equal to the numpy reference."""
    graph, params, x = small_net()
    want = run_reference(graph, params, {"x": x})
    for round_ in range(2):
        log = tmp_path / f"small{round_}.jsonl"
        tasks = auto_tasks_of(graph)
        assert all(isinstance(t, AutoScheduleTask) for t in tasks)
        assert [(t.dag.name, t.weight) for t in tasks] == [("conv2d", 2), ("conv2d", 1), ("dense", 1)]   # c1 = c3
        assert tasks[1].dag.attrs["consumers"] == [["add", "channel"], ["add", "full"], ["relu"]]
        with CpuRunner(number=1, repeat=1, seed=round_) as runner:
            summary = tune_tasks(tasks, tuner="auto", n_trial=4, runner=runner, log=log, strategy="gradient",
                                 batch_size=2, seed=round_, out=io.StringIO())
        assert sum(s.trials for s in summary.states) == 12
        records = load_records(log, template=AUTO_VERSION)
        assert len(trials(records)) == 12 and all(r.result["checked"] for r in records if r.ok)
        assert untuned_counted(records, 3)
        auto = read_auto_schedules(log, host())
        mod = build(graph, "pynq", params, auto_schedules=auto)
        mod.run(x=x)
        assert np.array_equal(mod.get_output(0), want)
        tuned = [t for t in tasks if beat_untuned([r for r in records if r.workload == t.key], t.op)]
        assert sum(s.backend == "auto" for s in mod.steps) == sum(t.weight for t in tuned)   # (tests/test_untuned.py:
        # a planted schedule that wins runs, bit-equal to the reference; one that loses does not)


def test_a_wrong_kernel_is_a_failed_trial_and_never_applied(tmp_path, monkeypatch):
    """A schedule whose output differs from the default schedule's by one ulp fails its trial (bit for bit)."""
    graph, _, _ = small_net()
    task = auto_tasks_of(graph)[2]   # the dense
    real = AutoScheduleTask.compile

    def off_by_an_ulp(self, config=None, **kw):
        kernel = real(self, config)
        if config in (None, {"sketch": -1}, UNTUNED):
            return kernel
        return lambda **inputs: np.nextafter(kernel(**inputs), np.float32(np.inf))
    monkeypatch.setattr(AutoScheduleTask, "compile", off_by_an_ulp)
    with CpuRunner(number=1, repeat=1, isolate=False) as runner:
        tune_tasks([task], tuner="auto", n_trial=3, runner=runner, log=tmp_path / "w.jsonl", out=io.StringIO())
    records = load_records(tmp_path / "w.jsonl", template=AUTO_VERSION)
    assert [r.ok for r in records][:4] == [True, True, False, False]   # the default nest, the untuned kernel, 2 trials
    assert all("differs from the default schedule's output" in r.result["error"] for r in records[2:4])
    applied = read_auto_schedules(tmp_path / "w.jsonl", host())(task.dag)
    assert applied is None or applied.sketch == "default"   # the default nest where it beat the untuned kernel


@pytest.mark.parametrize("workload", [{"op": "conv9", "inputs": [[1, 2]]}, {"op": "dense", "inputs": [[1, 4]]},
                                      {"op": "dense", "inputs": [[1, 4]], "w": [3, 5], "producers": [],
                                       "consumers": []}])
def test_a_bad_auto_workload_is_refused_naming_what(workload):
    task = AutoScheduleTask(workload, host())
    with pytest.raises(ValueError, match="host workload"):
        task.dag  # noqa: B018


def test_auto_tasks_tuned_over_rpc_on_a_cpu_server_build_exactly(tmp_path):
    """The server rebuilds each DAG from the record's workload, measures in its worker, and refuses a bad one."""
    from tuning import RPCCpuRunner
    from vta.rpc import LocalCluster
    from vta.rpc.client import RemoteDevice, request_board
    graph, params, x = small_net()
    log = tmp_path / "rpc.jsonl"
    with LocalCluster(boards=1, key="cpu", server_args=("--device", "cpu"), log_dir=tmp_path) as cluster:
        runner = RPCCpuRunner("cpu", *cluster.tracker, number=1, repeat=1)
        tasks = auto_tasks_of(graph, runner.cpu_target)
        tune_tasks(tasks, tuner="auto", n_trial=2, runner=runner, log=log, batch_size=1, out=io.StringIO())
        assert sum(runner.boards_used.values()) == len(load_records(log, template=None))   # every timing, there
        address, port, matchkey = request_board(cluster.tracker, "cpu")
        with RemoteDevice(address, port, matchkey=matchkey) as board, \
                pytest.raises(ValueError, match="host workload 'dense': dense: x"):
            board.measure_cpu({**json.loads(tasks[2].key), "w": [10, 7]}, {"sketch": -1}, {})
    records = load_records(log, template=AUTO_VERSION)
    assert len(trials(records)) == 6 and untuned_counted(records, 3)
    assert all(r.ok and r.hw == host().fingerprint for r in records)
    mod = build(graph, "pynq", params, auto_schedules=read_auto_schedules(log, host()))
    mod.run(x=x)
    assert np.array_equal(mod.get_output(0), run_reference(graph, params, {"x": x}))
