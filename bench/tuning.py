"""Tuning: how fast configs are measured; how quickly the XGBoost tuner finds the optimum vs random search.

1. Measurement throughput on ResNet-18's C2 (the same seeded sample of valid configs in every mode):
   full measurement (simulated data, output checked against numpy) vs timing only, 1 and 2 workers.
2. Search quality on layers whose valid spaces are swept exhaustively (timing only): per layer, the
   trials XGB (default), XGB without its analytical prior (AutoTVM's scheme: random first batch),
   random search and the GA need to get within 5% of the optimum and to the optimum itself (mean of
   5 seeds, batches of 8, the default config not measured), the best at 15% of the valid space, and
   XGB's own overhead (model fits and scoring) per trial.
3. Every layer tuned for real (XGB, outputs checked, 2 workers) until within 5% of its optimum: trials, wall time.
   AutoTVM's figure for VTA (the tuning tutorial's sample run) is printed as quoted, with its source, no ratio.
4. ``vta tune``'s flow on the whole network (``tuning.tune_network``: gradient task scheduler, XGB, outputs
   checked, ``--network-trials`` per task, 2 workers): wall time, tasks, trials, and the tuned build's simulated
   cycles against the untuned build's (same output).

    python bench/tuning.py [--config pynq] [--layers C9,C10,C11] [--speed-configs 16] [--cache sweeps.json]
                           [--network-trials 24]

Exhaustive sweeps of C2 / C4 take minutes; ``--cache`` keeps them in a JSON file between runs.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
from pathlib import Path

# bench/_host.py, imported while this directory is still on the path
from _host import header, quoted, run_main

# this script shares its name with the package it measures: keep its own directory off the import path
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import numpy as np

from hw_config import load_config
from tuning.measure import LocalRunner, MeasureResult
from tuning.network import tune_network
from tuning.task import Task, conv_task
from tuning.tuners import make_tuner
from vta.workloads import RESNET18

SEEDS = range(5)
BATCH = 8


def layer_task(cfg, name: str) -> Task:
    h, w, ci, co, k, pad, stride = RESNET18[name]
    return conv_task(cfg, (cfg.BATCH, ci, h, w), (co, ci, k, k), stride, pad)


def valid_indices(task: Task) -> list[int]:
    return [i for i in range(len(task.space)) if task.check(task.space[i]) is None]


class TableRunner:
    """The exhaustive sweep's cycles, looked up (same answers as the simulator, instantly)."""

    def __init__(self, table: dict[int, int]):
        self.table = table

    def measure(self, task: Task, configs):
        out = []
        for c in configs:
            cycles = self.table.get(task.space.index_of(c))
            out.append(MeasureResult(c, cycles) if cycles else MeasureResult(c, error="invalid config"))
        return out


# ------------------------------------------------------------------------------------------------------------

def measurement_speed(cfg, n_configs: int) -> None:
    task = layer_task(cfg, "C2")
    idx = valid_indices(task)
    rng = np.random.default_rng(0)
    sample = [task.space[int(i)] for i in rng.choice(idx, size=min(n_configs, len(idx)), replace=False)]
    print(f"\n## measurement throughput, {task.name}: {len(sample)} random valid configs of {len(idx)}\n")
    print("| mode | workers | trials/s | s/trial |")
    print("|---|---|---|---|")
    rate = {}
    modes = (("full (checked)", {"check": True}), ("timing only", {"timing_only": True, "check": False}))
    for mode, kwargs in modes:
        for workers in (1, 2):
            with LocalRunner(n_parallel=workers, **kwargs) as runner:
                runner.measure(task, sample[:workers])  # warm-up: workers started, inputs made
                t0 = time.perf_counter()
                results = runner.measure(task, sample)
                dt = time.perf_counter() - t0
            assert all(r.ok for r in results), [r.error for r in results if not r.ok][:2]
            rate[mode, workers] = len(sample) / dt
            print(f"| {mode} | {workers} | {rate[mode, workers]:.2f} | {dt / len(sample):.3f} |")
    print(f"\ntiming only vs full: {rate['timing only', 1] / rate['full (checked)', 1]:.2f}x (1 worker), "
          f"{rate['timing only', 2] / rate['full (checked)', 2]:.2f}x (2 workers); 2 workers vs 1: "
          f"{rate['full (checked)', 2] / rate['full (checked)', 1]:.2f}x full, "
          f"{rate['timing only', 2] / rate['timing only', 1]:.2f}x timing only")


