"""Tuning a network: task extraction, the task scheduler, AutoTVM-style output, resume, and ``vta tune``."""

from __future__ import annotations

import io
import json
import re

import numpy as np
import pytest
from extras import need

from graph_pack import zoo
from graph_pack.pack import graph_pack
from graph_pack.quantize import quantize
from hw_config import load_config
from tuning.measure import LocalRunner
from tuning.task import conv_task, extract_tasks
from tuning.tune import tune_tasks
from vta.cli import main as vta_main

VTA_RESNET18_CONVS = {  # (H, CI, CO, K, stride) of C2..C11
    (56, 64, 64, 3, 1), (56, 64, 128, 3, 2), (56, 64, 128, 1, 2), (28, 128, 128, 3, 1), (28, 128, 256, 3, 2),
    (28, 128, 256, 1, 2), (14, 256, 256, 3, 1), (14, 256, 512, 3, 2), (14, 256, 512, 1, 2), (7, 512, 512, 3, 1)}


class CountingRunner(LocalRunner):
    """A local runner that remembers every (task, config, result) it measured."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.measured = 0
        self.seen: list[tuple] = []

    def measure(self, task, configs):
        self.measured += len(configs)
        results = super().measure(task, configs)
        self.seen.extend((task.key, c, r) for c, r in zip(configs, results, strict=True))
        return results


def test_extract_tasks_from_resnet18_deduplicates_and_weights():
    cfg = load_config("pynq")
    graph, params = zoo.get_model("resnet-18")
    packed = graph_pack(*quantize(graph, params)[:1], cfg)
    tasks = extract_tasks(packed, cfg)
    assert sum(t.weight for t in tasks) == 19 and all(len(t.names) == t.weight for t in tasks)
    assert len({t.key for t in tasks}) == len(tasks)
    shapes = {(t.workload["data_shape"][2], t.workload["data_shape"][1], t.workload["kernel_shape"][0],
               t.workload["kernel_shape"][2], t.workload["strides"][0]) for t in tasks}
    assert shapes == VTA_RESNET18_CONVS  # the ten workloads of VTA's tune_relay_vta
    assert extract_tasks(packed, cfg, ops=("dense",)) == []


def _small_tasks(cfg):
    return [conv_task(cfg, (1, 32, 14, 14), (32, 32, 3, 3), 1, 1), conv_task(cfg, (1, 32, 14, 14), (64, 32, 1, 1), 2, 0),
            conv_task(cfg, (1, 64, 7, 7), (64, 64, 3, 3), 1, 1, residual=True)]


@pytest.mark.parametrize("preset, basis", [("pynq", "board model"), ("sim", "simulated")])
def test_tunes_figures_say_their_basis_and_are_the_objectives(preset, basis):
    """Issue 39, item 4: vta tune printed "12.79 GFLOPS" (the board model's time) where vta run printed 36.3 GOPS
    (simulated cycles) for the same layer, neither saying which. Every rate and time now names its basis: the
    board model's prediction where the config has one (pynq), the cycles at the clock where not (sim)."""
    cfg = load_config(preset)
    task = conv_task(cfg, (1, 32, 14, 14), (32, 32, 3, 3), 1, 1)
    out = io.StringIO()
    runner = CountingRunner(timing_only=True, check=False)
    summary = tune_tasks([task], tuner="random", n_trial=4, runner=runner, batch_size=4, out=out)
    [line] = [x for x in out.getvalue().splitlines() if x.startswith("[Task")]
    best = min(r.latency_s for _, _, r in runner.seen if r.ok)
    cycles = min(r.cycles for _, _, r in runner.seen if r.ok and r.latency_s == best)
    ops = 2 * 14 * 14 * 32 * 32 * 3 * 3   # 2 x the layer's MACs (3,612,672 int8 operations)
    assert f"/{ops / best / 1e9:7.2f} GOPS ({basis}) | Progress: (4/4)" in line
    assert line.endswith(f"best {best * 1e3:.3f} ms ({basis}), {cycles:,} simulated cycles")
    if preset == "sim":   # no board model: the time is the cycles at the clock
        assert best == cycles / (cfg.CLOCK_MHZ * 1e6)
    assert summary.states[0].basis == basis
    assert out.getvalue().splitlines()[-1].endswith(f"default ms and best ms: {basis} (docs/simulate.md, \"Which time "
                                                    "is which\")")


@pytest.mark.parametrize("strategy", ["sequential", "gradient"])
def test_tune_tasks_prints_autotvm_progress_and_never_gets_slower(strategy):
    cfg = load_config("pynq")
    tasks = _small_tasks(cfg)
    out = io.StringIO()
    runner = CountingRunner(timing_only=True, check=False)
    summary = tune_tasks(tasks, tuner="random", n_trial=12, runner=runner, strategy=strategy, batch_size=4, out=out)
    text = out.getvalue()
    assert "[Task  1/ 3]  Current/Best:" in text and "GOPS (board model) | Progress: (" in text
    assert "end-to-end (tuned layers, weighted)" in text and "speedup" in text
    total = sum(s.trials for s in summary.states)
    assert total <= 36 and runner.measured == total
    # the summary's latencies are what the runner really measured: each task's default config is measured
    # first, and its best is the fastest valid measurement of that task by board latency (the objective)
    before = after = 0.0
    for s in summary.states:
        mine = [(c, r) for key, c, r in runner.seen if key == s.task.key]
        assert mine[0][0] == s.task.default_config and mine[0][1].ok
        assert all(r.latency_s > 0 for _, r in mine if r.ok)
        default = mine[0][1].latency_s
        best = min(r.latency_s for _, r in mine if r.ok)
        assert s.default_s == pytest.approx(default) and s.best_s == pytest.approx(best)
        assert s.tuner.best_config in [c for c, r in mine if r.ok and r.latency_s == pytest.approx(best)]
        before += s.task.weight * default
        after += s.task.weight * best
    assert summary.latency_before_s == pytest.approx(before) and summary.latency_after_s == pytest.approx(after)
    assert after < before   # 12 random trials on these layers find something faster than the default


def test_gradient_scheduler_spends_on_the_heavy_task():
    cfg = load_config("pynq")
    tasks = _small_tasks(cfg)
    tasks[0].weight = 20  # run 20 times per inference: improving it pays most
    summary = tune_tasks(tasks, tuner="random", total_trials=40, runner=LocalRunner(timing_only=True, check=False),
                         strategy="gradient", batch_size=4, out=io.StringIO())
    trials = [s.trials for s in summary.states]
    assert sum(trials) <= 40 and trials[0] == max(trials)


def test_resume_from_log_measures_nothing_twice(tmp_path):
    cfg = load_config("pynq")
    tasks = _small_tasks(cfg)[:2]
    log = tmp_path / "t.jsonl"
    first = CountingRunner(timing_only=True, check=False)
    a = tune_tasks(tasks, tuner="xgb", n_trial=8, runner=first, log=log, batch_size=4, out=io.StringIO())
    again = CountingRunner(timing_only=True, check=False)
    b = tune_tasks(_small_tasks(cfg)[:2], tuner="xgb", n_trial=8, runner=again, log=log, batch_size=4,
                   out=io.StringIO())
    assert again.measured == 0  # every trial, the untuned baselines included, came from the log
    assert [s.best_s for s in a.states] == [s.best_s for s in b.states]


def test_vta_tune_small_network_end_to_end(tmp_path, capsys):
    log = tmp_path / "r18.jsonl"
    args = ["tune", "resnet-18", "--image-size", "32", "--n-trial", "6", "--timing-only", "--tuner", "random",
            "--log", str(log)]
    assert vta_main(args) == 0
    out = capsys.readouterr().out
    assert "end-to-end, the accelerator's part:" in out and "outputs identical" in out
    # each build's figures with their basis, and the speedup's (the board model's time, the tuners' objective)
    line = next(x for x in out.splitlines() if x.startswith("end-to-end, the accelerator's part:"))
    figures = r"[\d,]+ cycles = [\d.]+ ms at 100 MHz \(simulated\), [\d.]+ ms \(board model\)"
    assert re.fullmatch(rf"end-to-end, the accelerator's part: untuned {figures}; tuned {figures}: [\d.]+x faster "
                        r"\(board model\); outputs identical", line), line
    first = log.read_text().splitlines()
    tasks = {json.loads(line)["workload"] for line in first}
    assert len(first) == 6 * len(tasks) and len(tasks) > 1   # the scheduler spent exactly its budget
    assert vta_main(args) == 0  # resumes: every trial is in the log already, so nothing is measured again
    assert log.read_text().splitlines() == first
    assert capsys.readouterr().out.count("end-to-end, the accelerator's part:") == 1
    assert vta_main([*args[:5], "8", *args[6:]]) == 0  # a larger budget measures only the new trials
    assert log.read_text().splitlines()[:len(first)] == first
    assert len(log.read_text().splitlines()) == 8 * len(tasks)


def test_vta_tune_without_xgboost_names_the_extra_and_the_tuners_that_need_nothing(tmp_path, monkeypatch, capsys):
    """The default tuner is xgb, which the core install lacks: `vta tune` says in one line how to get it and
    which tuners run without it, before it measures anything."""
    import sys

    monkeypatch.setitem(sys.modules, "xgboost", None)   # as if not installed
    log = tmp_path / "r18.jsonl"
    assert vta_main(["tune", "resnet-18", "--image-size", "32", "--n-trial", "2", "--log", str(log)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("vta: error: XGBTuner") and "\n" not in err
    assert "pip install 'vta-stack[tuning]'" in err and "'random', 'gridsearch' and 'ga'" in err
    assert not log.exists() or log.read_text() == ""


def test_tuned_schedules_are_used_by_build(tmp_path):
    from graph_pack.build import AccelStep, workload_key
    from tuning.network import tune_network
    from tuning.records import best_records, load_records
    log = tmp_path / "l.jsonl"
    result = tune_network("resnet-18", load_config("pynq"), tuner="random", n_trial=8, image_size=32,
                          timing_only=True, log=log, out=io.StringIO())
    np.testing.assert_array_equal(result.tuned.get_output(0), result.untuned.get_output(0))
    # each layer runs the config of its task's best record (by board latency, the objective), read back from the
    # log, where that record beat the default config (measured first, so it is the log's first record of the
    # task); the default otherwise.
    # (Cycles in the network differ from the task's: a task stands for every layer of its shape and its program
    # carries the generic epilogue, not each layer's exact requantization ops.)
    records = load_records(log)
    best = {key: r for key, r in best_records(records).items() if r.ok}
    default = {}
    for r in records:
        default.setdefault(r.workload, r)
    tuned_layers = 0
    for step in (s for s in result.tuned.steps if isinstance(s, AccelStep)):
        key = workload_key(step.workload)
        want = best[key].config if best[key].rank < default[key].rank else default[key].config
        assert step.op.config == want, step.name
        tuned_layers += want != default[key].config
    untuned = [s.op.config for s in result.untuned.steps if isinstance(s, AccelStep)]
    assert all(c == default[workload_key(s.workload)].config
               for c, s in zip(untuned, (s for s in result.untuned.steps if isinstance(s, AccelStep)), strict=True))
    assert tuned_layers > 0 and result.tuned.stats.latency_s < result.untuned.stats.latency_s   # the objective
    assert result.speedup == pytest.approx(result.untuned.stats.latency_s / result.tuned.stats.latency_s)


def test_timing_only_measures_the_same_cycles_as_full_runs():
    task = _small_tasks(load_config("pynq"))[0]
    configs = [c for c in task.space.sample(np.random.default_rng(1), 40) if task.check(c) is None][:6]
    full = LocalRunner(check=True).measure(task, configs)
    timing = LocalRunner(timing_only=True, check=False).measure(task, configs)
    assert all(r.ok and r.checked for r in full)
    assert [r.cycles for r in full] == [r.cycles for r in timing] and not any(r.checked for r in timing)


def test_dask_runner_measures_like_the_local_runner():
    need("distributed")
    from tuning.measure import DaskRunner, dask_client
    task = _small_tasks(load_config("pynq"))[1]
    configs = [task.default_config, *[c for c in task.space if task.check(c) is None][:3]]
    with dask_client(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None) as client:
        remote = DaskRunner(client, timing_only=True, check=False).measure(task, configs)
    local = LocalRunner(timing_only=True, check=False).measure(task, configs)
    assert [r.cycles for r in remote] == [r.cycles for r in local] and all(r.ok for r in remote)


@pytest.mark.parametrize("batch_size", [4, 16])
def test_gradient_scheduler_spends_exactly_its_budget_also_after_a_resume(tmp_path, batch_size):
    cfg = load_config("pynq")
    log = tmp_path / "g.jsonl"
    for total in (10, 23):   # 10 < 3 tasks x batch 16: the warm-up must not overshoot either
        runner = CountingRunner(timing_only=True, check=False)
        summary = tune_tasks(_small_tasks(cfg), tuner="random", total_trials=total, runner=runner, strategy="gradient",
                             batch_size=batch_size, log=log, out=io.StringIO())
        assert sum(s.trials for s in summary.states) == total
        assert len(log.read_text().splitlines()) == total
        assert all(s.trials >= 2 for s in summary.states)   # no task starves in the warm-up


def test_vta_tune_takes_start_and_stop_for_a_model_without_the_zoos_pack_points(tmp_path):
    """An ONNX model has no pack points of its own: the default ones (nn.max_pool2d ... ) are not in the README's
    digits_cnn, so `vta tune` could not tune it. Without flags its regions are found automatically (--explain says
    so; the stem is quantized and tuned too, as vta run offloads it then); --start / --stop, as vta run takes them,
    choose VTA's offload region instead (the stem in float, VTA's convention): two of the same tasks, so the log is
    resumed, and the last line's vta run command carries the flags; that run uses the tuned schedules."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    model = str(root / "examples" / "digits_cnn.onnx")
    env = {**os.environ, "PYTHONPATH": str(root)}

    def vta(*args):
        return subprocess.run([sys.executable, "-m", "vta", *args], cwd=tmp_path, capture_output=True, text=True,
                              timeout=600, check=False, env=env)

    bare = vta("tune", model, "--tuner", "random", "--n-trial", "4", "--log", "x.jsonl", "--explain")
    assert bare.returncode == 0, bare.stderr
    assert "3 task(s) on" in bare.stdout and "1 accelerator region(s), found automatically" in bare.stdout
    assert f"vta run {model} --log x.jsonl" in bare.stdout
    named = vta("tune", model, "--start", "nn.max_pool2d", "--tuner", "random", "--n-trial", "4", "--log", "y.jsonl")
    assert named.returncode == 2 and "vta: error: --start nn.max_pool2d: no operator matches it" in named.stderr
    region = ["--start", "qnn.quantize", "--stop", "nn.batch_flatten"]
    proc = vta("tune", model, *region, "--tuner", "random", "--n-trial", "4", "--log", "x.jsonl")
    assert proc.returncode == 0, proc.stderr
    assert "2 task(s) on" in proc.stdout and "outputs identical" in proc.stdout
    assert f"vta run {model} --start qnn.quantize --stop nn.batch_flatten --log x.jsonl" in proc.stdout
    assert len((tmp_path / "x.jsonl").read_text().splitlines()) == 12   # 3 tasks x 4 trials, none added
    ran = vta("run", model, *region, "--log", "x.jsonl")
    assert ran.returncode == 0, ran.stderr
    assert "schedules: 2 of 2 task(s) from x.jsonl" in ran.stdout + ran.stderr
    cpu = vta("tune", model, "--target", "cpu", "--start", "qnn.quantize", "--log", "c.jsonl")
    assert cpu.returncode == 2 and "--start and --stop choose the accelerator's offload region" in cpu.stderr
