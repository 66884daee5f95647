"""The untuned baseline (issue 43: no tuned result slower than its untuned default in the same timed rounds): a tuning
run times the kernel build would run without a record (host.jit's, numpy's) as a trial of each task and logs it;
build applies a logged schedule or config only where it beat that record. Which kernel ran is read from the build's
steps (their backends), never from times."""

from __future__ import annotations

import dataclasses
import io
import random

import numpy as np
import pytest
from extras import needs
from test_host_tuning import small_net, trials, untuned_counted

import graph_pack
import tuning
from graph_pack import build
from graph_pack.host_auto import fused_op, read_auto_schedules
from graph_pack.reference import run_reference
from graph_pack.schedule_log import read_schedules, refuse_unused
from graph_pack.untuned import UNTUNED, dag_graph, untuned_dag_kernel
from host import compile_schedule, default_schedule
from host.knobs import schedule_config
from host.sketch import generate_sketches, sample
from host.templates import host
from tuning.auto_network import AutoScheduleTask, auto_tasks_of
from tuning.cpu import CpuRunner
from tuning.measure import CPU, MeasureResult
from tuning.records import RecordLog, load_records, make_record
from tuning.tune import CONFIRM_ROUNDS

pytestmark = needs("llvmlite")


def _result(config: dict, seconds: float) -> MeasureResult:
    return MeasureResult(config, round(seconds * 1e9), seconds, None, True, 0.0, CPU, 0.0)


def _plant(log, task, timed: list[tuple[dict, float]]) -> None:
    """Records of ``task`` with the given times, as a tuning run writes them (the untuned one by tuner "untuned")."""
    RecordLog(log).append([make_record(task, _result(c, s), "untuned" if c == UNTUNED else "auto") for c, s in timed])


def _backend(mod, name: str) -> str:
    return next(s.backend for s in mod.steps if s.name == name)


def _sampled_config(dag) -> dict:
    sketch = next(s for s in generate_sketches(dag) if s.name != "default")
    return schedule_config(dag, sample(dag, sketch, random.Random(0)))


@pytest.mark.parametrize("schedule_s, untuned_s, ran", [(1e-3, 5e-4, "jit"), (1e-4, 5e-4, "auto")])
def test_a_logged_schedule_runs_only_where_it_beat_the_untuned_kernel(tmp_path, schedule_s, untuned_s, ran):
    graph, params, x = small_net()
    task = auto_tasks_of(graph)[2]   # the dense (with its bias add)
    assert task.dag.name == "dense"
    log = tmp_path / "planted.jsonl"
    _plant(log, task, [(_sampled_config(task.dag), schedule_s), (UNTUNED, untuned_s)])
    auto = read_auto_schedules(log, host())
    mod = build(graph, "pynq", params, auto_schedules=auto)
    assert _backend(mod, "fc") == ran
    kept = "1 keep the untuned kernel" in auto.summary()
    assert kept == (ran == "jit")
    mod.run(x=x)
    np.testing.assert_array_equal(mod.get_output(0), run_reference(graph, params, {"x": x}))


def test_a_default_nest_that_beat_the_untuned_kernel_runs_and_one_without_that_record_does_not(tmp_path):
    graph, params, _ = small_net()
    task = auto_tasks_of(graph)[2]
    won = tmp_path / "won.jsonl"
    _plant(won, task, [({"sketch": -1}, 1e-4), (UNTUNED, 5e-4)])
    assert _backend(build(graph, "pynq", params, auto_schedules=read_auto_schedules(won, host())), "fc") == "auto"
    old = tmp_path / "old.jsonl"   # a log tuned before the untuned kernel was measured: the default nest never runs
    _plant(old, task, [({"sketch": -1}, 1e-4)])
    assert _backend(build(graph, "pynq", params, auto_schedules=read_auto_schedules(old, host())), "fc") == "jit"


@pytest.mark.parametrize("config_s, untuned_s, ran", [(1e-3, 5e-4, "jit"), (1e-4, 5e-4, "tuned")])
def test_a_template_config_runs_only_where_it_beat_the_untuned_kernel(tmp_path, config_s, untuned_s, ran):
    graph, params, x = small_net()
    task = next(t for t in tuning.extract_tasks(graph, target="cpu") if t.op.startswith("dense"))
    log = tmp_path / "planted.cpu.jsonl"
    RecordLog(log).append([make_record(task, _result(task.default_config, config_s), "xgb"),
                           make_record(task, _result(UNTUNED, untuned_s), "untuned")])
    best = tuning.load_best(log, "cpu")
    logged = read_schedules(log, host())   # vta run --target cpu --log's reader: the same decision
    assert (task.key in best) == (ran == "tuned") == (task.key in logged.candidates)
    mod = build(graph, "pynq", params, host_schedules=best)
    assert _backend(mod, "fc") == ran
    mod.run(x=x)
    np.testing.assert_allclose(mod.get_output(0), run_reference(graph, params, {"x": x}), rtol=1e-4, atol=1e-5)
    build(graph, "pynq", params, host_schedules=logged)   # vta run --log: a log whose every config lost is no error
    assert ("1 task(s) keep the untuned kernel" in logged.summary()) == (ran == "jit")
    refuse_unused("small_net", logged, built=True)


