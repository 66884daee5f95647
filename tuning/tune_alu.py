"""Tune the element-wise ALU templates (add / multiply on int32 tensors) on the simulator, the workloads
of VTA's tune_alu_vta (ResNet feature-map shapes).

    python -m tuning.tune_alu [--config pynq] [--tuner xgb] [--n-trial 50] [--log alu.tune.jsonl]
"""

from __future__ import annotations

import argparse
import sys

from hw_config import load_config
from tuning.cli import boards_line, records_line, resumable, script_parser
from tuning.rpc_runner import runner_from_flags
from tuning.task import alu_task
from tuning.tune import tune_tasks
from vta.cli import run_reporting_errors
from vta.templates import alu

SHAPES = [(64, 56, 56), (128, 28, 28), (256, 14, 14), (512, 7, 7)]   # (C, H, W) of ResNet's stages


def alu_tasks(cfg, ops=("add", "multiply")) -> list:
    unknown = sorted(set(ops) - set(alu.BINARY))
    if unknown:
        raise ValueError(f"--ops: not a binary ALU op: {', '.join(unknown)}; allowed: {', '.join(alu.BINARY)}")
    return [alu_task(cfg, op, (cfg.BATCH, c, h, w), tensor_rhs=True) for op in ops for c, h, w in SHAPES]


def main(argv: list[str] | None = None) -> int:
    ap = script_parser("tuning.tune_alu", __doc__, log="alu.tune.jsonl", n_trial=50, per="task")
    ap.add_argument("--ops", default=None, help="comma-separated ALU ops (default add,multiply; add alone where "
                                                "the config's hardware has no ALU MUL, e.g. the Pynq bitstream)")
    args = ap.parse_args(argv)
    return run_reporting_errors("tune_alu", lambda: _tune(args))


def _tune(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    if args.ops is None:
        ops = ("add", "multiply") if "MUL" in cfg.capabilities.alu_opcodes else ("add",)
        if len(ops) == 1:
            print(f"tune_alu: tuning add only: {cfg.model}'s hardware ({cfg.CAPABILITIES}) has no ALU MUL "
                  f"(--config sim tunes multiply too)", file=sys.stderr)
    else:
        ops = tuple(args.ops.split(","))
    with resumable(args.log), runner_from_flags(args, timing_only=args.timing_only, n_parallel=args.parallel) as runner:
        tune_tasks(alu_tasks(cfg, ops), tuner=args.tuner, n_trial=args.n_trial,
                   runner=runner, log=args.log, seed=args.seed)
    if args.rpc:
        print(boards_line(runner))
    print(records_line(args.log))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
