"""``vta tune``: tune a network's accelerator layers on the simulator (extract -> tune -> build -> compare)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
from pathlib import Path

from graph_pack.cli import DENSE_HELP, EXPLAIN_HELP, START_HELP, STOP_HELP, region_flags
from graph_pack.svg import check_html_path
from tuning.cpu_network import tune_cpu_cmd
from tuning.network import tune_network
from tuning.plot import write_tuning_plot
from tuning.records import check_log_path, count_records, log_lock, move_aside
from tuning.rpc_runner import RUNNER_FLAGS, add_runner_flags, runner_from_flags
from tuning.tune import STRATEGIES
from tuning.tuners import TUNERS
from vta.cli import SEED, Interrupted, Parser, _key_value, _load, arg, command, float_in, int_in

TRIALS = int_in(1, 10_000_000, "a trial count")


def script_parser(module: str, doc: str, log: str, n_trial: int, per: str) -> argparse.ArgumentParser:
    """The flags ``python -m tuning.tune_conv2d`` and ``tuning.tune_alu`` share; the description is the
    module docstring's first paragraph."""
    description = " ".join(doc.split("\n\n")[0].split())
    ap = Parser(prog=f"python -m {module}", description=description)
    ap.add_argument("--config", default="pynq", help="preset name or JSON path (default: pynq)")
    ap.add_argument("--tuner", choices=TUNERS, default="xgb", help="search strategy (default xgb)")
    ap.add_argument("--n-trial", type=TRIALS, default=n_trial, help=f"trials per {per} (default {n_trial})")
    ap.add_argument("--log", default=log, help=f"JSON-lines record log; a run resumes from the records it holds "
                                               f"(default {log})")
    ap.add_argument("--timing-only", action="store_true", help="cycles only, no output check")
    ap.add_argument("--parallel", type=int_in(1, 1024), default=None,
                    help="measurement worker processes (default 1); with --rpc, boards at once (default: all)")
    add_runner_flags(ap)
    ap.add_argument("--seed", type=SEED, default=0, help="seed of the tuners (default 0)")
    return ap


def boards_line(runner) -> str:
    """What a tuning run through an RPC tracker says last but one: the boards it used, and trials lost with one."""
    return (f"boards: {', '.join(f'{b} ({n} trials)' for b, n in sorted(runner.boards_used.items()))}"
            + (f"; trials lost with a board: {dict(runner.board_failures)}" if runner.board_failures else ""))


def records_line(log: str | os.PathLike) -> str:
    """The last line of a tuning run: where its records are and how to use them."""
    return (f"records: {log} ({count_records(log)} in all; in Python: tuning.load_best({str(log)!r}, env); "
            f"the same command resumes from them)")


BUSY_HINT = ("a tuning run into it is still going (the same command twice?); wait for it to finish (the next run "
             "resumes from its records), or give another --log")


@contextlib.contextmanager
def resumable(log: str | os.PathLike):
    """Hold ``log`` for this run (``tuning.records.log_lock``: a second run on it is one line naming this one's pid,
    before any work), and turn Ctrl-C while tuning into ``vta.cli.Interrupted``: how many records the log holds (and
    how many this run added), and that the same command resumes from them."""
    with log_lock(log, "--log", BUSY_HINT):
        before = count_records(log)
        try:
            yield
        except KeyboardInterrupt:
            raise Interrupted(interrupted_line(log, before, count_records(log))) from None


def interrupted_line(log: str | os.PathLike, before: int, after: int) -> str:
    """What a tuning run stopped by Ctrl-C saved: ``after`` records in ``log``, ``before`` of them from earlier runs."""
    if not after:   # (a log this run created is removed as it is let go: no empty file is left)
        return (f"no record was saved: the run stopped before its first measurement ended, and {log} was not "
                "written; run the same command again to start")
    if after == before:
        return (f"no record was saved by this run; {log} holds the {after} of earlier runs: run the same command "
                "again to resume from them (nothing is measured twice)")
    return (f"{after} record(s) saved in {log} ({after - before} by this run); run the same command again to resume "
            "from them (nothing is measured twice)")


