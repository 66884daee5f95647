"""``vta tune``: tune a network's accelerator layers on the simulator (extract -> tune -> build -> compare)."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from tuning.network import tune_network
from tuning.records import check_log_path
from tuning.rpc_runner import RUNNER_FLAGS, runner_from_flags
from tuning.tune import STRATEGIES
from tuning.tuners import TUNERS
from vta.cli import _key_value, _load, arg, command, int_in

TRIALS = int_in(1, 10_000_000, "a trial count")


@command(None, "tune", "tune a network's accelerator layers on the simulator (or on boards: --rpc)", args=[
    arg("model", help="a zoo model (e.g. resnet-18) or an .onnx file"),
    arg("--config", default=None, metavar="NAME|PATH", help="hardware preset or JSON file (default: pynq)"),
    arg("--set", dest="sets", action="append", type=_key_value, metavar="KEY=VALUE",
        help="override a config key (repeatable)"),
    arg("--tuner", choices=TUNERS, default="xgb", help="search strategy (default xgb)"),
    arg("--n-trial", type=TRIALS, default=64, help="trials per task (default 64)"),
    arg("--total-trials", type=TRIALS, default=None, help="trials shared by all tasks (gradient strategy)"),
    arg("--strategy", choices=STRATEGIES, default="gradient",
        help="gradient: spend trials where the network gains most (default); sequential: task by task"),
    arg("--log", default=None, help="JSON-lines record log (default: <model>.<config>.tune.jsonl); rerunning "
        "the same command resumes from it"),
    arg("--ops", default=None, help="comma-separated templates to tune (default: all), e.g. conv2d,dense"),
    arg("--timing-only", action="store_true", help="skip the data (cycles only, faster; no output check)"),
    arg("--no-check", dest="check", action="store_false", help="do not compare outputs with numpy"),
    arg("--parallel", type=int_in(1, 1024), default=None,
        help="measurement worker processes (default 1); with --rpc, boards at once (default: all of the key)"),
    *RUNNER_FLAGS,
    arg("--early-stopping", type=TRIALS, default=None, help="stop a task after this many trials without gain"),
    arg("--image-size", type=int, default=None, help="input height = width for zoo classifiers"),
    arg("--seed", type=int, default=0, help="seed of the tuners, weights and input"),
])
def tune_cmd(args: argparse.Namespace) -> int:
    """Extract the network's accelerator tasks, tune them against the simulator, then build with the best
    schedules and compare the simulated end-to-end latency with the untuned build (outputs must match)."""
    cfg = _load(args.config, args.sets)
    log = args.log or f"{Path(args.model).stem}.{cfg.TARGET}.tune.jsonl"
    check_log_path(log, "--log")
    ops = tuple(args.ops.split(",")) if args.ops else None
    remote = args.rpc or args.dask
    with runner_from_flags(args, check=args.check, timing_only=args.timing_only, n_parallel=args.parallel) \
            if remote else contextlib.nullcontext() as runner:
        tune_network(args.model, cfg, tuner=args.tuner, n_trial=args.n_trial, total_trials=args.total_trials,
                     strategy=args.strategy, log=log, ops=ops, timing_only=args.timing_only, check=args.check,
                     n_parallel=args.parallel or 1, early_stopping=args.early_stopping, image_size=args.image_size,
                     seed=args.seed, runner=runner)
    if args.rpc:
        print(f"boards: {', '.join(f'{b} ({n} trials)' for b, n in sorted(runner.boards_used.items()))}"
              + (f"; trials lost with a board: {dict(runner.board_failures)}" if runner.board_failures else ""))
    print(f"records: {log} (graph_pack.build(..., schedules=tuning.load_best({log!r}, env)))")
    return 0
