"""Tune a whole network's host operators on this CPU (the flow of TVM's tune_relay_x86 / tune_relay_arm): extract
the tasks, tune them, build with the best kernels and compare the end-to-end time with the untuned build
(host.jit's fixed kernels), outputs checked against each other. Two schedulers: ``template`` (the float conv2d
/ dense as the host templates' tasks) and ``auto`` (every float host op as an auto-scheduler task,
tuning.auto_network; the tuned build's output must then equal the untuned one's bit for bit)."""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
from dataclasses import dataclass
from typing import TextIO

import numpy as np

from graph_pack.build import GraphModule, build
from graph_pack.cli import load_model
from graph_pack.host_auto import AutoSchedules, read_auto_schedules
from graph_pack.schedule_log import LoggedSchedules
from host.templates import host
from tuning.auto_network import auto_tasks_of
from tuning.cpu import CpuRunner, CpuTask, close_to
from tuning.plot import write_tuning_plot
from tuning.records import load_best
from tuning.task import extract_tasks
from tuning.tune import TuneSummary, check_tuning_arguments, tune_tasks

SCHEDULERS = ("template", "auto")


@dataclass
class CpuNetworkTuning:
    tasks: list[CpuTask]
    summary: TuneSummary
    untuned: dict[str, float]      # GraphModule.benchmark of the untuned build (mean_ms, std_ms)
    tuned: dict[str, float]
    module: GraphModule            # the tuned build

    @property
    def speedup(self) -> float:
        return self.untuned["mean_ms"] / self.tuned["mean_ms"] if self.tuned["mean_ms"] else 0.0


def tune_cpu_network(model: str, env, *, tuner: str = "xgb", n_trial: int = 32, total_trials: int | None = None,
                     strategy: str = "gradient", log: str | os.PathLike | None = None, ops: tuple[str, ...] | None = None,
                     early_stopping: int | None = None, image_size: int | None = None, seed: int = 0,
                     runner=None, repeat: int = 10, out: TextIO | None = None,
                     scheduler: str = "template") -> CpuNetworkTuning:
    """Extract -> tune -> build with the best -> time against the untuned build. ``runner`` measures (a
    ``CpuRunner``, the default, or an ``RPCRunner`` to a ``vta rpc server --device cpu``); ``env`` is the config the
    build is made for (no accelerator group runs: the float network is on the CPU). ``scheduler="auto"``: the
    auto-scheduler's tasks, searched by its own tuner ("auto"; ``tuner`` must be left at its default); ``ops``
    then filters by DAG name (conv2d, dense, max_pool2d, elementwise, ...)."""
    if scheduler not in SCHEDULERS:
        raise ValueError(f"scheduler={scheduler!r}; allowed: {', '.join(SCHEDULERS)}")
    if scheduler == "auto":
        if tuner != "xgb":
            raise ValueError(f"--tuner {tuner} picks a template tuner; --scheduler auto searches with its own "
                             "evolution and cost model (leave --tuner out)")
        tuner = "auto"
    check_tuning_arguments(tuner=tuner, strategy=strategy, n_trial=n_trial, total_trials=total_trials,
                           early_stopping=early_stopping, log=log)   # before the model is loaded
    out = out if out is not None else sys.stdout
    target = getattr(runner, "cpu_target", None) or host()
    graph, params, _ = load_model(model, 1, image_size, seed)
    if scheduler == "auto":
        every = auto_tasks_of(graph, target)
        tasks = [t for t in every if ops is None or t.dag.name in ops]
        if not tasks:
            raise ValueError(f"{model}: no host op for the auto-scheduler" + (
                f" among --ops {','.join(ops)}; this network's are {', '.join(sorted({t.dag.name for t in every}))}"
                if every else ""))
    else:
        tasks = extract_tasks(graph, target, ops=ops, target="cpu")
    if not tasks:
        known = sorted({t.op for t in extract_tasks(graph, target, target="cpu")}) if ops is not None else []
        raise ValueError(f"{model}: no float conv2d / dense for the host templates"
                         + (f" among --ops {','.join(ops)}; this network's host templates are {', '.join(known)}"
                            if known else ""))
    out.write(f"{model}: {len(tasks)} host task(s) on {target.model}" + (" (auto-scheduler)" if scheduler == "auto"
                                                                           else "") + "\n")
    with (CpuRunner(number=1, repeat=3, min_repeat_ms=10) if runner is None
          else contextlib.nullcontext(runner)) as measurer:
        summary = tune_tasks(tasks, tuner=tuner, n_trial=n_trial, total_trials=total_trials, runner=measurer, log=log,
                             strategy=strategy, early_stopping=early_stopping, seed=seed, out=out)
    if scheduler == "auto":
        auto = read_auto_schedules(log, target) if log is not None else AutoSchedules(LoggedSchedules(
            "(this run)", target, {k: [c] for k, c in summary.best_configs().items()},
            untuned={s.task.key: (0, s.untuned_s) for s in summary.states if s.untuned_s < float("inf")}))
        kwargs = {"auto_schedules": auto}
    else:
        kwargs = {"host_schedules": load_best(log, target) if log is not None else summary.best_configs()}
    if target != host():
        out.write(f"tuned for {target.model}: build there with these records (this machine is {host().model})\n")
        return CpuNetworkTuning(tasks, summary, {"mean_ms": 0.0, "std_ms": 0.0}, {"mean_ms": 0.0, "std_ms": 0.0},
                                None)   # type: ignore[arg-type]
    data = graph.inputs[0]
    x = np.random.default_rng(seed).standard_normal(graph[data].shape).astype(np.float32)
    untuned = build(graph, env, params)
    tuned = build(graph, env, params, **kwargs)
    untuned.run(**{data: x})
    tuned.run(**{data: x})
    exact = scheduler == "auto"   # the auto-scheduler's kernels are bit-equal to the untuned ones; templates reassociate
    if exact and not np.array_equal(tuned.get_output(0), untuned.get_output(0)):
        raise RuntimeError("the auto-scheduled build's output differs from the untuned one: a host compiler bug")
    if not close_to(tuned.get_output(0), untuned.get_output(0).astype(np.float64), tol=1e-4):
        raise RuntimeError("the tuned build's output differs from the untuned one beyond 1e-4: a host template bug")
    a = untuned.benchmark(number=1, repeat=repeat, **{data: x})
    b = tuned.benchmark(number=1, repeat=repeat, **{data: x})
    result = CpuNetworkTuning(tasks, summary, a, b, tuned)
    out.write(f"end-to-end on this CPU (one thread, {repeat} runs): untuned (host.jit) {a['mean_ms']:.2f} ms "
              f"(std {a['std_ms']:.2f}), tuned {b['mean_ms']:.2f} ms (std {b['std_ms']:.2f}): {result.speedup:.2f}x; "
              + ("outputs agree (bit for bit)\n" if exact else "outputs agree (np.allclose)\n"))
    return result


