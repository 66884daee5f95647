"""The timing table of the presets (issue 38, item 5): per config, Yosys's logic delay of the longest path after
synth_xilinx -flatten (logic delays only, no routing) for the family of its board's part, with its LUT levels,
DSPs in series and the flattened design's DSPs and block RAMs; and nextpnr-ecp5's post-route Fmax on an LFE5U-85F
where the config fits it (with the bitstream ecppack wrote), else why not.

Every run is cached per config (~/.cache/vta-stack/synth, as `vta hw estimate --timing`), so a second run prints
the table at once; a first one takes minutes per config (pynq's synthesis about 10 on two cores, an ECP5 place
and route of a 1x8x8 core 10-30). `--ecp5-extra` adds a config that fits the LFE5U-85F (the presets' 256 and more
GEMM products need more than its 156 multipliers): by default pynq with 8x8 blocks and buffers that VTA's ISA
can address with them, a point of `vta dse`'s default space.

    python bench/timing.py [--only pynq ...] [--no-xilinx] [--no-ecp5] [--ecp5-extra KEY=VALUE,...]
                           [--test-config] [--cached]
"""

from __future__ import annotations

import argparse
import sys
import time

from _host import header, run_main

from hardware.fpga import part_for_target
from hardware.fpga.synth import yosys_version
from hardware.fpga.timing import (
    LFE5U_85F,
    LOGIC_ONLY,
    cached_ecp5,
    cached_xilinx,
    clock_check,
    ecp5_refusal,
    ecp5_timing,
    nextpnr_version,
    timing_family,
    xilinx_timing,
)
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
    ap.add_argument("--no-xilinx", action="store_true", help="skip the Yosys sta column")
    ap.add_argument("--no-ecp5", action="store_true", help="skip the nextpnr-ecp5 column")
    ap.add_argument("--ecp5-extra", default=EXTRA, metavar="KEY=VALUE,...",
                    help=f"overrides of pynq for one more row, a config that fits the LFE5U-85F ('' for none; "
                         f"default {EXTRA})")
    ap.add_argument("--test-config", action="store_true", help="add a row for the 1x4x4 config the tests time")
    ap.add_argument("--cached", action="store_true", help="print only what is cached, run nothing")
    args = ap.parse_args(argv)
    rows = [(name, load_config(name)) for name in presets() if not args.only or name in args.only]
    if args.ecp5_extra:
        cfg = load_config("pynq", **_overrides(args.ecp5_extra))
        rows.append((f"pynq+{cfg.BATCH}x{cfg.BLOCK_IN}x{cfg.BLOCK_OUT}", cfg))
    if args.test_config:
        rows.append(("test 1x4x4", load_config("pynq", **_overrides(TEST_CONFIG))))
    versions = f"Yosys {yosys_version()}"
    if not args.no_ecp5:
        versions += f", nextpnr-ecp5 {nextpnr_version()}"
    print(header("timing.py", f"timing of the presets' RTL (generator sources {source_hash()}); {versions}"))
    print(f"# Yosys: synth_xilinx -flatten then sta for the board's part family: {LOGIC_ONLY.upper()}; "
          f"nextpnr: placed and routed on {LFE5U_85F.name} ({LFE5U_85F.package}), post-route Fmax")
    print(f"# *: an UltraScale+ part, timed on 7-series cells ({timing_family('xcup')[1]})")
    say = (lambda text: print(f"  {text}", file=sys.stderr, flush=True))
    print(f"{'config':12} {'model':34} {'MHz':>5} {'part':8} {'logic ns':>8} {'LUT lv':>6} {'DSP ser':>7} "
          f"{'DSP':>5} {'BRAM36':>6} {'clock (logic only)':24} {'ECP5 Fmax':>10}  ECP5 note")
    for name, cfg in rows:
        part = part_for_target(cfg.TARGET)
        t0 = time.perf_counter()
        x = None
        if not args.no_xilinx:
            family = timing_family(part.family)[0]        # 7-series delays for every part: Yosys has no others
            x = cached_xilinx(cfg, family) if args.cached else xilinx_timing(cfg, family, say)
        e = None
        if not args.no_ecp5:
            e = cached_ecp5(cfg) if args.cached else ecp5_timing(cfg, progress=say)
        if x is not None:
            met, margin = clock_check(cfg, x.delay_ns)
            r = x.resources
            xcols = (f"{x.delay_ns:8.2f} {x.path.lut_levels:6} {x.path.dsps_in_series:7} {r.dsp:5} {r.bram:6g} "
                     f"{('met, ' if met else 'MISSED, ') + f'{margin:+.2f} ns':24}")
        else:
            xcols = f"{'-':>8} {'-':>6} {'-':>7} {'-':>5} {'-':>6} {'-':24}"
        if e is None:
            refusal = ecp5_refusal(cfg)
            ecols = f"{'-':>10}  " + (f"does not fit: {refusal}" if refusal else "not run")
        elif not e.fits:
            ecols = f"{'-':>10}  does not fit: {e.reason}"
        else:
            ok = "met" if e.fmax_mhz >= cfg.CLOCK_MHZ else "MISSED"
            ecols = (f"{e.fmax_mhz:7.1f} MHz  {ok} at {cfg.CLOCK_MHZ:g}; bitstream {e.bitstream_bytes:,} B; "
                     + ", ".join(f"{k} {v:.0f} s" for k, v in e.seconds.items()))
        shown = part.name + ("*" if part.family != "xc7" else "")
        print(f"{name:12} {cfg.model:34} {cfg.CLOCK_MHZ:5g} {shown:8} {xcols} {ecols}", flush=True)
        if x is not None:
            print(f"{'':12}   path: {x.path.start} -> {x.path.end_text}; Yosys {x.seconds:.0f} s"
                  f"{' (cached)' if x.cached else ''} [{time.perf_counter() - t0:.0f} s here]", flush=True)
    return 0


if __name__ == "__main__":
    run_main(main)
