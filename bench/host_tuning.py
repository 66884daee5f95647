"""Host CPU tuning: ResNet-18's float conv layers tuned on this CPU (the host templates, AutoTVM's x86 / ARM knobs)
against their untuned schedules, and the tuned float network on one thread against onnxruntime's float inference
of the same ONNX file, in the same run.

1. Tunes every float conv2d / dense task of ResNet-18 (224 x 224, batch 1) with the XGBoost tuner (``--n-trial``
   per task; records in ``--log``, resumed when it exists). The tuning run also times the kernel build runs without
   a record (host.jit's) with the same runner; the per-task table gives those same-run times and what build applies
   (a tuned config only where it beat that kernel).
2. Per conv layer, times in alternating rounds (median): the template's default config (AutoTVM's fallback
   heuristic), the first config of its space (every tile 1: AutoTVM's fallback without a heuristic), host.jit's
   fixed kernel (what the host runs untuned), and what build applies (the tuned config, or host.jit's kernel where
   that won in the tuning run); geometric means of the speed-ups, weighted by how often the network runs each layer.
3. The whole network: our build with the tuned kernels, our untuned build (host.jit) and onnxruntime (1 thread,
   the same ONNX file our frontend imported), in alternating rounds; outputs checked against numpy.

    python bench/host_tuning.py [--n-trial 32] [--repeat 15] [--log host_tuning.jsonl]
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import sys
import time

# bench/_host.py and _onnx_export.py, imported while this directory is still on the path
from _host import header, rounds, run_main
from _onnx_export import to_onnx
from _tuned_network import task_table, versus_onnxruntime

# bench/tuning.py shares its name with the tuning package: keep this directory off the import path from here on
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import numpy as np

import tuning
from graph_pack import build, zoo
from graph_pack.frontend_onnx import from_onnx
from graph_pack.opdefs import OPS
from host import jit
from host.templates import host
from tuning.cpu import CpuRunner, close_to


def time_layer(task, tuned: dict | None, rng: np.random.Generator, repeat: int) -> list[float]:
    """Seconds per call of a conv task's default config, its all-ones config, host.jit's fixed kernel and the
    kernel build applies (the tuned config; host.jit's where no config beat it), each output checked against the
    float64 reference first."""
    t = task.template
    inputs = t.random_inputs(rng)
    want = t.reference(**inputs)
    first = next(c for c in t.space() if t.check(c) is None)
    p = t.p
    attrs = OPS["nn.conv2d"].normalize({**OPS["nn.conv2d"].defaults, "strides": (p.sh, p.sw),
                                       "padding": (p.pt, p.pl, p.pb, p.pr)}, [inputs["data"], inputs["kernel"]])
    fixed = jit.get_kernel("nn.conv2d", attrs, [inputs["data"].shape, inputs["kernel"].shape], ["float32"] * 2)
    fns = [functools.partial(t.build(c), **inputs) for c in (None, first)]
    fns.append(functools.partial(fixed, attrs, inputs["data"], inputs["kernel"]))
    fns.append(functools.partial(t.build(tuned), **inputs) if tuned is not None else fns[-1])
    for fn in fns:
        assert close_to(fn(), want), f"{task.name}: a kernel disagrees with the float64 reference"
    return rounds(fns, repeat)


def geomean(values: list[float], weights: list[int]) -> float:
    return math.exp(sum(w * math.log(v) for v, w in zip(values, weights)) / sum(weights))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n-trial", type=int, default=32, help="trials per task (default 32)")
    ap.add_argument("--tuner", default="xgb", help="tuner (default xgb)")
    ap.add_argument("--repeat", type=int, default=15, help="timing rounds, median kept (default 15)")
    ap.add_argument("--log", default="host_tuning.jsonl", help="record log (resumed; default host_tuning.jsonl)")
    args = ap.parse_args()
    # checked before any work (run_main names the pip command of a missing extra)
    import onnx  # noqa: F401
    import onnxruntime  # noqa: F401
    if args.tuner == "xgb":
        import xgboost  # noqa: F401
    cpu = host()
    zoo_graph, zoo_params = zoo.get_model("resnet-18", batch_size=1)
    model = to_onnx(zoo_graph, zoo_params)   # the file both onnxruntime and our flow start from
    graph, params = from_onnx(model)
    x = np.random.default_rng(0).standard_normal(graph["data"].shape).astype(np.float32)

    print(header("host_tuning", f"ResNet-18 float on this CPU ({cpu.model}, {cpu.vector_bits}-bit vectors), one "
                                "thread: tuned host templates vs untuned, and vs onnxruntime"), flush=True)
    tasks = tuning.extract_tasks(graph, target="cpu")
    t0 = time.perf_counter()
    with CpuRunner(number=1, repeat=3, min_repeat_ms=20) as runner:
        summary = tuning.tune_tasks(tasks, tuner=args.tuner, n_trial=args.n_trial, runner=runner, log=args.log,
                                    strategy="sequential", batch_size=8)
    tune_s = time.perf_counter() - t0
    best = tuning.load_best(args.log, "cpu")

    print(f"tuning: {args.tuner}, {args.n_trial} trials per task, {len(tasks)} tasks, {tune_s:.0f} s (log {args.log})")
    print("\nper task, the tuning run's own timings (CpuRunner: mean of 3 x >= 20 ms):")
    print(task_table(summary, "template default"))
    print("\nper conv layer, alternating rounds after tuning ('applied': what build runs):")
    print("| conv layer (x runs) | template default ms | all-ones config ms | host.jit ms | applied ms | "
          "tuned vs default | vs all-ones | vs jit |")
    print("|---|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(1)
    ratios: dict[str, list[float]] = {"default": [], "ones": [], "jit": []}
    weights = []
    for task in tasks:
        if not task.op.startswith("conv2d"):
            continue
        times = time_layer(task, best.get(task.key), rng, args.repeat)
        for key, base in zip(ratios, times[:3]):
            ratios[key].append(base / times[3])
        weights.append(task.weight)
        print(f"| {task.name} (x{task.weight}) | {times[0] * 1e3:.3f} | {times[1] * 1e3:.3f} | {times[2] * 1e3:.3f} | "
              f"{times[3] * 1e3:.3f} | {times[0] / times[3]:.2f}x | {times[1] / times[3]:.2f}x | "
              f"{times[2] / times[3]:.2f}x |")
    g = {k: geomean(v, weights) for k, v in ratios.items()}
    print(f"| **geometric mean (weighted by runs)** | | | | | **{g['default']:.2f}x** | **{g['ones']:.2f}x** | "
          f"**{g['jit']:.2f}x** |")

    tuned_mod = build(graph, "pynq", params, host_schedules=best)
    untuned_mod = build(graph, "pynq", params)
    tuned_layers = sum(getattr(s, "backend", "") == "tuned" for s in tuned_mod.steps)
    print(f"\n{tuned_layers} layers run a tuned config")
    print(versus_onnxruntime(graph, params, model, x, [("ours, tuned host kernels", tuned_mod),
                                                      ("ours, untuned (host.jit)", untuned_mod)], args.repeat))


if __name__ == "__main__":
    run_main(main)
