"""``vta dse``: the co-design search over hardware configs and schedules (tuning/dse.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from graph_pack.cli import START_HELP, STOP_HELP, region_flags
from simulator.files import check_output_dir
from tuning.dse import (
    CSV,
    DEFAULT_MAX_POINTS,
    DEFAULT_TRIALS,
    FRONT,
    RECORDS,
    REPORT,
    Search,
    check_network,
    latency_parts,
    read_records,
    read_space,
    run_search,
    short_reason,
)
from vta.cli import Interrupted, arg, command, int_in

# what a search writes into --out: each must not stand there as the other kind (checked before the search)
OUTPUT_ENTRIES = {RECORDS: "file", CSV: "file", FRONT: "file", REPORT: "file", "front": "dir"}


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


@command(None, "dse", "search hardware configs and their schedules for a network on an FPGA part", args=[
    arg("model", help="a zoo model (e.g. resnet-18) or an .onnx file"),
    arg("--part", default="xc7z020", metavar="PART", help="FPGA part: xc7z020, xczu3eg, xczu7ev (default xc7z020)"),
    arg("--config", default="pynq", metavar="NAME|PATH", help="the base config the space varies (default: pynq)"),
    arg("--space", default=None, metavar="FILE",
        help='JSON of config keys to value lists, e.g. {"LOG_BLOCK": [3, 4], "LOG_BUS_WIDTH": [6, 7]} (default: '
             "216 points around pynq: LOG_BLOCK, LOG_BUS_WIDTH and the four buffer sizes)"),
    arg("--out", default="dse", metavar="DIR",
        help=f"directory for {RECORDS} (resumable), results.csv, front.json and {REPORT} (default: ./dse)"),
    arg("--trials", type=int_in(1, 10_000, "a trial count"), default=DEFAULT_TRIALS,
        help=f"configs measured per task beyond its default, the best its analytic estimate ranks (default "
             f"{DEFAULT_TRIALS})"),
    arg("--parallel", type=int_in(1, 256, "a worker count"), default=1, help="worker processes (default 1)"),
    arg("--dask", default=None, metavar="ADDRESS", help="run the points on this Dask scheduler instead"),
    arg("--image-size", type=int_in(8, 4096, "an image size"), default=None,
        help="a zoo model's input height = width (default its own, 224)"),
    arg("--start", default=None, help=START_HELP),
    arg("--stop", default=None, help=STOP_HELP),
    arg("--timing", action="store_true",
        help="check each config's clock before tuning it: Yosys synth_xilinx -flatten and sta for the part's "
             "family (logic delays only, no routing; minutes per config the first time, cached); a config whose "
             "CLOCK_MHZ its logic alone misses is recorded as clock-not-met, with no latency"),
    arg("--max-points", type=int_in(1, 10_000_000, "a point count"), default=DEFAULT_MAX_POINTS,
        help=f"refuse a larger space (default {DEFAULT_MAX_POINTS})"),
])
def dse_cmd(args: argparse.Namespace) -> int:
    """Enumerate the configs of the space, drop those VTA's ISA cannot encode or that do not fit the part (the
    analytic resource estimate), tune every accelerator task of the network on each remaining config (timing
    only), and time the whole network. Writes the Pareto front of latency against the part's resources, a
    record per config (a killed search resumes from them), a CSV and a self-contained HTML report.
    See docs/co-design.md."""
    from hardware.fpga import get_part
    from hw_config import load_config

    part = get_part(args.part).name              # an unknown part fails here, before any work
    load_config(args.config)                     # so does an unknown base config
    space = read_space(args.space, args.max_points)
    out = Path(args.out)
    check_output_dir(args.out, "--out", OUTPUT_ENTRIES)
    search = Search(args.model, args.config, part, args.trials, args.image_size, start=args.start, stop=args.stop,
                    timing=args.timing)
    with region_flags(args.start, args.stop):   # a wrong model name or file, or pack points that match no op,
        check_network(search)                    # fail before the search
    before = len(read_records(out / RECORDS, search))
    try:
        outcome = run_search(search, space, out, parallel=args.parallel, dask=args.dask, progress=_say,
                             max_points=args.max_points)
    except KeyboardInterrupt:
        after = len(read_records(out / RECORDS, search))
        raise Interrupted(f"{after} point(s) saved in {out / RECORDS} ({after - before} by this run); run the "
                          "same command again to resume from them") from None
    from tuning.dse_report import base_and_best
    ok = outcome.of_status("ok")
    slow = (f"{len(outcome.of_status('clock-not-met'))} miss their CLOCK_MHZ (logic delay alone, no routing), "
            if args.timing else "")
    print(f"{len(outcome.records)} configs: {len(ok)} tuned and timed, {len(outcome.of_status('does-not-fit'))} do "
          f"not fit {part}, {slow}{len(outcome.of_status('invalid'))} not encodable, "
          f"{len(outcome.of_status('failed'))} failed; {outcome.measured} evaluated in {outcome.seconds:.0f} s")
    base, best = base_and_best(outcome)
    if ok:
        print("latencies below: the accelerator's time plus the fastest host time measured for the same host work "
              "in the search (the progress lines show each config's own run; docs/co-design.md)")
    if base is not None and base.get("status") == "ok":
        print(f"base config {args.config} ({base.get('name', base.get('model', ''))}): {latency_parts(base)}, mean share of "
              f"{part} {base['cost']:.2%}")
    if best is not None:
        print(f"fastest that fits: {best.get('name', best.get('model', ''))} ("
              f"{', '.join(f'{k}={v}' for k, v in best['point'].items())}): {latency_parts(best)} ({best['cost']:.2%})")
    print(f"Pareto front (latency against the mean share of {part}): {len(outcome.front)} configs")
    for i, r in enumerate(outcome.front):
        print(f"  front/{i:02d}.json  {r['latency_ms']:9.3f} ms  {r['cost']:7.2%}  "
              + ", ".join(f"{k}={v}" for k, v in r["point"].items()) + f"  {r.get('name', r.get('model', ''))}")
    print(f"wrote {out / RECORDS}, {out / 'results.csv'}, {out / 'front.json'}, {out / REPORT} and the front's "
          f"configs in {out / 'front'} (vta ... --config FILE)")
    failed = outcome.of_status("failed")
    if failed and not ok:   # nothing was timed: the front is empty, and why belongs on the screen, not only in records
        print(f"vta: error: all {len(failed)} config(s) tuned failed, the first with "
              f"{short_reason(failed[0].get('reason', 'no reason recorded'), 400)} (every reason is in "
              f"{out / RECORDS}; the same command tries them again)", file=sys.stderr)
        return 2
    return 0