def sweep(task: Task, cache: Path | None) -> tuple[dict[int, int], float]:
    """Cycles of every valid config (timing only, 2 workers), from ``cache`` when it has them."""
    key = f"{task.cfg.fingerprint}|{task.key}"
    stored = json.loads(cache.read_text()) if cache and cache.exists() else {}
    if key in stored:
        return {int(i): c for i, c in stored[key]["table"].items()}, stored[key]["seconds"]
    idx = valid_indices(task)
    t0 = time.perf_counter()
    with LocalRunner(n_parallel=2, timing_only=True, check=False) as runner:
        results = runner.measure(task, [task.space[i] for i in idx])
    seconds = time.perf_counter() - t0
    table = {i: r.cycles for i, r in zip(idx, results) if r.ok}
    if cache:
        stored[key] = {"table": table, "seconds": seconds}
        cache.write_text(json.dumps(stored))
    return table, seconds


VARIANTS = {"xgb": ("xgb", {}), "xgb_noprior": ("xgb", {"prior": False}), "random": ("random", {}),
            "ga": ("ga", {})}


def search_curve(variant: str, task: Task, table: dict[int, int], seed: int) -> tuple[list[int], float]:
    """Best cycles after every trial until the optimum is found; and the tuner's own seconds per trial."""
    name, kwargs = VARIANTS[variant]
    tuner = make_tuner(name, task, seed=seed, **kwargs)
    runner, curve, own = TableRunner(table), [], 0.0
    while tuner.has_next():
        t0 = time.perf_counter()
        configs = tuner.next_batch(BATCH)
        own += time.perf_counter() - t0
        results = runner.measure(task, configs)
        t0 = time.perf_counter()
        tuner.update(configs, results)
        own += time.perf_counter() - t0
        for r in results:
            curve.append(min(curve[-1], r.cycles) if curve else r.cycles)
        if curve[-1] == min(table.values()):
            break
    return curve, own / max(len(curve), 1)