@needs("xgboost")
def test_tuning_times_the_untuned_kernel_once_per_task_and_logs_it(tmp_path):
    graph, _, _ = small_net()
    tasks = [auto_tasks_of(graph)[2], next(t for t in tuning.extract_tasks(graph, target="cpu")
                                           if t.op.startswith("dense"))]
    for task, tuner in zip(tasks, ("auto", "gridsearch"), strict=True):
        log = tmp_path / f"{tuner}.jsonl"
        for n_trial in (2, 3):   # the second run resumes: the untuned kernel is not measured again
            with CpuRunner(number=1, repeat=1, isolate=False) as runner:
                summary = tuning.tune_tasks([task], tuner=tuner, n_trial=n_trial, runner=runner, log=log,
                                            out=io.StringIO())
            records = load_records(log, template=task.template_version)
            assert len(trials(records)) == n_trial and untuned_counted(records, 1)   # one baseline timing per task
            untuned = [r for r in records if r.config == UNTUNED]                     # (and one per re-timing)
            assert all(r.tuner == "untuned" and r.ok for r in untuned)
        state = summary.states[0]
        assert state.untuned_s == min(r.result["latency_s"] for r in untuned) and state.baseline_s == state.untuned_s
        assert state.tuned_s <= state.untuned_s
        applied = summary.best_configs()
        assert (task.key in applied) == (state.best_s < state.untuned_s)


def test_the_untuned_kernel_of_every_resnet18_task_is_the_kernel_build_runs():
    """Each auto-scheduler task's graph gives back its DAG; its untuned kernel runs the backends the untuned build of
    the whole network runs for that op, and computes what the default nest does (bit for bit; softmax, numpy's, to
    float tolerance)."""
    graph, params = graph_pack.zoo.get_model("resnet-18", batch_size=1, image_shape=(3, 32, 32))
    steps = {s.name: s.backend for s in build(graph, "pynq", params).steps}
    rng = np.random.default_rng(0)
    tasks = auto_tasks_of(graph)
    assert len(tasks) == 22
    for task in tasks:
        small, _ = dag_graph(task.dag)
        anchor = next(iter(small.ops()))
        assert fused_op(small, anchor, small.consumers()).dag.key == task.dag.key
        kernel = untuned_dag_kernel(task.dag)
        assert kernel.backends[0] == steps[task.names[0]], task.name
        xs = [rng.standard_normal(t.shape).astype(np.float32) for t in task.dag.inputs]
        want = compile_schedule(task.dag, default_schedule(task.dag))(*xs)
        if task.dag.name == "softmax":
            np.testing.assert_allclose(kernel(*xs), want, rtol=1e-6, atol=1e-9)
        else:
            np.testing.assert_array_equal(kernel(*xs), want)
    conv = next(t for t in tasks if t.dag.name == "conv2d")
    assert untuned_dag_kernel(conv.dag).backends[0] == "jit"


def test_an_auto_task_compiles_the_untuned_kernel_and_accepts_its_config():
    graph, _, _ = small_net()
    task = auto_tasks_of(graph)[2]
    assert isinstance(task, AutoScheduleTask) and task.check(UNTUNED) is None
    inputs = task.template.random_inputs(np.random.default_rng(0))
    np.testing.assert_array_equal(task.compile(UNTUNED)(**inputs), task.template.reference(**inputs))


class _ScriptedRunner:
    """A CpuRunner (in this process) whose timings are replaced: the untuned kernel's by ``untuned_s`` in turn, every
    config's by ``config_s``. Outputs are still computed and checked by the real runner."""

    def __init__(self, untuned_s: list[float], config_s: float):
        self.real, self.untuned_s, self.config_s = CpuRunner(number=1, repeat=1, isolate=False), list(untuned_s), config_s

    def measure(self, task, configs):
        out = []
        for config, r in zip(configs, self.real.measure(task, configs), strict=True):
            s = self.untuned_s.pop(0) if config == UNTUNED else self.config_s
            out.append(dataclasses.replace(r, cycles=round(s * 1e9), latency_s=s))
        return out


@pytest.mark.parametrize("confirm_untuned_s, ran", [(1e-4, "jit"), (9e-4, "tuned")])
def test_a_config_that_beat_one_slow_timing_of_the_untuned_kernel_meets_it_again(tmp_path, confirm_untuned_s, ran):
    """The untuned kernel timed slow once (a load spike): the best config is timed against it again in alternating
    rounds, and build applies it only if it still wins there."""
    graph, params, _ = small_net()
    task = next(t for t in tuning.extract_tasks(graph, target="cpu") if t.op.startswith("dense"))
    log = tmp_path / "spike.jsonl"
    runner = _ScriptedRunner([1e-3] + [confirm_untuned_s] * CONFIRM_ROUNDS, 5e-4)
    summary = tuning.tune_tasks([task], tuner="gridsearch", n_trial=2, runner=runner, log=log, out=io.StringIO())
    assert not runner.untuned_s   # every round ran
    records = load_records(log, template=task.template_version)
    assert sum(r.tuner == "confirm" for r in records) == CONFIRM_ROUNDS and untuned_counted(records, 1)
    assert (task.key in tuning.load_best(log, "cpu")) == (ran == "tuned") == (task.key in summary.best_configs())
    mod = build(graph, "pynq", params, host_schedules=tuning.load_best(log, "cpu"))
    assert _backend(mod, "fc") == ran
    again = tuning.tune_tasks([task], tuner="gridsearch", n_trial=2, runner=CpuRunner(isolate=False), log=log,
                              out=io.StringIO())   # resumed: nothing is timed again, the rounds included
    assert len(load_records(log, template=task.template_version)) == len(records)
    assert again.best_configs() == summary.best_configs()
