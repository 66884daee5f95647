"""The auto-scheduler across a network (``vta tune MODEL --target cpu --scheduler auto``): each host DAG of
``tuning.auto_tasks`` is a task of the same task scheduler, runners and records as the host templates' tasks.

    tasks = auto_tasks_of(graph)                                   # AutoScheduleTask per fused host op, weighted
    with CpuRunner(number=1, repeat=3) as runner:                  # or RPCCpuRunner to a `vta rpc server --device cpu`
        tune_tasks(tasks, runner=runner, tuner="auto", strategy="gradient", log="r18.auto.jsonl")
    mod = graph_pack.build(graph, env, params, auto_schedules=read_auto_schedules("r18.auto.jsonl", host()))

A task's configs are the integer knobs of ``host.knobs`` (its workload the DAG's key, its records' template
``AUTO_VERSION``); ``AutoScheduleTuner`` proposes them as ``tuning.auto_schedule`` does (evolution under the XGBoost
cost model, epsilon-greedy random picks), with the tuners' interface, so ``tune_tasks`` spends trials where the
network gains most, resumes from the log, and measures each config in the runner's worker process (timeout, crash
isolation). The default schedule is measured first; every other schedule's output must equal its output bit for bit
(the default schedule computes what graph_pack's numpy kernels compute).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from functools import cached_property

import numpy as np

from graph_pack.graph import Graph
from graph_pack.untuned import is_untuned, untuned_dag_kernel
from host import default_schedule
from host.features import features
from host.knobs import AUTO_VERSION, config_schedule, dag_of_workload, schedule_config
from host.loop_ir import ComputeDag
from host.templates import CpuTarget, host
from tuning.auto_schedule import CostModel, Proposer, SearchPolicy
from tuning.auto_tasks import extract_auto_tasks
from tuning.cpu import CpuTask, close_to
from tuning.measure import MeasureResult, cost_cycles
from tuning.records import Record
from tuning.tuners import Tuner, _result_of, register_tuner

DEFAULT_CONFIG = {"sketch": -1}


class _DagProgram:
    """What a CPU runner asks of a task's template: random inputs by name, and the reference output (the default
    schedule's kernel, itself exact against graph_pack's numpy kernels)."""

    def __init__(self, dag: ComputeDag):
        self.dag = dag

    def random_inputs(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        return {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in self.dag.inputs}

    def reference(self, **inputs: np.ndarray) -> np.ndarray:
        from host import compile_schedule  # (llvmlite on first use: importing tuning needs none)
        return compile_schedule(self.dag, default_schedule(self.dag))(*(inputs[t.name] for t in self.dag.inputs))

    @property
    def macs(self) -> int:
        return dag_work(self.dag)


def dag_work(dag: ComputeDag) -> int:
    """Points computed: each stage's space times its reduction (a conv2d's multiply-adds, plus its epilogue)."""
    return sum(math.prod(a.extent for a in (*s.axes, *s.reduce)) for s in dag.stages)


class AutoScheduleTask(CpuTask):
    """One host DAG to auto-schedule on one CPU; ``workload`` is the DAG's key as a dict."""

    MISMATCH = "differs from the default schedule's output (bit for bit)"

    @staticmethod
    def of_dag(dag: ComputeDag, target: CpuTarget | None = None, weight: int = 1,
               names: Sequence[str] = ()) -> AutoScheduleTask:
        return AutoScheduleTask(json.loads(dag.key), target or host(), weight, list(names))

    @cached_property
    def dag(self) -> ComputeDag:
        return dag_of_workload(self.workload)

    @property
    def key(self) -> str:
        return self.dag.key

    @property
    def op(self) -> str:
        return f"auto.{self.dag.name}"

    @property
    def template_version(self) -> str:
        return AUTO_VERSION

    @property
    def name(self) -> str:
        shapes = "_".join("x".join(map(str, t.shape)) for t in self.dag.inputs)
        chain = [op[0] for op in (*self.workload.get("consumers", ()), *self.workload.get("ops", ()))]
        return f"{self.op}_{shapes}" + "".join(f"+{c}" for c in chain)

    @cached_property
    def template(self) -> _DagProgram:
        return _DagProgram(self.dag)

    def compile(self, config: dict | None = None, **kwargs):
        from host import compile_schedule  # (llvmlite on first use: importing tuning needs none)
        dag = self.dag
        if is_untuned(config):   # the kernel build runs without a record: host.jit's, numpy's, or the default nest
            untuned = untuned_dag_kernel(dag)
            return lambda **inputs: untuned(*(inputs[t.name] for t in dag.inputs))
        kernel = compile_schedule(dag, config_schedule(dag, config or DEFAULT_CONFIG))
        return lambda **inputs: kernel(*(inputs[t.name] for t in dag.inputs))

    @property
    def default_config(self) -> dict:
        return dict(DEFAULT_CONFIG)

    def check(self, config: dict) -> str | None:
        if is_untuned(config):
            return None
        try:
            config_schedule(self.dag, config)
        except ValueError as e:
            return str(e)
        return None

    @property
    def flop(self) -> int:
        return 2 * dag_work(self.dag)

    def matches(self, got: np.ndarray, want: np.ndarray) -> bool:
        return got.shape == want.shape and bool(np.array_equal(got, want, equal_nan=True))

    def matches_untuned(self, got: np.ndarray, want: np.ndarray) -> bool:
        """The untuned kernel against the default nest: numpy's softmax and layer norm round differently (1 ulp),
        so to float tolerance; every other op's untuned kernel is bit-equal (tests/test_untuned.py)."""
        return close_to(got, want)

    def __repr__(self) -> str:
        return f"AutoScheduleTask({self.name}, weight={self.weight})"


