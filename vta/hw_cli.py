"""``vta hw``: the accelerator's RTL for a config (hardware/), and ``vta sim replay --device rtl``.

Imported by ``vta.cli`` (which registers every ``@command``); the hardware package and its toolchain (the
``[hw]`` extra) are imported only inside the commands, so the rest of the command line works without them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from hw_config.writing import write_atomic
from simulator.files import check_output_dir
from simulator.image import ProgramImage, ReplayResult, save_result
from vta.cli import GROUP_HELP, _key_value, _load, arg, command, int_in, report_expected

GROUP_HELP["hw"] = "the accelerator's RTL, generated from a hardware config"
# default: hardware.generator.DEFAULT_MAX_PRODUCTS (not imported here: the hardware package is the [hw] extra's)
MAX_PRODUCTS_ARG = arg("--max-products", type=int_in(1, 1 << 24, "a count of int8 products"), default=8192,
                       metavar="N", help="refuse to generate a GEMM core of more than N int8 products (BATCH x "
                       "BLOCK_IN x BLOCK_OUT; default 8,192: larger ones take minutes and gigabytes)")
DSP_PACKING_ARG = arg("--dsp-packing", action=argparse.BooleanOptionalAction, default=None,
                      help="two int8 products per DSP multiplier (the GEMM core's outputs in pairs share a DSP48's "
                      "25 x 18 multiplier: half the DSP slices; hardware/dsp_packing.py, docs/hardware.md); default: "
                      "on for the Xilinx boards' TARGETs (pynq, ultra96, zcu104), off otherwise; --no-dsp-packing: "
                      "one product per DSP. The same results and cycles either way; a separate cached build")
RTL_SLACK_CYCLES = 100_000   # beyond twice the C simulator's cycles, a replay on the RTL is stopped as hung


def _copy_rtl(cfg, verilog: Path, dest: Path, dsp_packing: bool | None) -> None:
    """The cached Verilog, and the manifest of ``cfg`` itself, into ``dest``: configs that differ only in what the
    hardware does not see (the clock, the board model) share one cached entry, whose manifest.json is the first
    one's (its fingerprint, its clock)."""
    from hardware.build import write_manifest

    data = verilog.read_bytes()
    write_atomic(dest / verilog.name, lambda f: f.write(data))
    write_manifest(cfg, dest, dsp_packing)


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


@command("hw", "generate", "write the accelerator's Verilog and manifest for a config", args=[
    arg("--config", default=None, metavar="NAME|PATH", help="hardware preset or JSON file (default: pynq)"),
    arg("--set", dest="sets", action="append", type=_key_value, metavar="KEY=VALUE",
        help="override a config key (repeatable)"),
    arg("--out", required=True, metavar="DIR", help="directory for vta_core.v and manifest.json (created)"),
    MAX_PRODUCTS_ARG, DSP_PACKING_ARG,
])
def hw_generate(args: argparse.Namespace) -> int:
    """Generate the RTL of the accelerator (Amaranth -> Verilog, module vta_core) and its manifest (config,
    ports, register map, SRAM shapes). The output is deterministic for a config and a version of the
    generator; it is cached under ~/.cache/vta-stack/rtl, so a second run copies it. Needs the [hw] extra."""
    from hardware.build import build_dir, generate_announced
    from hardware.generator import check_core_size
    from hardware.toolchain import RTL_CACHE_VARIABLE, cache_dir

    cfg = _load(args.config, args.sets)
    out = Path(args.out)
    check_output_dir(args.out, "--out", {"vta_core.v": "file", "manifest.json": "file"})
    directory = build_dir(cfg, args.dsp_packing)     # a packing the widths refuse is refused here, before work
    check_core_size(cfg, args.max_products)   # before saying it generates (a cached one would be copied)
    cache_dir(directory, RTL_CACHE_VARIABLE)
    _say(f"the RTL of {cfg.model} (fingerprint {cfg.fingerprint}), generated once per config and cached in "
         f"{directory}")
    verilog, took = generate_announced(cfg, directory, _say, args.max_products, args.dsp_packing)
    out.mkdir(parents=True, exist_ok=True)
    _copy_rtl(cfg, verilog, out, args.dsp_packing)
    how = f"generated in {took:.1f} s" if took else "from the cache"
    print(f"wrote {out / verilog.name} and {out / 'manifest.json'} ({how})")
    return 0


