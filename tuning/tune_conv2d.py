"""Tune ResNet-18's conv2d workloads (VTA's C2..C11) on the simulator, as VTA's tune_conv2d.py did on boards.

    python -m tuning.tune_conv2d [--config pynq] [--tuner xgb] [--n-trial 100] [--log conv2d.tune.jsonl]
"""

from __future__ import annotations

import argparse

from hw_config import load_config
from tuning.cli import TRIALS, boards_line, records_line, resumable, script_parser
from tuning.rpc_runner import runner_from_flags
from tuning.task import conv_task
from tuning.tune import STRATEGIES, tune_tasks
from vta.cli import run_reporting_errors
from vta.workloads import RESNET18


def resnet18_tasks(cfg, layers=None) -> list:
    unknown = sorted(set(layers or ()) - set(RESNET18))
    if unknown:
        raise ValueError(f"--layers: unknown layer(s) {', '.join(unknown)}; allowed: {', '.join(RESNET18)}")
    return [conv_task(cfg, (cfg.BATCH, ci, h, w), (co, ci, k, k), stride, pad)
            for name, (h, w, ci, co, k, pad, stride) in RESNET18.items() if layers is None or name in layers]


def main(argv: list[str] | None = None) -> int:
    ap = script_parser("tuning.tune_conv2d", __doc__, log="conv2d.tune.jsonl", n_trial=100, per="layer")
    ap.add_argument("--strategy", choices=STRATEGIES, default="sequential")
    ap.add_argument("--layers", default=None, help="comma-separated subset, e.g. C2,C5 (default: all)")
    ap.add_argument("--early-stopping", type=TRIALS, default=None, help="stop a task after this many trials "
                    "without gain")
    args = ap.parse_args(argv)
    return run_reporting_errors("tune_conv2d", lambda: _tune(args))


def _tune(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    tasks = resnet18_tasks(cfg, args.layers.split(",") if args.layers else None)
    with resumable(args.log), runner_from_flags(args, timing_only=args.timing_only, n_parallel=args.parallel) as runner:
        tune_tasks(tasks, tuner=args.tuner, n_trial=args.n_trial, runner=runner, log=args.log,
                   strategy=args.strategy, early_stopping=args.early_stopping, seed=args.seed)
    if args.rpc:
        print(boards_line(runner))
    print(records_line(args.log))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
