"""Tuning a network: task extraction, the task scheduler, AutoTVM-style output, resume, and ``vta tune``."""

from __future__ import annotations

import io

import numpy as np
import pytest

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
    def __init__(self, **kw):
        super().__init__(**kw)
        self.measured = 0

    def measure(self, task, configs):
        self.measured += len(configs)
        return super().measure(task, configs)


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


@pytest.mark.parametrize("strategy", ["sequential", "gradient"])
def test_tune_tasks_prints_autotvm_progress_and_never_gets_slower(strategy):
    cfg = load_config("pynq")
    tasks = _small_tasks(cfg)
    out = io.StringIO()
    runner = CountingRunner(timing_only=True, check=False)
    summary = tune_tasks(tasks, tuner="random", n_trial=12, runner=runner, strategy=strategy, batch_size=4, out=out)
    text = out.getvalue()
    assert "[Task  1/ 3]  Current/Best:" in text and "GFLOPS | Progress: (" in text
    assert "end-to-end (tuned layers, weighted)" in text and "speedup" in text
    assert summary.latency_after_s <= summary.latency_before_s
    total = sum(s.trials for s in summary.states)
    assert total <= 36 and runner.measured == total  # the default config is each task's first trial
    for s in summary.states:
        assert s.best_s < float("inf") and s.tuner.best_config is not None


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
    assert "end-to-end simulated latency" in out and "outputs identical" in out
    assert log.exists() and len(log.read_text().splitlines()) > 0
    assert vta_main(args) == 0  # resumes


def test_tuned_schedules_are_used_by_build(tmp_path):
    from tuning.network import tune_network
    result = tune_network("resnet-18", load_config("pynq"), tuner="random", n_trial=8, image_size=32,
                          timing_only=True, log=tmp_path / "l.jsonl", out=io.StringIO())
    assert result.tuned.cycles <= result.untuned.cycles
    np.testing.assert_array_equal(result.tuned.get_output(0), result.untuned.get_output(0))


def test_timing_only_measures_the_same_cycles_as_full_runs():
    task = _small_tasks(load_config("pynq"))[0]
    configs = [c for c in task.space.sample(np.random.default_rng(1), 40) if task.check(c) is None][:6]
    full = LocalRunner(check=True).measure(task, configs)
    timing = LocalRunner(timing_only=True, check=False).measure(task, configs)
    assert all(r.ok and r.checked for r in full)
    assert [r.cycles for r in full] == [r.cycles for r in timing] and not any(r.checked for r in timing)


def test_dask_runner_measures_like_the_local_runner():
    pytest.importorskip("distributed", reason="the Dask executor is optional: pip install 'vta-stack[dask]'")
    from tuning.measure import DaskRunner, dask_client
    task = _small_tasks(load_config("pynq"))[1]
    configs = [task.default_config, *[c for c in task.space if task.check(c) is None][:3]]
    with dask_client(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None) as client:
        remote = DaskRunner(client, timing_only=True, check=False).measure(task, configs)
    local = LocalRunner(timing_only=True, check=False).measure(task, configs)
    assert [r.cycles for r in remote] == [r.cycles for r in local] and all(r.ok for r in remote)
