"""Yosys synthesis (tier 1) of the sample configs of bench/fpga_samples.py, into the synthesis cache, with the
time each took: the data bench/fpga_fit.py fits the analytic model to, and the timings docs/co-design.md quotes.

A config already in the cache (~/.cache/vta-stack/synth) is not synthesised again. Each run prints a progress
line every 10 s; Ctrl-C stops after killing Yosys, leaving the configs done so far cached.

    python bench/fpga_synth.py [--family xc7 xcup] [--only NAME ...] [--list]
"""

from __future__ import annotations

import argparse
import sys
import time

from _host import header, run_main
from fpga_samples import FAMILIES, config

from hardware.fpga.synth import cached, synthesize, yosys_version
from hardware.generator import source_hash


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    ap.add_argument("--only", nargs="+", default=None, help="sample names (default: all of the family's)")
    ap.add_argument("--list", action="store_true", help="list the samples and whether each is cached")
    args = ap.parse_args(argv)
    print(header("fpga_synth.py", f"Yosys {yosys_version()} synth_xilinx of the resource-model samples "
                                 f"(generator sources {source_hash()})"))
    for family in args.family:
        # the model's samples without DSP packing; the packing samples both ways (what packing adds)
        runs = [(split, name, False) for split in ("train", "held_out") for name in FAMILIES[family][split]]
        runs += [("packing", name, packed) for name in FAMILIES[family].get("packing", ()) for packed in (False, True)]
        for split, name, packed in runs:
            if args.only and name not in args.only:
                continue
            cfg = config(name)
            label = f"{name}{' packed' if packed else ''}"
            found = cached(cfg, family, dsp_packing=packed)
            if args.list:
                print(f"{family:5} {split:8} {label:18} {'cached' if found else '-'}"
                      f"{f' ({found.seconds:.0f} s)' if found else ''}")
                continue
            t0 = time.perf_counter()
            result = synthesize(cfg, family, progress=lambda t: print(f"  {t}", file=sys.stderr, flush=True),
                                dsp_packing=packed)
            total = result.total()
            print(f"{family:5} {split:8} {label:18} MACs {cfg.MACS_PER_CYCLE:5}  LUT {total.lut:7.0f}  "
                  f"FF {total.ff:6.0f}  BRAM36 {total.bram:6.1f}  DSP {total.dsp:5}  Yosys "
                  f"{result.seconds:6.0f} s{' (cached)' if result.cached else ''}  "
                  f"[{time.perf_counter() - t0:.0f} s here]", flush=True)
    return 0


if __name__ == "__main__":
    run_main(main)
