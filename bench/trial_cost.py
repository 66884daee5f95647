"""What one timing-only tuning trial costs (issue 27, deliverable 3), against a reference commit in the same run.

A trial compiles a config of a task's template (program generation and assembly) and runs it on the simulator
with the timing model only; with a board model (``pynq`` as it is) the board latency model re-times the stream
too, without one (the DSE's ``LATENCY_NEUTRAL`` keys) it does not. Measured on ResNet-18's conv layers (C2 by
default; a seeded sample of valid configs, the same for every side):

- trials per second of ``LocalRunner(timing_only=True, check=False)`` with 1 and 2 workers, the fastest of
  ``PASSES`` passes over the sample after a warm-up pass (a worker's first trial of a task costs ~20 ms more:
  with a few dozen ~4 ms trials, which worker got the warm-up decided a third of the figure);
- one trial's compile and run time on one core (mean over the sample; "run" is what ``measure_one`` does in
  timing-only mode: ``CompiledOp.time()`` now, staging the inputs and reading the output before it existed);
- whether every config's cycles and board latency equal this checkout's (they must for a reference after the
  last timing-model change; tests/test_program_identity.py proves the streams themselves unchanged).

Every side runs in subprocesses of its own, in alternating rounds (the median is printed): this checkout, and each
``--reference`` commit (default eb89180, the last before the trial was made cheaper; b2ab771 is the code the
issue's "17 trials/s" was measured on, before the shared-bus timing model) checked out in a temporary git worktree
and built there (a minute on 2 cores); the worktrees are removed at the end, on an error, Ctrl-C or SIGTERM too,
and a run killed harder leaves a registration the next run prunes (``git worktree prune``). The first lines say
how much a second process can gain on the machine now.

    python bench/trial_cost.py [--reference eb89180 [REV ...]] [--layers C2] [--configs 16] [--rounds 3]

The issue quotes ~17 trials/s on C2 with 2 workers as its starting point; that figure is printed as quoted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from _host import header, quoted, run_main
from _revisions import checkouts, run_in

DEFAULT_REFERENCE = "eb89180"
MODES = ("board model", "no board model")
PASSES = 3   # timed passes over the sample per worker count (the fastest is kept)


def measure(layer: str, n_configs: int) -> dict:
    """This interpreter's side: throughput, per-trial phases and the results of every config, for each mode."""
    import numpy as np

    import vta
    from hw_config import load_config
    from hw_config.config import LATENCY_NEUTRAL
    from tuning.measure import LocalRunner, _inputs_and_reference
    from tuning.task import conv_task
    from vta.workloads import RESNET18

    out: dict = {"vta": vta.__file__}
    for mode in MODES:
        cfg = load_config("pynq")
        if mode == "no board model":
            cfg = cfg.replace(**LATENCY_NEUTRAL)
        h, w, ci, co, k, pad, stride = RESNET18[layer]
        task = conv_task(cfg, (cfg.BATCH, ci, h, w), (co, ci, k, k), stride, pad)
        valid = [i for i in range(len(task.space)) if task.check(task.space[i]) is None]
        rng = np.random.default_rng(0)
        sample = [task.space[int(i)] for i in rng.choice(valid, size=min(n_configs, len(valid)), replace=False)]
        rates = {}
        for workers in (1, 2):
            with LocalRunner(n_parallel=workers, timing_only=True, check=False) as runner:
                runner.measure(task, sample)   # warm-up: every worker started and past its first trial of the task
                best = 0.0
                for _ in range(PASSES):   # the fastest pass: the host's other work only slows one down
                    t0 = time.perf_counter()
                    results = runner.measure(task, sample)
                    best = max(best, len(sample) / (time.perf_counter() - t0))
                rates[workers] = best
            if not all(r.ok for r in results):
                raise SystemExit(f"a config failed: {[r.error for r in results if not r.ok][:2]}")
        compile_s = run_s = 0.0
        insns = 0
        for config in sample:
            t0 = time.perf_counter()
            op = task.compile(config)
            t1 = time.perf_counter()
            if hasattr(op, "time"):   # what measure_one runs in timing-only mode (nothing staged)
                op.time()
            else:                     # before CompiledOp.time: inputs staged, the output read back
                op.run(**_inputs_and_reference(task, op, 0)[0], compute=False)
            compile_s, run_s = compile_s + t1 - t0, run_s + time.perf_counter() - t1
            insns += op.num_insns
        out[mode] = {"rates": rates, "compile_ms": compile_s / len(sample) * 1e3,
                     "run_ms": run_s / len(sample) * 1e3, "insns": insns / len(sample),
                     "results": [(r.cycles, r.latency_s) for r in results]}
    return out


