"""The accelerator's RTL simulated by Verilator: its speed, and its cycles against the C simulator's timing model.

Measured in one run, on one config (default pynq):

- VTA's sixteen golden programs (../shared/golden) replayed on the RTL and on the C simulator: RTL cycles, the
  timing model's cycles and their ratio, and the RTL's simulation speed over all of them;
- ResNet-18 (224x224 by default) quantized and packed once, built once for the simulator and once for the RTL
  (``graph_pack.build(..., device=RtlDevice(cfg))``), one inference each: the two outputs compared bit for bit;
  per accelerator layer RTL cycles against the model's and their ratio; the accelerator part's RTL wall time
  (the Verilator runs alone, host layers excluded) and cycles per second, beside the simulator's wall time for
  the same inference.

The RTL library is built first if the cache lacks it (about a minute, not timed). Ratios are of figures measured
in this run; nothing is compared with figures from elsewhere.

    python bench/rtl.py [--config pynq] [--set KEY=VALUE ...] [--image-size 224] [--skip-golden] [--markdown]
                        [--baseline LIBRARY [--rounds 3]]

``--baseline LIBRARY`` then runs the accelerator part again, ``--rounds`` times on each, alternating the cached
build with another build of the same config's RTL (say one without the profile-guided compile:
``VTA_RTL_PGO=0 VTA_RTL_CACHE=/tmp/plain python -m hardware.build pynq`` prints its path), and prints each round's
model-thread CPU seconds, the medians and their ratio (outputs and cycles must be the same on both).

``--set COMPUTE_LATENCY=9`` measures the pipelined compute datapath where the preset still has 4 (the RTL is
generated with the config's default DSP packing: on for the Xilinx boards' TARGETs, pynq included).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from _host import header, run_main

from graph_pack import zoo
from graph_pack.build import build
from graph_pack.pack import graph_pack
from graph_pack.quantize import quantize
from hardware import RtlDevice
from hw_config import load_config
from simulator.image import load_image
from simulator.replay import replay
from vta.cli import _key_value

GOLDEN = Path(__file__).resolve().parents[2] / "shared" / "golden"


def table(rows: list[list[str]], head: list[str], markdown: bool) -> str:
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
        return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])
    widths = [max(len(x) for x in col) for col in zip(head, *rows, strict=True)]
    fmt = "  ".join(f"{{:{'<' if i == 0 else '>'}{w}}}" for i, w in enumerate(widths))
    return "\n".join(fmt.format(*r) for r in [head, *rows])


def golden(dev: RtlDevice, markdown: bool) -> None:
    names = sorted(p.name[:-4] for p in GOLDEN.glob("*.npz") if not p.name.endswith(".expect.npz"))
    rows, total_cycles, total_s = [], 0, 0.0
    for name in names:
        image = load_image(GOLDEN / f"{name}.npz")
        if image.config.fingerprint != dev.cfg.fingerprint:
            continue
        model = replay(image).stats["cycles"]
        dev.reprogram()
        t0 = time.perf_counter()
        _, cycles = dev.replay(image)
        total_s += time.perf_counter() - t0
        total_cycles += cycles
        rows.append([name, str(len(image.insns)), f"{cycles:,}", f"{model:,}", f"{cycles / model:.3f}"])
    if not rows:
        print(f"\n(no golden programs for {dev.cfg.model} in {GOLDEN})")
        return
    print(f"\nVTA's golden programs on {dev.cfg.model}: RTL cycles against the timing model's")
    print(table(rows, ["program", "insns", "RTL cycles", "model cycles", "RTL/model"], markdown))
    print(f"RTL: {total_cycles:,} cycles in {total_s:.2f} s = {total_cycles / total_s:,.0f} cycles/s "
          f"(small programs: the launch and DRAM set-up are a good part of it)")


def resnet18(cfg, image_size: int):
    """ResNet-18 quantized and packed for ``cfg`` (its accelerator part between the zoo's pack points), its input
    and quantized parameters."""
    graph, params = zoo.get_model("resnet-18", batch_size=cfg.BATCH, image_shape=(3, image_size, image_size))
    start, stop = zoo.pack_points("resnet-18")
    x = np.random.default_rng(0).standard_normal(graph["data"].shape).astype(np.float32)
    qgraph, qparams = quantize(graph, params, global_scale=8.0, skip_conv_layers=[0])
    return graph_pack(qgraph, cfg, start_name=start, stop_name=stop), x, qparams


def against_baseline(cfg, image_size: int, baseline: Path, rounds: int) -> None:
    """The accelerator part on the cached build and on ``baseline``, alternating, ``rounds`` each: the model
    thread's CPU seconds per round, medians and their ratio, with the load average."""
    import os

    packed, x, qparams = resnet18(cfg, image_size)
    devices = {"cached build": RtlDevice(cfg, progress=print), "baseline": RtlDevice(cfg, library=baseline)}
    mods = {name: build(packed, cfg, qparams, device=dev) for name, dev in devices.items()}
    seconds: dict[str, list[float]] = {name: [] for name in devices}
    outputs, cycles = {}, {}
    print(f"\nResNet-18 {image_size}x{image_size}'s accelerator part, alternating {devices['cached build'].library} "
          f"and {baseline}")
    for r in range(rounds):
        for name, dev in devices.items():
            before = dev.cpu_seconds
            mods[name].run(data=x)
            seconds[name].append(dev.cpu_seconds - before)
            outputs[name], cycles[name] = mods[name].get_output(0), mods[name].cycles
            print(f"round {r + 1} {name}: {seconds[name][-1]:.2f} s CPU, {cycles[name]:,} cycles, load "
                  f"{os.getloadavg()[0]:.1f}")
    same = np.array_equal(outputs["cached build"], outputs["baseline"]) and len(set(cycles.values())) == 1
    medians = {name: float(np.median(s)) for name, s in seconds.items()}
    print(f"medians: cached build {medians['cached build']:.2f} s, baseline {medians['baseline']:.2f} s; ratio "
          f"{medians['cached build'] / medians['baseline']:.3f}; outputs and cycles "
          f"{'the same' if same else 'DIFFER'}")


def network(cfg, image_size: int, markdown: bool) -> None:
    packed, x, qparams = resnet18(cfg, image_size)
    sim = build(packed, cfg, qparams)
    dev = RtlDevice(cfg, progress=print)
    rtl = build(packed, cfg, qparams, device=dev)
    t0 = time.perf_counter()
    sim.run(data=x)
    sim_s = time.perf_counter() - t0
    before, cpu_before = dev.wall_seconds, dev.cpu_seconds
    t0, c0 = time.perf_counter(), time.process_time()
    rtl.run(data=x)
    rtl_total_s, rtl_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    rtl_s, rtl_cpu_part_s = dev.wall_seconds - before, dev.cpu_seconds - cpu_before
    same = np.array_equal(sim.get_output(0), rtl.get_output(0))

    rows, conv = [], []
    for a, b in zip(sim.profile(), rtl.profile(), strict=True):
        if a["where"] != "accelerator":
            continue
        ratio = b["cycles"] / a["cycles"]
        if a["op"].startswith("conv2d"):
            conv.append(ratio)
        rows.append([a["name"], a["op"], f"{b['cycles']:,}", f"{a['cycles']:,}", f"{ratio:.3f}"])
    rows.append(["total", "", f"{rtl.cycles:,}", f"{sim.cycles:,}", f"{rtl.cycles / sim.cycles:.3f}"])
    print(f"\nResNet-18 {image_size}x{image_size} on {cfg.model}: accelerator layers, RTL cycles against the "
          f"timing model's")
    print(table(rows, ["layer", "op", "RTL cycles", "model cycles", "RTL/model"], markdown))
    print(f"conv layers: RTL/model {min(conv):.3f} .. {max(conv):.3f} over {len(conv)} layers; "
          f"{sum(abs(r - 1) <= 0.10 for r in conv)} within 10%")
    print(f"output: {'bit-identical' if same else 'DIFFERS'} between the RTL and the simulator")
    print(f"accelerator part on the RTL: {rtl.cycles:,} cycles simulated in {rtl_s:.1f} s wall, "
          f"{rtl_cpu_part_s:.1f} s CPU on its one thread = {rtl.cycles / rtl_cpu_part_s:,.0f} cycles per CPU second "
          f"(the whole inference with host layers: {rtl_total_s:.1f} s wall, "
          f"{rtl_cpu_s:.1f} s CPU = {rtl.cycles / rtl_cpu_s:,.0f} cycles per CPU second); the C simulator: the "
          f"whole inference in {sim_s:.2f} s wall, {rtl_total_s / sim_s:.0f}x faster than the RTL")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="pynq", help="preset name or JSON path (default: pynq)")
    ap.add_argument("--set", dest="sets", action="append", type=_key_value, default=[], metavar="KEY=VALUE",
                    help="override a config key (repeatable; VALUE read as JSON, else as a string)")
    ap.add_argument("--image-size", type=int, default=224, help="ResNet-18's input height = width (default 224)")
    ap.add_argument("--skip-golden", action="store_true", help="only the network")
    ap.add_argument("--markdown", action="store_true", help="tables as markdown (for docs/benchmarks.md)")
    ap.add_argument("--baseline", type=Path, metavar="LIBRARY",
                    help="then alternate the cached build with this build of the same RTL (libvta_rtl.so)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds on each build with --baseline (default 3)")
    args = ap.parse_args()
    if args.baseline and not args.baseline.is_file():
        ap.error(f"--baseline {args.baseline}: no such file (a libvta_rtl.so that hardware.build printed)")
    if args.rounds < 1:
        ap.error(f"--rounds {args.rounds}: at least 1")
    cfg = load_config(args.config, **dict(args.sets))
    print(header("rtl", f"the RTL of {cfg.model} (Verilator, one thread) against the C simulator's timing model"))
    if not args.skip_golden:
        golden(RtlDevice(cfg, progress=print), args.markdown)
    network(cfg, args.image_size, args.markdown)
    if args.baseline:
        against_baseline(cfg, args.image_size, args.baseline, args.rounds)


if __name__ == "__main__":
    run_main(main)