def auto_tasks_of(graph: Graph, target: CpuTarget | None = None) -> list[AutoScheduleTask]:
    """The network's host DAGs as tasks (deduplicated, weighted by occurrences, in order of first use); ValueError
    naming the nodes no DAG covers would be too strict (a layout change has none): they keep their kernels."""
    tasks, _ = extract_auto_tasks(graph)
    return [AutoScheduleTask.of_dag(t.dag, target, t.weight, [nodes[0] for nodes, _ in t.occurrences])
            for t in tasks]


def _config_key(config: dict) -> str:
    return json.dumps(config, sort_keys=True)


class AutoScheduleTuner:
    """Ansor's search for one task behind the tuners' interface (``next_batch``, ``measure``, ``feed_records``, the
    best so far), so ``tuning.tune.tune_tasks`` schedules it among a network's tasks."""

    name = "auto"

    def __init__(self, task: AutoScheduleTask, seed: int = 0, policy: SearchPolicy | None = None, exact: bool = True):
        self.task, self.seed = task, seed
        self.dag = task.dag
        self.policy = policy or SearchPolicy()
        self.proposer = Proposer(self.dag, self.policy, seed, exact)
        self.model = CostModel(seed)
        self.measured: set[str] = set()            # schedules measured or proposed (Schedule.to_json)
        self.history: list[tuple[dict, MeasureResult]] = []
        self.trials = 0
        self.earlier = 0
        self.best_config: dict | None = None
        self.best_cycles: int | None = None
        self.best_cost: float | None = None
        self.best_trial = 0
        self._exhausted = False

    @property
    def budget_used(self) -> int:
        return self.trials - self.earlier

    def has_next(self) -> bool:
        return not self._exhausted

    def cost(self, result: MeasureResult) -> float:
        return cost_cycles(result, self.task.cfg.CLOCK_MHZ)

    def next_batch(self, n: int) -> list[dict]:
        elites = sorted(((self.cost(r), c) for c, r in self.history if self.cost(r) > 0 and c != DEFAULT_CONFIG),
                        key=lambda p: p[0])[:self.policy.elites]
        batch = self.proposer.batch(self.model, [config_schedule(self.dag, c) for _, c in elites], self.measured, n)
        self._exhausted = not batch
        return [schedule_config(self.dag, s) for _, _, s in batch]

    def update(self, configs: Sequence[dict], results: Sequence[MeasureResult]) -> None:
        seen = {_config_key(c) for c, _ in self.history}
        for config, result in zip(configs, results, strict=True):
            if _config_key(config) in seen:
                continue
            seen.add(_config_key(config))
            schedule = config_schedule(self.dag, config)
            self.measured.add(schedule.to_json())
            self.history.append((config, result))
            self.trials += 1
            cost = self.cost(result)
            self.model.add(features(self.dag, schedule), result.latency_s if cost > 0 else None)
            if cost > 0 and (self.best_cost is None or cost < self.best_cost):
                self.best_config, self.best_cycles, self.best_cost = config, int(result.cycles), cost
                self.best_trial = self.trials
        self.model.fit()

    measure = Tuner.measure   # the template tuners' own: runner, update, records appended to the log

    def result_of(self, config: dict) -> MeasureResult | None:
        return next((r for c, r in self.history if _config_key(c) == _config_key(config)), None)

    def measure_default(self, runner, log: str | os.PathLike | None = None) -> MeasureResult | None:
        if self.result_of(DEFAULT_CONFIG) is None:
            self.measured.add(default_schedule(self.dag).to_json())
            self.measure(runner, [dict(DEFAULT_CONFIG)], log)
        return self.result_of(DEFAULT_CONFIG)

    def feed_records(self, records: Sequence[Record]) -> int:
        """This task's records (a resumed log): measured, never proposed again; another tuner's count in ``earlier``."""
        before, known = self.trials, {_config_key(c) for c, _ in self.history}
        configs, results = [], []
        for rec in records:
            if rec.workload != self.task.key or is_untuned(rec.config) or self.task.check(rec.config) is not None:
                continue
            try:
                result = _result_of(rec.config, rec.result)
            except (TypeError, ValueError):
                continue
            if _config_key(rec.config) not in known and rec.tuner and rec.tuner != self.name:
                self.earlier += 1
            known.add(_config_key(rec.config))
            configs.append(rec.config)
            results.append(result)
        if configs:
            self.update(configs, results)
        return self.trials - before

    def __repr__(self) -> str:
        return f"AutoScheduleTuner({self.task.name}, {self.trials} trials)"


def _make_auto_tuner(task, seed: int = 0, **kwargs) -> AutoScheduleTuner:
    if not isinstance(task, AutoScheduleTask):
        raise TypeError(f"the auto tuner searches auto-scheduler tasks (auto_tasks_of(graph), vta tune --scheduler "
                         f"auto), not {task!r}")
    return AutoScheduleTuner(task, seed, **kwargs)


register_tuner("auto", _make_auto_tuner)