def run_side(checkout: Path, layer: str, n_configs: int) -> dict:
    """``measure`` in a subprocess importing the packages of ``checkout``."""
    return run_in(checkout, "trial_cost", f"measure({layer!r}, {n_configs})")


def _spin(_: int) -> float:
    t0 = time.perf_counter()
    x = 0
    for i in range(3_000_000):
        x += i
    return time.perf_counter() - t0


def parallel_capacity() -> float:
    """How much two processes of a fixed CPU-bound loop get done against one, right now: on a machine shared with
    other work (or whose second CPU is a busy host's), 2-worker figures can only scale this far."""
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(2) as pool:
        list(pool.map(_spin, range(2)))                 # started
        one = min(_spin(0) for _ in range(2))
        t0 = time.perf_counter()
        list(pool.map(_spin, range(4)))
        two = time.perf_counter() - t0
    return 4 * one / two


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reference", nargs="+", default=[DEFAULT_REFERENCE], metavar="REV",
                    help=f"commits to compare with (default {DEFAULT_REFERENCE})")
    ap.add_argument("--layers", default="C2", help="ResNet-18 conv layers, comma-separated (default C2)")
    ap.add_argument("--configs", type=int, default=16, help="random valid configs per layer (default 16)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds per side (default 3)")
    args = ap.parse_args()
    from vta.workloads import RESNET18

    layers = [s.strip() for s in args.layers.split(",") if s.strip()]
    unknown = [n for n in layers if n not in RESNET18]
    if unknown:
        ap.error(f"unknown layer(s) {unknown}; allowed: {', '.join(RESNET18)}")
    if args.configs < 2 or args.rounds < 1:
        ap.error("--configs must be at least 2 and --rounds at least 1")
    print(header("trial_cost", f"one timing-only trial, this checkout vs {', '.join(args.reference)}"))
    print(f"# two processes of a CPU-bound loop did {parallel_capacity():.2f}x the work of one (the most 2 workers "
          "can gain now)")
    with checkouts(args.reference) as sides:
        for layer in layers:
            runs: dict[str, list[dict]] = {side: [] for side in sides}
            for _ in range(args.rounds):
                for side, path in sides.items():
                    runs[side].append(run_side(path, layer, args.configs))
            report(layer, runs)
    print("\n" + quoted("~17 trials/s on C2 with 2 workers, timing only", "issue 27's starting point"))


def report(layer: str, runs: dict[str, list[dict]]) -> None:
    """Per mode and side: trials/s with 1 and 2 workers, one trial's compile + run, and whether its cycles and
    latencies are this checkout's (a reference before a timing-model change has other cycles)."""
    def med(side: str, mode: str, *path) -> float:
        values = []
        for run in runs[side]:
            v = run[mode]
            for key in path:
                v = v[key]
            values.append(v)
        return statistics.median(values)

    print(f"\n## {layer}: medians of {len(runs['now'])} alternating rounds\n")
    print("| mode | code | trials/s, 1 / 2 workers | now vs it, 1 / 2 workers | one trial: compile + run (ms) | "
          "same cycles as now |")
    print("|---|---|---|---|---|---|")
    for mode in MODES:
        now = [med("now", mode, "rates", w) for w in ("1", "2")]
        results = {side: {json.dumps(r[mode]["results"]) for r in side_runs} for side, side_runs in runs.items()}
        if any(len(r) != 1 for r in results.values()):
            raise SystemExit(f"{layer}, {mode}: the cycles or latencies differ between rounds of one side")
        for side in runs:
            rate = [med(side, mode, "rates", w) for w in ("1", "2")]
            ratio = "" if side == "now" else f"{now[0] / rate[0]:.2f}x / {now[1] / rate[1]:.2f}x"
            print(f"| {mode} | {side} | {rate[0]:.1f} / {rate[1]:.1f} | {ratio} | "
                  f"{med(side, mode, 'compile_ms'):.2f} + {med(side, mode, 'run_ms'):.2f} | "
                  f"{'yes' if results[side] == results['now'] else 'no'} |")
    print(f"\n{med('now', MODES[0], 'insns'):.0f} instructions per trial on average")


if __name__ == "__main__":
    run_main(main)