def tune_cpu_cmd(args, cfg, log: str, ops: tuple[str, ...] | None, resumable) -> int:
    """``vta tune MODEL --target cpu`` after the flags common to both targets were checked (tuning.cli)."""
    refused = [flag for flag, on in (("--dask", args.dask), ("--timing-only", args.timing_only),
                                     ("--no-check", not args.check), ("--parallel", args.parallel)) if on]
    if refused:
        raise ValueError(f"--target cpu measures one config at a time on a CPU, each output checked: "
                         f"{', '.join(refused)} do(es) not apply")
    option = {"number": args.number, "repeat": args.repeat, "min_repeat_ms": args.min_repeat_ms,
              "timeout": args.timeout}
    if args.rpc:   # the CPU of a `vta rpc server --device cpu` registered at the tracker under --key
        from tuning.cpu_rpc import RPCCpuRunner
        from vta.rpc.base import parse_addr
        runner = RPCCpuRunner(args.key, *parse_addr(args.rpc), **option, seed=args.seed, key_file=args.key_file)
    else:
        runner = CpuRunner(**option, seed=args.seed)
    with resumable(log), runner:
        result = tune_cpu_network(args.model, cfg, tuner=args.tuner, n_trial=args.n_trial,
                                  total_trials=args.total_trials, strategy=args.strategy, log=log, ops=ops,
                                  early_stopping=args.early_stopping, image_size=args.image_size, seed=args.seed,
                                  runner=runner, scheduler=args.scheduler)
    if args.rpc:
        print(f"boards: {', '.join(f'{b} ({n} trials)' for b, n in sorted(runner.boards_used.items()))}")
    if args.plot is not None:
        write_tuning_plot(args.plot, log, result.tasks[0].cfg, result.tasks)
        print(f"plot: {args.plot} (tuning curves of {log}; open it in a browser)")
    size = ["--image-size", str(args.image_size)] if args.image_size else []
    python = (f"graph_pack.build(..., auto_schedules=graph_pack.host_auto.read_auto_schedules({log!r}, "
              "host.templates.host()))" if args.scheduler == "auto"
              else f"graph_pack.build(..., host_schedules=tuning.load_best({log!r}, 'cpu'))")
    print(f"records: {log} (run with them: {shlex.join(['vta', 'run', args.model, '--target', 'cpu', *size, '--log', log])}"
          f"; in Python: {python})")
    return 0