@command("hw", "estimate", "FPGA resources of a config's RTL per module against a part (Yosys estimates)", args=[
    arg("--config", dest="configs", action="append", default=None, metavar="NAME|PATH",
        help="hardware preset or JSON file (default: pynq); with --timing, give it more than once for the "
        "timing table of those configs"),
    arg("--set", dest="sets", action="append", type=_key_value, metavar="KEY=VALUE",
        help="override a config key (repeatable)"),
    arg("--part", default=None, metavar="PART", help="FPGA part: xc7z020, xczu3eg, xczu7ev (default: the "
        "config's board's)"),
    arg("--synth", action="store_true", help="Yosys synth_xilinx of the RTL (cached; minutes the first time) "
        "instead of the analytic model"),
    arg("--json", action="store_true", help="print the estimate as JSON"),
    arg("--timing", nargs="?", const="xilinx", default=None, choices=("xilinx", "ecp5", "all"),
        help="also measure the clock the RTL reaches and say whether CLOCK_MHZ is met and by what margin: "
        "'xilinx' (the default when given bare): Yosys synth_xilinx -flatten then sta for the part's family, "
        "the longest path's LOGIC DELAYS ONLY, NO ROUTING (measured here: 2-7 min for a 1x4x4 core, 15 for "
        "pynq on a busy 2-core machine); 'ecp5': real place and route with nextpnr-ecp5 on an LFE5U-85F, "
        "post-route Fmax and a bitstream (configs that fit it: 22 min for 1x4x4, 65 for 1x8x8 on the same busy "
        "machine); 'all': both. Cached per config"),
    arg("--all-presets", action="store_true", help="with --timing: the timing table of every preset (--set "
        "applies to each; a preset not yet measured takes its minutes, then is cached)"),
    arg("--cached", action="store_true", help="with a timing table: run nothing, show what is cached"),
    DSP_PACKING_ARG,
])
def hw_estimate(args: argparse.Namespace) -> int:
    """LUT, FF, block RAM and DSP per module of the config's accelerator, against the part's capacity, and
    whether it fits: the analytic model fitted to Yosys (milliseconds), or Yosys's synthesis itself with --synth.
    Both are Yosys estimates: vendor tools differ. See docs/co-design.md. --timing adds the measured timing
    (docs/hardware.md, "Timing")."""
    configs = args.configs or [None]
    if args.all_presets or len(configs) > 1:
        return _timing_table(args, configs)
    if args.cached:
        raise ValueError("--cached shows a timing table: give --all-presets or --config more than once, with "
                         "--timing")
    from hardware.fpga.report import run

    print(run(_load(configs[0], args.sets), args.part, args.synth, args.json, progress=_say, timing=args.timing,
              dsp_packing=args.dsp_packing))
    return 0


def _timing_table(args: argparse.Namespace, configs: list[str | None]) -> int:
    """``vta hw estimate --timing --all-presets`` (or several --config): one row per config."""
    if args.timing is None:
        raise ValueError("a table of several configs is a timing table: add --timing (xilinx, ecp5 or all)")
    if args.all_presets and args.configs:
        raise ValueError("--all-presets or --config NAME (several times), not both")
    if args.synth or args.dsp_packing is not None:
        raise ValueError("the timing table uses each config's own DSP packing and no --synth table; drop "
                         "--synth/--dsp-packing, or time one config")
    from hardware.fpga.timing_table import measure_rows, render, rows_json
    from hw_config import presets

    names = presets() if args.all_presets else configs
    rows = measure_rows([(name or "pynq", _load(name, args.sets)) for name in names], args.timing, args.part,
                        _say, cached_only=args.cached)
    print(json.dumps(rows_json(rows), indent=2) if args.json else render(rows))
    return 0


@command("hw", "build", "build (or find in the cache) the Verilator model of a config's RTL ahead of its first "
         "--device rtl run", args=[
    arg("--config", default=None, metavar="NAME|PATH", help="hardware preset or JSON file (default: pynq)"),
    arg("--set", dest="sets", action="append", type=_key_value, metavar="KEY=VALUE",
        help="override a config key (repeatable)"),
    MAX_PRODUCTS_ARG, DSP_PACKING_ARG,
])
def hw_build(args: argparse.Namespace) -> int:
    """Generate the config's RTL, verilate it and link its C++ harness into the shared library that
    ``--device rtl`` loads (about a minute on two cores the first time; cached per config). Prints the
    library's path. Needs the [hw] extra."""
    from hardware.build import ensure_built

    print(ensure_built(_load(args.config, args.sets), progress=_say, max_products=args.max_products,
                       dsp_packing=args.dsp_packing))
    return 0


