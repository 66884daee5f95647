"""Tune a whole network: extract its accelerator tasks, tune them, build with the best schedules and
compare the simulated end-to-end latency with the untuned build (the flow of VTA's tune_relay_vta)."""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass
from typing import TextIO

import numpy as np

from graph_pack.build import GraphModule, build
from graph_pack.cli import calibration, load_model, model_inputs, quantize_dense, region_names
from graph_pack.explain import Explanation, explain
from graph_pack.pack import graph_pack
from graph_pack.quantize import default_skip_conv, quantize
from graph_pack.quantize_model import carries_scales
from simulator.stats import SIMULATED, latency_basis
from tuning.measure import LocalRunner
from tuning.records import load_best
from tuning.task import Task, extract_tasks
from tuning.tune import TuneSummary, check_tuning_arguments, tune_tasks
from vta.environment import config_of


@dataclass
class NetworkTuning:
    tasks: list[Task]
    summary: TuneSummary
    untuned: GraphModule
    tuned: GraphModule
    explanation: Explanation | None = None   # where each op of the tuned network runs and why

    @property
    def speedup(self) -> float:
        """Untuned / tuned board time (the objective the tuners minimised)."""
        tuned, untuned = self.tuned.stats, self.untuned.stats
        return untuned.latency_s / tuned.latency_s if tuned is not None and tuned.latency_s else 0.0


def tune_network(model: str, env, *, tuner: str = "xgb", n_trial: int = 100, total_trials: int | None = None,
                 strategy: str = "gradient", log: str | os.PathLike | None = None, ops: tuple[str, ...] | None = None,
                 timing_only: bool = False, check: bool = True, n_parallel: int = 1, early_stopping: int | None = None,
                 batch: int | None = None, image_size: int | None = None, seed: int = 0,
                 out: TextIO | None = None, runner=None, start: str | None = None,
                 stop: str | None = None, show_explanation: bool = False, dense: str | None = None) -> NetworkTuning:
    """Extract -> tune -> build with the best -> compare with the untuned build (same output, fewer cycles).
    ``runner`` measures (an RPCRunner, a DaskRunner; default a LocalRunner of ``n_parallel`` processes).
    ``start`` / ``stop`` bound the offload region (graph_pack's start_name / stop_name, vta run's --start /
    --stop); both None: every region the accelerator can run, found automatically; one None: the model's default
    for it (a zoo model's own, else nn.max_pool2d ... nn.global_avg_pool2d). The network is quantized as ``vta run``
    quantizes it by default (percentile ranges calibrated on the random input the builds are compared on; a QDQ
    model's own scales).
    ``show_explanation``: write where each op runs and why (``vta tune --explain``) before tuning. ``dense``: "on",
    "off" or None, vta run's --dense (None: its default, ``graph_pack.cli.quantize_dense``)."""
    check_tuning_arguments(tuner=tuner, strategy=strategy, n_trial=n_trial, total_trials=total_trials,
                           early_stopping=early_stopping, log=log)   # before the model is loaded
    out = out if out is not None else sys.stdout
    cfg = config_of(env)
    graph, params, defaults = load_model(model, batch or cfg.BATCH, image_size, seed)
    feeds = model_inputs(graph, None, np.random.default_rng(seed))
    mode, dataset = calibration(None, None, graph, feeds, carries_scales(graph, params))   # a QDQ model's: its own
    qgraph, qparams = quantize(graph, params, calibrate_mode=mode, dataset=dataset, skip_dense_layer=not quantize_dense(dense, start, stop, graph),
                               skip_conv_layers=default_skip_conv(start is not None or stop is not None))
    start, stop = region_names(start, stop, defaults)
    packed = graph_pack(qgraph, cfg, start_name=start, stop_name=stop)
    explanation = explain(packed)
    if show_explanation:
        out.write(explanation.format() + "\n")
    tasks = extract_tasks(packed, cfg, ops=ops)
    if not tasks:
        known = sorted({t.op for t in extract_tasks(packed, cfg)}) if ops else []
        raise ValueError(f"{model}: no accelerator tasks" + (
            f" among --ops {','.join(ops)}; this network's accelerator tasks are "
            f"{', '.join(known) if known else 'none'}" if ops else ""))
    out.write(f"{model}: {len(tasks)} task(s) on {cfg.name}\n")
    if cfg.board_model_note():
        out.write(cfg.board_model_note() + "\n")
    with (LocalRunner(n_parallel=n_parallel, check=check, timing_only=timing_only) if runner is None
          else contextlib.nullcontext(runner)) as measurer:
        summary = tune_tasks(tasks, tuner=tuner, n_trial=n_trial, total_trials=total_trials, runner=measurer, log=log,
                             strategy=strategy, early_stopping=early_stopping, seed=seed, out=out)
    schedules = load_best(log, cfg) if log is not None else summary.best_configs()
    untuned = build(packed, cfg, qparams)
    tuned = build(packed, cfg, qparams, schedules=schedules)
    untuned.run(**feeds)
    tuned.run(**feeds)
    if not np.array_equal(untuned.get_output(0), tuned.get_output(0)):
        raise RuntimeError("the tuned build's output differs from the untuned one: a schedule bug")
    result = NetworkTuning(tasks, summary, untuned, tuned, explanation)
    clock = cfg.CLOCK_MHZ * 1e3
    basis = latency_basis(cfg)   # what the speedup compares: the board model's time, else the cycles at the clock

    def figures(mod) -> str:
        text = f"{mod.cycles:,} cycles = {mod.cycles / clock:.2f} ms at {cfg.CLOCK_MHZ:g} MHz (simulated)"
        return text + (f", {mod.stats.latency_s * 1e3:.2f} ms ({basis})" if basis != SIMULATED else "")
    out.write(f"end-to-end, the accelerator's part: untuned {figures(untuned)}; tuned {figures(tuned)}: "
              f"{result.speedup:.2f}x faster ({basis}); outputs identical\n")
    return result