@command(None, "tune", "tune a network's accelerator layers on the simulator (or on boards: --rpc)", args=[
    arg("model", help="a zoo model (e.g. resnet-18) or an .onnx file"),
    arg("--config", default=None, metavar="NAME|PATH", help="hardware preset or JSON file (default: pynq)"),
    arg("--set", dest="sets", action="append", type=_key_value, metavar="KEY=VALUE",
        help="override a config key (repeatable)"),
    arg("--tuner", choices=TUNERS, default="xgb", help="search strategy (default xgb)"),
    arg("--n-trial", type=TRIALS, default=64,
        help="trials per task, as AutoTVM's n_trial (default 64): --strategy sequential gives each task N; gradient "
             "shares N x tasks among them, spending where the network gains most (a task may get more or fewer). "
             "This tuner's trials in --log count; another tuner's are reused as results, not counted"),
    arg("--total-trials", type=TRIALS, default=None,
        help="with --strategy gradient: the trials shared by all tasks instead of N x tasks"),
    arg("--strategy", choices=STRATEGIES, default="gradient",
        help="gradient: spend trials where the network gains most (default); sequential: task by task"),
    arg("--log", default=None, help="JSON-lines record log (default: <model>.<config>.tune.jsonl); a log that "
        "exists is resumed: what it holds is said, nothing in it is measured again, and tuning continues to the "
        "budget; use it with vta run MODEL --log FILE"),
    arg("--fresh", action="store_true", help="start a new log: an existing --log is moved aside to "
        "<name>.old-<n>.jsonl first (never deleted)"),
    arg("--ops", default=None, help="comma-separated templates to tune (default: all), e.g. conv2d,dense; with "
        "--target cpu the host templates', e.g. conv2d_NCHWc.x86,dense_pack.x86"),
    arg("--timing-only", action="store_true", help="skip the data (cycles only, faster; no output check)"),
    arg("--no-check", dest="check", action="store_false", help="do not compare outputs with numpy"),
    arg("--parallel", type=int_in(1, 1024), default=None,
        help="measurement worker processes (default 1); with --rpc, boards at once (default: all of the key)"),
    *RUNNER_FLAGS,
    arg("--early-stopping", type=TRIALS, default=None, help="stop a task after this many trials without gain"),
    arg("--image-size", type=int, default=None, help="input height = width for zoo classifiers"),
    arg("--start", default=None, help=START_HELP),
    arg("--stop", default=None, help=STOP_HELP),
    arg("--explain", action="store_true", help=EXPLAIN_HELP.replace("where it ran", "where it runs")),
    arg("--dense", choices=("on", "off"), default=None, help=DENSE_HELP + " (as vta run)"),
    arg("--seed", type=SEED, default=0, help="seed of the tuners, weights and input"),
    arg("--plot", metavar="FILE.html", help="after tuning, draw the log's tuning curves (best time per task "
        "against trials) to this self-contained page; on a finished log nothing is measured again"),
    arg("--target", choices=("vta", "cpu"), default="vta",
        help="vta: the accelerator's layers (default); cpu: the float network's conv2d / dense on this CPU (with --rpc: "
             "on the CPU of a `vta rpc server --device cpu`), timed by the measure options below"),
    arg("--scheduler", choices=("template", "auto"), default="template",
        help="--target cpu: template (default): the host templates' conv2d / dense with --tuner; auto: every float host "
             "op (conv2d, dense, pooling, softmax, elementwise chains) by the auto-scheduler (Ansor-style sketches, "
             "evolution, a learned cost model), through the same task scheduler, runners and log"),
    arg("--number", type=int_in(1, 1 << 20), default=1, help="--target cpu: calls per timing (default 1)"),
    arg("--repeat", type=int_in(1, 1000), default=3, help="--target cpu: timings per config, mean and std kept "
                                                           "(default 3)"),
    arg("--min-repeat-ms", type=float_in(0, 60_000, "a time in ms", "0..60000"), default=10.0,
        help="--target cpu: raise --number until one timing lasts this long (default 10)"),
    arg("--timeout", type=float_in(0.1, 3600, "a time in seconds", "0.1..3600"), default=10.0,
        help="--target cpu: seconds a config may take to compile and run (default 10)"),
])
def tune_cmd(args: argparse.Namespace) -> int:
    """Extract the network's accelerator tasks, tune them against the simulator, then build with the best
    schedules and compare the simulated end-to-end latency with the untuned build (outputs must match)."""
    cfg = _load(args.config, args.sets)
    log = args.log if args.log is not None else \
        f"{Path(args.model).stem}.{'cpu' if args.target == 'cpu' else cfg.TARGET}.tune.jsonl"
    check_log_path(log, "--log")
    if args.plot is not None:
        check_html_path(args.plot, "--plot")
    if args.scheduler == "auto" and args.target != "cpu":
        raise ValueError("--scheduler auto searches the host CPU's schedules: give --target cpu (the accelerator's "
                         "layers are tuned with their templates)")
    if args.total_trials is not None and args.strategy != "gradient":
        raise ValueError("--total-trials applies to --strategy gradient; sequential tunes each task --n-trial times")
    if args.ops is not None and not all(args.ops.split(",")):
        raise ValueError(f"--ops {args.ops!r}: an empty op name; give op names separated by commas (see --help), or "
                         "leave --ops out for every op")
    ops = tuple(args.ops.split(",")) if args.ops is not None else None
    if args.fresh and Path(log).is_file():
        with log_lock(log, "--log", BUSY_HINT):   # never from under a run that writes it
            aside = move_aside(log)
        if aside is not None:
            print(f"--fresh: moved the earlier log {log} aside to {aside}; starting a new log")
    if args.target == "cpu":
        if args.start is not None or args.stop is not None:
            raise ValueError("--start and --stop choose the accelerator's offload region; --target cpu tunes the "
                             "float network's conv2d / dense on this CPU (leave them out)")
        if args.explain:
            raise ValueError("--explain says where each op runs on the accelerator; --target cpu tunes the float "
                             "network's conv2d / dense on this CPU (leave it out)")
        return tune_cpu_cmd(args, cfg, log, ops, resumable)
    remote = args.rpc or args.dask
    measurer = runner_from_flags(args, check=args.check, timing_only=args.timing_only, n_parallel=args.parallel) \
        if remote else contextlib.nullcontext()
    with region_flags(args.start, args.stop), resumable(log), measurer as runner:
        result = tune_network(args.model, cfg, tuner=args.tuner, n_trial=args.n_trial, total_trials=args.total_trials,
                     strategy=args.strategy, log=log, ops=ops, timing_only=args.timing_only, check=args.check,
                     n_parallel=args.parallel or 1, early_stopping=args.early_stopping, image_size=args.image_size,
                     seed=args.seed, runner=runner, start=args.start, stop=args.stop,
                     show_explanation=args.explain, dense=args.dense)
    if args.rpc:
        print(boards_line(runner))
    if args.plot is not None:
        write_tuning_plot(args.plot, log, cfg, result.tasks)
        print(f"plot: {args.plot} (tuning curves of {log}; open it in a browser)")
    same = [*(["--config", args.config] if args.config else []), *(f"--set={k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in args.sets or []),
            *(["--image-size", str(args.image_size)] if args.image_size else []),
            *(["--start", args.start] if args.start else []), *(["--stop", args.stop] if args.stop else []),
            *(["--dense", args.dense] if args.dense else [])]
    print(f"records: {log} (run with them: {shlex.join(['vta', 'run', args.model, *same, '--log', log])}; "
          f"in Python: graph_pack.build(..., schedules=tuning.load_best({log!r}, env)))")
    return 0