def replay_on_rtl(args: argparse.Namespace, image: ProgramImage, expected: ReplayResult | None = None) -> int:
    """``vta sim replay IMAGE --device rtl``: the image on the RTL, simulated cycle by cycle by Verilator."""
    unsupported = [flag for flag, given in (("--trace", args.trace is not None), ("--timing-only", args.timing_only),
                                            ("--max-work", args.max_work is not None), ("--strict", args.strict))
                   if given]
    if unsupported:
        raise ValueError(f"{', '.join(unsupported)}: not available with --device rtl (the RTL reports cycles and "
                         f"VTA's counters; --out, --json, --expect and --max-cycles are)")
    from simulator import SimulatorError
    from simulator.replay import replay

    # the C simulator first (milliseconds, timing only): it refuses at once what the RTL would spin on until its
    # cycle limit (no FINISH, a deadlock on tokens, an access outside the image's segments), and its cycles bound
    # the RTL's run (they agree within a few per cent: docs/benchmarks.md)
    try:
        model = replay(image, compute=False).stats["cycles"]
    except SimulatorError as e:
        raise ValueError(f"{args.image}: the C simulator refuses this program, so it does not go to the RTL: {e}") \
            from None
    from hardware import RtlDevice, RtlError

    device = RtlDevice(image.config, progress=_say)
    options = {"max_cycles": args.max_cycles if args.max_cycles is not None else 2 * model + RTL_SLACK_CYCLES}
    t0 = time.perf_counter()
    try:
        segments, cycles = device.replay(image, **options)
    except RtlError as e:
        print(f"vta: error: {e}", file=sys.stderr)
        return 1
    seconds = time.perf_counter() - t0
    counters = device.counters()         # the RTL's counter registers (hardware/counters.py), as the run left them
    stats = {"device": "rtl", "cycles": cycles, "host_seconds": round(seconds, 6),
             "time_s": cycles / (image.config.CLOCK_MHZ * 1e6), **counters}
    if args.out is not None:
        save_result(args.out, ReplayResult(segments, stats))
    if args.json:
        print(json.dumps(stats, indent=2))
    else:
        print(f"# {args.image}: {len(image.insns)} instructions on {image.config.model}, RTL (Verilator)")
        print(f"  cycles  {cycles:,} ({stats['time_s'] * 1e6:.2f} us at {image.config.CLOCK_MHZ:g} MHz; "
              f"simulated in {seconds:.3f} s, {cycles / max(seconds, 1e-9):,.0f} cycles/s)")
        for name, value in counters.items():
            print(f"  {name:<17} {value:,}")
    if args.out:
        print(f"wrote result to {args.out}", file=sys.stderr)
    return report_expected(args, ReplayResult(segments, stats), expected)


@command("hw", "vivado", "write a Vivado project for a config: the IP, the block design and the bitstream build",
         args=[
    arg("--config", default=None, metavar="NAME|PATH", help="hardware preset or JSON file (default: pynq)"),
    arg("--set", dest="sets", action="append", type=_key_value, metavar="KEY=VALUE",
        help="override a config key (repeatable)"),
    arg("--out", required=True, metavar="DIR", help="directory for the scripts, the RTL and a README (created)"),
    arg("--board", default=None, choices=["pynq-z1", "pynq-z2", "ultra96", "ultra96v1", "zcu104"],
        help="the board to build for (default: the config's TARGET's: pynq-z1, ultra96 (V2) or zcu104)"),
    arg("--part", default=None, metavar="PART", help="the FPGA part, a Zynq of the board's family (default: the "
        "part in the board's board file, e.g. xc7z020clg400-1)"),
    MAX_PRODUCTS_ARG, DSP_PACKING_ARG,
])
def hw_vivado(args: argparse.Namespace) -> int:
    """Write DIR/rtl (the generated Verilog and a wrapper for the block design), package_ip.tcl (the IP, its AXI
    interfaces and register map), block_design.tcl (VTA's system for the board: the processing system's ACP or
    HPC0 port, the clock at CLOCK_MHZ, the addresses at MMIO_BASE), build.tcl (synthesis to bitstream, the .bit
    and .hwh copied under the names the board side looks for, with the config's JSON) and a README. Run
    `vivado -mode batch -source DIR/build.tcl` where Vivado is installed. No Vivado runs here: the scripts are
    checked by tests that run them through tclsh with stub Vivado commands (docs/vivado.md). Needs the [hw]
    extra (the Verilog)."""
    from hardware.build import build_dir, generate_announced
    from hardware.generator import check_core_size, manifest
    from hardware.toolchain import RTL_CACHE_VARIABLE, cache_dir
    from hardware.vivado import choose_board, write_scripts

    cfg = _load(args.config, args.sets)
    board, part = choose_board(cfg, args.board, args.part)     # refused before any work
    out = Path(args.out)
    check_output_dir(args.out, "--out", {"rtl": "dir", "build.tcl": "file", "README.md": "file"})
    directory = build_dir(cfg, args.dsp_packing)
    check_core_size(cfg, args.max_products)
    cache_dir(directory, RTL_CACHE_VARIABLE)
    verilog, _took = generate_announced(cfg, directory, _say, args.max_products, args.dsp_packing)
    (out / "rtl").mkdir(parents=True, exist_ok=True)
    _copy_rtl(cfg, verilog, out / "rtl", args.dsp_packing)
    names = write_scripts(cfg, manifest(cfg, args.dsp_packing), out, board, part)
    print(f"wrote {len(names)} files to {out} for {cfg.name} on {board.name} ({part}); "
          f"build with: cd {out} && vivado -mode batch -source build.tcl")
    return 0
