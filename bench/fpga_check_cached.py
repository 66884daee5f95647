"""The analytic resource model against every cached Yosys synthesis of the current RTL.

bench/fpga_fit.py fits the model to bench/fpga_samples.py's configs and checks it on held-out ones, for the RTL it
was fitted on. When the RTL changes (the AXI wrapper did), the model's rows for new modules are measured by hand
until the hours-long refit runs. This script is the quick check in between: every synthesis in the cache
(``vta hw estimate --synth``, ``vta dse``'s front confirmed by ``bench/dse.py --yosys``, bench/fpga_synth.py)
whose key matches the current RTL, Yosys version and flow is compared with the analytic estimate of the same
config, whole accelerator, per resource: the issue's bound is 10 % on LUT, FF and DSP and exact block RAM.

    python bench/fpga_check_cached.py [--family xc7|xcup]

Nothing is synthesised here; a config with no current synthesis is simply not in the table.
"""

from __future__ import annotations

import argparse
import json

from _host import header, run_main

from hardware.fpga import model
from hardware.fpga.synth import SynthResult, cache_root, synth_key
from hw_config import ConfigError, load_config

RESOURCES = ("lut", "ff", "bram36", "bram18", "dsp")
BOUND = {"lut": 0.10, "ff": 0.10, "dsp": 0.10, "bram36": 0.0, "bram18": 0.0}


def current_syntheses(family: str) -> list[tuple[object, SynthResult, bool]]:
    """(config, synthesis, DSP packing) for each cached result of ``family`` whose key is the current one for its
    config (with or without the generator's DSP packing)."""
    found = []
    for path in sorted(cache_root().glob("*/*/result.json")):
        try:
            data = json.loads(path.read_text())
            cfg = load_config(data["config"])
        except (OSError, ValueError, KeyError, TypeError, ConfigError):
            continue   # a torn file or a config this code no longer accepts: not the current RTL anyway
        for packing in (False, True):
            if data.get("family") == family and data.get("key") == synth_key(cfg, family, dsp_packing=packing):
                found.append((cfg, SynthResult.from_json(data, cached=True), packing))
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="xc7", choices=("xc7", "xcup"), help="FPGA family (default xc7)")
    args = ap.parse_args()
    print(header("fpga_check_cached", f"the analytic model vs cached Yosys syntheses of the current RTL ({args.family})"))
    rows = current_syntheses(args.family)
    if not rows:
        print(f"no synthesis of the current RTL in {cache_root()}: run `vta hw estimate --config X --synth` first")
        return 1
    print(f"\n{len(rows)} configs\n")
    print("| config | bus bits | " + " | ".join(f"{r}: model / Yosys" for r in RESOURCES) + " |")
    print("|---|---|" + "---|" * len(RESOURCES))
    worst = dict.fromkeys(RESOURCES, 0.0)
    seen = set()
    for cfg, result, packing in rows:
        if (cfg.fingerprint, packing) in seen:
            continue
        seen.add((cfg.fingerprint, packing))
        analytic = model.estimate(cfg, args.family, dsp_packing=packing).total()   # before fitting a part: Yosys's own figures
        yosys = result.total()
        cells = []
        for r in RESOURCES:
            a, y = float(getattr(analytic, r)), float(getattr(yosys, r))
            error = (a - y) / y if y else float(a != y)
            worst[r] = max(worst[r], abs(error))
            cells.append(f"{a:,.1f} / {y:,.1f} ({error:+.1%})")
        print(f"| {cfg.model} depth {cfg.COMPUTE_LATENCY}{' (DSP packing)' if packing else ''} | {8 * cfg.BUS_BYTES} | " + " | ".join(cells) + " |")
    print("\nworst |model - Yosys| / Yosys: " + ", ".join(f"{r} {worst[r]:.1%} (bound {BOUND[r]:.0%})"
                                                           for r in RESOURCES))
    return 0 if all(worst[r] <= BOUND[r] for r in RESOURCES) else 2


if __name__ == "__main__":
    run_main(main)
