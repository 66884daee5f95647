"""Tune the element-wise ALU templates (add / multiply on int32 tensors) on the simulator, the workloads
of VTA's tune_alu_vta (ResNet feature-map shapes).

    python -m tuning.tune_alu [--config pynq] [--tuner xgb] [--n-trial 50] [--log alu.tune.jsonl]
"""

from __future__ import annotations

import argparse
import sys

from hw_config import load_config
from tuning.cli import TRIALS, resumable
from tuning.rpc_runner import add_runner_flags, runner_from_flags
from tuning.task import alu_task
from tuning.tune import tune_tasks
from tuning.tuners import TUNERS
from vta.cli import int_in, run_reporting_errors
from vta.templates import alu

SHAPES = [(64, 56, 56), (128, 28, 28), (256, 14, 14), (512, 7, 7)]   # (C, H, W) of ResNet's stages


def alu_tasks(cfg, ops=("add", "multiply")) -> list:
    unknown = sorted(set(ops) - set(alu.BINARY))
    if unknown:
        raise ValueError(f"--ops: not a binary ALU op: {', '.join(unknown)}; allowed: {', '.join(alu.BINARY)}")
    return [alu_task(cfg, op, (cfg.BATCH, c, h, w), tensor_rhs=True) for op in ops for c, h, w in SHAPES]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="pynq", help="preset name or JSON path (default: pynq)")
    ap.add_argument("--tuner", choices=TUNERS, default="xgb")
    ap.add_argument("--n-trial", type=TRIALS, default=50, help="trials per task (default 50)")
    ap.add_argument("--ops", default=None, help="comma-separated ALU ops (default add,multiply; add alone where "
                                                "the config's hardware has no ALU MUL, e.g. the Pynq bitstream)")
    ap.add_argument("--log", default="alu.tune.jsonl", help="JSON-lines record log (resumes)")
    ap.add_argument("--timing-only", action="store_true", help="cycles only, no output check")
    ap.add_argument("--parallel", type=int_in(1, 1024), default=None,
                    help="measurement worker processes (default 1); with --rpc, boards at once (default: all)")
    add_runner_flags(ap)
    ap.add_argument("--seed", type=int, default=0)
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