def search_quality(cfg, layers: list[str], cache: Path | None) -> None:
    print(f"\n## search quality: trials to reach the exhaustive optimum (mean of {len(SEEDS)} seeds, "
          f"batches of {BATCH}, default config not measured)\n")
    print("XGB: the default tuner (trees correcting the analytical prior, which ranks the first batch); "
          "XGB no prior: AutoTVM's scheme (random first batch, then trees on the features alone). "
          "Ratios: random / XGB.\n")
    print("| layer | valid | sweep s | default/opt | XGB to 5% | XGB no prior to 5% | random to 5% | ratio "
          "| XGB to opt | XGB no prior to opt | random to opt | ratio | GA to opt | XGB best@15% "
          "| random best@15% | XGB ms/trial |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in layers:
        task = layer_task(cfg, name)
        table, seconds = sweep(task, cache)
        opt = min(table.values())
        budget = max(1, int(0.15 * len(table)))
        default = table[task.space.index_of(task.default_config)]
        fig = {}
        for variant in VARIANTS:
            to5, to_opt, at_budget, own = [], [], [], []
            for seed in SEEDS:
                curve, overhead = search_curve(variant, task, table, seed)
                to5.append(next(n + 1 for n, b in enumerate(curve) if b <= 1.05 * opt))
                to_opt.append(curve.index(opt) + 1)
                at_budget.append(curve[min(budget, len(curve)) - 1] / opt)
                own.append(overhead)
            fig[variant] = (np.mean(to5), np.mean(to_opt), np.mean(at_budget), np.mean(own))
        x, p, r, ga = fig["xgb"], fig["xgb_noprior"], fig["random"], fig["ga"]
        print(f"| {name} | {len(table)} | {seconds:.1f} | {default / opt:.3f} | {x[0]:.1f} | {p[0]:.1f} | "
              f"{r[0]:.1f} | {r[0] / x[0]:.1f}x | {x[1]:.1f} | {p[1]:.1f} | {r[1]:.1f} | "
              f"{r[1] / x[1]:.1f}x | "
              f"{ga[1]:.1f} | {x[2]:.3f} | "
              f"{r[2]:.3f} | {x[3] * 1e3:.1f} |")


def tune_all_to_5_percent(cfg, layers: list[str], cache: Path | None) -> None:
    """The acceptance run: every layer tuned for real (simulated data, outputs checked, 2 workers) by the
    XGB tuner until it is within 5% of the exhaustive optimum; wall time in total."""
    print("\n## tuning every layer to within 5% of its exhaustive optimum (XGB, checked, 2 workers)\n")
    print("| layer | optimum cycles | trials | best / optimum | wall s |")
    print("|---|---|---|---|---|")
    total, trials = 0.0, 0
    with LocalRunner(n_parallel=2, check=True) as runner:
        for name in layers:
            task = layer_task(cfg, name)
            opt = min(sweep(task, cache)[0].values())
            tuner = make_tuner("xgb", task, seed=0)
            t0 = time.perf_counter()
            tuner.measure_default(runner)
            while tuner.best_cycles > 1.05 * opt and tuner.has_next():
                tuner.measure(runner, tuner.next_batch(BATCH))
            dt = time.perf_counter() - t0
            total += dt
            trials += tuner.trials
            print(f"| {name} | {opt:,} | {tuner.trials} | {tuner.best_cycles / opt:.3f} | {dt:.1f} |")
    print(f"\nall {len(layers)} layers within 5% of their optimum in {total:.1f} s of tuning, {trials} trials "
          f"(target: < 600 s); AutoTVM on VTA: "
          + quoted("~2 h for ResNet-18's 10 conv tasks on 6 Pynq boards and a 16-thread host, random tuner, "
                   "n_trial=1000", "tune_relay_vta sample output, via ../shared/reference/vta-notes.md sec. 6"))


def network_tuning(cfg, n_trial: int) -> None:
    """``vta tune resnet-18 --n-trial N --parallel 2``, timed: tune every task, build tuned and untuned, compare."""
    print(f"\n## vta tune resnet-18 --n-trial {n_trial} --parallel 2 (gradient scheduler, XGB, outputs checked)\n")
    log = io.StringIO()
    t0 = time.perf_counter()
    result = tune_network("resnet-18", cfg, n_trial=n_trial, n_parallel=2, out=log)
    wall = time.perf_counter() - t0
    print(result.summary.table())
    states = result.summary.states
    top = max(states, key=lambda s: s.default_s / min(s.default_s, s.best_s))
    print(f"\n{len(states)} tasks, {sum(s.trials for s in states)} trials, {wall:.1f} s wall (extract, tune, build "
          f"both, run both); simulated end to end: untuned {result.untuned.cycles:,} -> tuned "
          f"{result.tuned.cycles:,} cycles, {result.speedup:.3f}x; largest task gain "
          f"{top.default_s / min(top.default_s, top.best_s):.2f}x ({top.task.name})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="pynq", help="preset name or JSON path (default: pynq)")
    ap.add_argument("--layers", default="C9,C10,C11",
                    help=f"ResNet-18 layers for the quality figures, comma-separated ({', '.join(RESNET18)})")
    ap.add_argument("--speed-configs", type=int, default=16, help="configs per measurement mode (default 16)")
    ap.add_argument("--cache", type=Path, help="JSON file keeping exhaustive sweeps between runs")
    ap.add_argument("--skip-speed", action="store_true", help="skip the measurement-throughput table")
    ap.add_argument("--network-trials", type=int, default=24,
                    help="trials per task for the whole-network run (default 24; 0 skips it)")
    args = ap.parse_args()
    layers = [s.strip() for s in args.layers.split(",") if s.strip()]
    unknown = [n for n in layers if n not in RESNET18]
    if unknown:
        ap.error(f"unknown layer(s) {unknown}; allowed: {', '.join(RESNET18)}")
    import xgboost  # noqa: F401 - the XGB tuner's, in every part: checked before any work (run_main names the extra)
    cfg = load_config(args.config)
    print(header("tuning", f"measurement speed and search quality on {cfg.model}"))
    if not args.skip_speed:
        measurement_speed(cfg, args.speed_configs)
    search_quality(cfg, layers, args.cache)
    tune_all_to_5_percent(cfg, layers, args.cache)
    if args.network_trials > 0:
        network_tuning(cfg, args.network_trials)


if __name__ == "__main__":
    run_main(main)
