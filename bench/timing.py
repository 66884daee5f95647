"""The timing table of the presets (issue 38, item 5): per config, Yosys's logic delay of the longest path after
synth_xilinx -flatten (logic delays only, no routing) for the family of its board's part, with its LUT levels,
DSPs in series and the flattened design's DSPs and block RAMs; and nextpnr-ecp5's post-route Fmax on an LFE5U-85F
where the config fits it (with the bitstream ecppack wrote), else why not.

Every run is cached per config (~/.cache/vta-stack/synth, as `vta hw estimate --timing`), so a second run prints
the table at once; a first one takes minutes per config (pynq's synthesis about 10 on two cores, an ECP5 place
and route of a 1x8x8 core 10-30). `--ecp5-extra` adds a config that fits the LFE5U-85F (the presets' 256 and more
GEMM products need more than its 156 multipliers): by default pynq with 8x8 blocks and buffers that VTA's ISA
can address with them, a point of `vta dse`'s default space.

    python bench/timing.py [--only pynq ...] [--set COMPUTE_LATENCY=9] [--no-xilinx] [--no-ecp5]
                           [--ecp5-extra KEY=VALUE,...] [--test-config] [--cached]

The table itself is ``vta hw estimate --timing all --all-presets``'s (hardware/fpga/timing_table.py); this script
adds the machine's header, the ECP5 row and the test config's.
"""

from __future__ import annotations

import argparse
import sys

from _host import header, run_main

from hardware.fpga.synth import yosys_version
from hardware.fpga.timing import nextpnr_version
from hardware.fpga.timing_table import measure_rows, render
from hardware.generator import source_hash
from hw_config import load_config, presets

EXTRA = "LOG_BLOCK=3,LOG_UOP_BUFF_SIZE=13,LOG_INP_BUFF_SIZE=13,LOG_WGT_BUFF_SIZE=16,LOG_ACC_BUFF_SIZE=15"
# the 1x4x4 config with small SRAMs and queues that the tests time (tests/test_timing.py's TINY)
TEST_CONFIG = ("LOG_BATCH=0,LOG_BLOCK=2,LOG_BUS_WIDTH=6,LOG_UOP_BUFF_SIZE=10,LOG_INP_BUFF_SIZE=8,LOG_WGT_BUFF_SIZE=8,"
               "LOG_ACC_BUFF_SIZE=10,INSN_QUEUE_DEPTH=4,TOKEN_QUEUE_DEPTH=2")


def _overrides(text: str) -> dict[str, int]:
    out = {}
    for item in filter(None, text.split(",")):
        key, _, value = item.partition("=")
        out[key.strip()] = int(value)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="+", default=None, help="preset names (default: all)")
    ap.add_argument("--set", default="", metavar="KEY=VALUE,...", help="overrides applied to every row (e.g. "
                    "COMPUTE_LATENCY=9)")
    ap.add_argument("--no-xilinx", action="store_true", help="skip the Yosys sta columns")
    ap.add_argument("--no-ecp5", action="store_true", help="skip the nextpnr-ecp5 column")
    ap.add_argument("--ecp5-extra", default=EXTRA, metavar="KEY=VALUE,...",
                    help=f"overrides of pynq for one more row, a config that fits the LFE5U-85F ('' for none; "
                         f"default {EXTRA})")
    ap.add_argument("--test-config", action="store_true", help="add a row for the 1x4x4 config the tests time")
    ap.add_argument("--cached", action="store_true", help="print only what is cached, run nothing")
    args = ap.parse_args(argv)
    common = _overrides(args.set)
    rows = [(name, load_config(name, **common)) for name in presets() if not args.only or name in args.only]
    if args.ecp5_extra:
        cfg = load_config("pynq", **{**_overrides(args.ecp5_extra), **common})
        rows.append((f"pynq+{cfg.BATCH}x{cfg.BLOCK_IN}x{cfg.BLOCK_OUT}", cfg))
    if args.test_config:
        rows.append(("test 1x4x4", load_config("pynq", **{**_overrides(TEST_CONFIG), **common})))
    if args.no_xilinx and args.no_ecp5:
        ap.error("--no-xilinx and --no-ecp5 leave nothing to measure")
    which = "ecp5" if args.no_xilinx else "xilinx" if args.no_ecp5 else "all"
    versions = f"Yosys {yosys_version()}" + ("" if args.no_ecp5 else f", nextpnr-ecp5 {nextpnr_version()}")
    print(header("timing.py", f"timing of the presets' RTL (generator sources {source_hash()}); {versions}"))
    say = (lambda text: print(f"  {text}", file=sys.stderr, flush=True))
    print(render(measure_rows(rows, which, progress=say, cached_only=args.cached)))
    return 0


if __name__ == "__main__":
    run_main(main)
