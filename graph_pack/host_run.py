"""``vta run MODEL --target cpu``: every layer of the float network on this CPU, the float conv2d / dense with
the host templates' tuned kernels from ``--log`` (host.jit's fixed kernels for those without a record), the
host ops the auto-scheduler tuned (``vta tune --scheduler auto``) under their logged schedules, timed
like TVM's ``module.benchmark`` (mean and std of repeated runs)."""

from __future__ import annotations

import argparse
import time

import numpy as np

from graph_pack.build import build
from graph_pack.host_auto import read_auto_schedules
from graph_pack.reference import run_reference
from graph_pack.schedule_log import read_schedules, refuse_unused
from host.templates import host

REPEAT = 10   # timed runs after one warm-up run


def refuse_accelerator_flags(args: argparse.Namespace) -> None:
    """--target cpu runs no accelerator: its flags would be ignored, so they are refused before any work."""
    given = [flag for flag, on in (("--device", args.device != "sim"), ("--rpc", args.rpc), ("--board", args.board),
                                   ("--bitstream", args.bitstream), ("--start", args.start), ("--stop", args.stop),
                                   ("--skip-conv", args.skip_conv), ("--calibrate", args.calibrate is not None),
                                   ("--global-scale", args.global_scale is not None),
                                   ("--per-channel", args.per_channel != "auto"), ("--quant-report", args.quant_report),
                                   ("--explain", args.explain), ("--out", args.out)) if on]
    if given:
        raise ValueError(f"--target cpu runs the float network on this CPU, without the accelerator: "
                         f"{', '.join(given)} do(es) not apply")


def kernel_report(mod) -> str:
    """Which kernel runs every step of a CPU build: a tuned host template's (with the ops it fuses), host.jit's
    fixed one, or the numpy reference."""
    lines = [f"{'node':34} {'op':18} {'kernel':8} fused"]
    for s in mod.steps:
        lines.append(f"{s.name[:34]:34} {s.op[:18]:18} {getattr(s, 'backend', ''):8} {', '.join(getattr(s, 'fused', []))}")
    return "\n".join(lines)


def run_cpu(args: argparse.Namespace, env, load) -> int:
    """Build the float network for the CPU (tuned host kernels from --log), run it, print the top-5 and the time."""
    refuse_accelerator_flags(args)
    cpu = host()
    schedules = read_schedules(args.log, cpu) if args.log else None   # a missing log fails before the work
    auto = read_auto_schedules(args.log, cpu) if args.log else None   # the auto-scheduler's records in it
    if schedules is not None:   # no record for this CPU at all: said before the work
        refuse_unused(args.model, schedules, auto=auto.logged)
    graph, params, x, top5 = load(args)
    data = graph.inputs[0]
    t0 = time.perf_counter()
    mod = build(graph, env, params, cpu=args.cpu, host_schedules=schedules, auto_schedules=auto)
    build_s = time.perf_counter() - t0
    if schedules is not None:   # records for this CPU, but none for a layer of this network
        refuse_unused(args.model, schedules, built=True, auto=auto.logged)
    mod.run(**{data: x})
    y = mod.get_output(0)
    bench = mod.benchmark(number=1, repeat=REPEAT, **{data: x})
    tuned = sum(getattr(s, "backend", "") == "tuned" for s in mod.steps)
    auto_tuned = len(auto.applied) if auto is not None else 0
    print(f"{args.model} on the CPU ({cpu.model}, {cpu.vector_bits}-bit vectors, one thread), input {graph[data].shape}")
    if schedules is not None and (schedules.records or not auto.records):
        print(schedules.summary())
    if auto is not None and auto.records:
        print(auto.summary())
    print(top5(y))
    print(f"build {build_s:.2f} s; {tuned} layer(s) with tuned host kernels"
          + (f", {auto_tuned} host op(s) auto-scheduled" if auto_tuned else ""))
    print(f"inference: mean {bench['mean_ms']:.2f} ms, std {bench['std_ms']:.2f} ms over {REPEAT} runs")
    if args.report is True:
        print(kernel_report(mod))
    if args.layers:
        print(mod.format_profile())
    if args.check:
        ref = run_reference(graph, params, {data: x})
        scale = float(np.abs(ref).max())
        same = bool(np.allclose(y, ref, rtol=1e-4, atol=1e-4 * max(scale, 1e-30)))
        print(f"check: output {'matches' if same else 'DIFFERS from'} the numpy reference (np.allclose, 1e-4 of "
              f"each value and of the largest; max |diff| {float(np.abs(ref - y).max()):.3g})")
        return 0 if same else 1
    return 0
