"""Host operators auto-scheduled (host/ + tuning/auto_schedule.py, issue 43) against the untuned kernel the
host runs today and, where one exists, the AutoTVM-style template tuned with the same trial budget.

Per op (ResNet-18, MobileNetV2 and BERT-tiny shapes, batch 1, float32, one thread):

- ``untuned``: what ``graph_pack.build`` runs without a log: host.jit's fixed kernel (conv2d, dense,
  pooling), else the numpy kernel of graph_pack.kernels (softmax), else the same formula in numpy for ops the graph
  IR has no node for yet (batch_matmul, layer norm, GELU);
- ``auto default``: the auto-scheduler's own untuned schedule (plain loop nests), measured first by the search;
- ``auto``: the best of ``--n-trial`` measured schedules (the default included, so never slower than it in the
  search's own measurements); ``build runs``: that schedule where it also beat the untuned kernel the search timed
  (``AutoResult.applied``), else the untuned kernel;
- ``template``: the host template tuned by the XGBoost tuner with the same ``--n-trial`` (conv2d, depthwise, dense),
  and its default config.

All kernels of one op are timed in alternating rounds (median of ``--repeat``), after checking their outputs
agree (exactly, between untuned jit/numpy-order kernels and auto; to 1e-4 with the templates).

    python bench/auto_schedule.py [--n-trial 24] [--repeat 9] [--ops conv,dense,...]

``--network resnet-18``: instead, the whole network (224 x 224, batch 1, float32, imported from the ONNX file
onnxruntime runs) tuned as ``vta tune --target cpu --scheduler auto`` tunes it (every host op a task, the gradient
task scheduler, ``--n-trial`` per task, records in ``--log``, resumed), then per task the tuning run's own times (the
untuned kernel build runs, the default loop nest, the best schedule, which one build applies), and the auto-scheduled
build, the untuned build and onnxruntime on one thread in alternating rounds.

    python bench/auto_schedule.py --network resnet-18 [--n-trial 8] [--repeat 9] [--log auto_r18.jsonl]
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import sys
import time
from collections.abc import Callable

from _host import header, rounds, run_main
from _onnx_export import to_onnx
from _tuned_network import task_table, versus_onnxruntime

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]   # bench/tuning.py vs tuning/

import numpy as np

from graph_pack import kernels as K
from graph_pack.opdefs import OPS
from host import compile_schedule, jit, ops
from host.llvm_backend import cpu_name
from tuning.auto_schedule import SearchPolicy, auto_schedule


def _erf(x: np.ndarray) -> np.ndarray:
    """scipy's vectorised erf where scipy is installed (an optional baseline, not a dependency), else math.erf
    per element (a far slower baseline: the table says which)."""
    try:
        from scipy.special import erf
    except ImportError:
        return np.frompyfunc(math.erf, 1, 1)(x.astype(np.float64)).astype(np.float32)
    return erf(x).astype(np.float32)


def _erf_what() -> str:
    try:
        import scipy.special  # noqa: F401
    except ImportError:
        return "numpy + math.erf per element (no graph op yet)"
    return "numpy + scipy erf (no graph op yet)"


def _jit(op: str, attrs: dict, shapes: list[tuple]) -> Callable:
    a = OPS[op].normalize({**OPS[op].defaults, **attrs}, [np.zeros(s, np.float32) for s in shapes])
    fn = jit.get_kernel(op, a, shapes, ["float32"] * len(shapes))
    ref = K.KERNELS[op]
    return (lambda *xs: fn(a, *xs)) if fn is not None else (lambda *xs: ref(a, *xs))


def conv(name, x, w, stride=1, pad=1, groups=1):
    pads = (pad,) * 4
    dag = ops.conv2d(x, w, strides=(stride, stride), padding=pads, groups=groups)
    untuned = _jit("nn.conv2d", {"strides": (stride, stride), "padding": pads, "groups": groups}, [x, w])
    template = ("depthwise_conv2d_NCHWc.x86" if groups > 1 else "conv2d_NCHWc.x86",
                {"data_shape": x, "kernel_shape": w, "strides": (stride, stride), "padding": pads})
    return name, dag, untuned, "host.jit", template


def pool(name, kind, x, k, s, p):
    dag = ops.pool2d(kind, x, (k, k), (s, s), (p,) * 4)
    untuned = _jit(f"nn.{kind}_pool2d", {"pool_size": (k, k), "strides": (s, s), "padding": (p,) * 4}, [x])
    return name, dag, untuned, "host.jit", None


CASES = {
    "conv": lambda: [conv("resnet18 conv 64x56x56 3x3", (1, 64, 56, 56), (64, 64, 3, 3)),
                     conv("resnet18 conv 128x28x28 3x3", (1, 128, 28, 28), (128, 128, 3, 3)),
                     conv("resnet18 conv 256x14x14 3x3", (1, 256, 14, 14), (256, 256, 3, 3)),
                     conv("resnet18 conv 512x7x7 3x3", (1, 512, 7, 7), (512, 512, 3, 3))],
    "depthwise": lambda: [conv("mobilenetv2 dw 144x56x56 s2", (1, 144, 56, 56), (144, 1, 3, 3), 2, 1, 144),
                          conv("mobilenetv2 dw 384x14x14", (1, 384, 14, 14), (384, 1, 3, 3), 1, 1, 384)],
    "dense": lambda: [("resnet18 dense 512->1000", ops.dense((1, 512), (1000, 512)),
                       _jit("nn.dense", {"units": 1000}, [(1, 512), (1000, 512)]), "host.jit",
                       ("dense_pack.x86", {"data_shape": (1, 512), "kernel_shape": (1000, 512)})),
                      ("bert-tiny dense 128x128->512", ops.dense((128, 128), (512, 128)),
                       _jit("nn.dense", {"units": 512}, [(128, 128), (512, 128)]), "host.jit",
                       ("dense_pack.x86", {"data_shape": (128, 128), "kernel_shape": (512, 128)}))],
    "pool": lambda: [pool("resnet18 maxpool 3x3 s2", "max", (1, 64, 112, 112), 3, 2, 1),
                     ("resnet18 global avg pool 512x7x7", ops.global_avg_pool2d((1, 512, 7, 7)),
                      _jit("nn.global_avg_pool2d", {}, [(1, 512, 7, 7)]), "host.jit", None)],
    "bert": lambda: [
        ("bert-tiny batch_matmul 2x128x64 @ 64x128", ops.batch_matmul((2, 128, 64), (2, 64, 128)),
         lambda a, b: np.matmul(a, b), "numpy matmul (no graph op yet)", None),
        ("bert-tiny softmax 256x128", ops.softmax((2, 128, 128)),
         lambda x: K.KERNELS["nn.softmax"]({"axis": -1}, x.reshape(2, 128, 128)), "graph_pack.kernels", None),
        ("bert-tiny layer norm 128x128", ops.layer_norm((128, 128)),
         lambda x, g, b: (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + np.float32(1e-5)) * g + b,
         "numpy (no graph op yet)", None),
        ("bert-tiny gelu 128x512", ops.gelu((128, 512)),
         lambda x: np.float32(0.5) * x * (np.float32(1) + _erf(x / np.float32(math.sqrt(2)))),
         _erf_what(), None),
        ("add+relu 64x56x56", ops.elementwise((1, 64, 56, 56), [("add", "full"), ("relu",)]),
         lambda x, y: np.maximum(x + y, 0), "graph_pack.kernels", None)],
}


def tune_template(op: str, workload: dict, n_trial: int):
    """(default kernel, tuned kernel) of a host template tuned with the XGBoost tuner."""
    import tuning
    from tuning.cpu import CpuRunner
    task = tuning.cpu_task(op, **workload)
    tuner = tuning.make_tuner("xgb", task, seed=0)
    with CpuRunner(number=1, repeat=3, min_repeat_ms=10) as runner:
        result = tuner.tune(n_trial, runner, batch_size=8)
    t = task.template
    return t.build(None), t.build(result.best_config)


def _runs(result) -> str:
    """What build would run for the op after this search: the best schedule where it beat the untuned kernel in the
    search's own measurements (``AutoResult.applied``), else the untuned kernel."""
    if result.untuned_seconds is None:
        return "auto (no graph op)"
    return "auto" if result.applied else "untuned"


def geomean(xs: list[float]) -> float:
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else math.nan


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n-trial", type=int, default=24, help="measured trials per op, auto and template (default 24)")
    ap.add_argument("--repeat", type=int, default=9, help="timing rounds, median kept (default 9)")
    ap.add_argument("--ops", default=",".join(CASES), help=f"groups to run (default all: {','.join(CASES)})")
    ap.add_argument("--network", choices=("resnet-18",), help="tune and time a whole network instead of single ops")
    ap.add_argument("--log", default="auto_schedule.jsonl", help="--network's record log (resumed)")
    args = ap.parse_args()
    if args.network:
        return network(args)
    groups = args.ops.split(",")
    for g in groups:
        if g not in CASES:
            raise ValueError(f"--ops {g}: not a group (allowed: {', '.join(CASES)})")
    if args.n_trial < 1 or args.repeat < 1:
        raise ValueError("--n-trial and --repeat must be >= 1")
    import xgboost  # noqa: F401  (checked before any work: run_main names the extra)
    try:   # numpy's matmul baseline on one thread, as every other kernel here
        from threadpoolctl import threadpool_limits
        threadpool_limits(1)
    except ImportError:
        print("# threadpoolctl is missing: numpy's BLAS may use more than one thread")
    print(header("auto_schedule", f"host ops auto-scheduled vs untuned vs tuned templates, {args.n_trial} trials "
                                  f"each, one thread (LLVM CPU {cpu_name()})"), flush=True)
    print("| op | untuned (what) | untuned ms | auto default ms | auto ms | template default ms | template ms | "
          "auto vs untuned | auto vs template | build runs | search s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    vs_untuned: dict[str, list[float]] = {"template ops": [], "other ops": []}
    vs_template = []
    rng = np.random.default_rng(0)
    for group in groups:
        for name, dag, untuned, what, template in CASES[group]():
            t0 = time.perf_counter()
            result = auto_schedule(dag, n_trial=args.n_trial, policy=SearchPolicy())
            search_s = time.perf_counter() - t0
            xs = [rng.standard_normal(t.shape).astype(np.float32) for t in dag.inputs]
            auto = compile_schedule(dag, result.best)
            auto_default = compile_schedule(dag, result.trials[0].schedule)
            want = auto_default(*xs)
            assert np.array_equal(auto(*xs), want), f"{name}: the auto-scheduled kernel's output differs"
            base = np.asarray(untuned(*xs), np.float32).reshape(want.shape)
            assert np.allclose(base, want, rtol=1e-4, atol=1e-5), f"{name}: untuned and auto outputs disagree"
            fns = [functools.partial(fn, *xs) for fn in (untuned, auto_default, auto)]
            if template:
                t_default, t_tuned = tune_template(*template, args.n_trial)
                inputs = dict(zip(("data", "kernel"), xs, strict=True))
                assert np.allclose(t_tuned(**inputs), want, rtol=1e-4, atol=1e-4), f"{name}: template disagrees"
                fns += [functools.partial(t_default, **inputs), functools.partial(t_tuned, **inputs)]
            times = rounds(fns, args.repeat)
            ms = [f"{t * 1e3:.3f}" for t in times]
            ratio = times[0] / times[2]
            vs_untuned["template ops" if template else "other ops"].append(ratio)
            vs_t = ""
            if template:
                best_template = min(times[3], times[4])   # the default is kept when tuning did not beat it
                vs_template.append(best_template / times[2])
                vs_t = f"{best_template / times[2]:.2f}x"
            print(f"| {name} | {what} | {ms[0]} | {ms[1]} | {ms[2]} | {ms[3] if template else '-'} | "
                  f"{ms[4] if template else '-'} | {ratio:.2f}x | {vs_t or '-'} | {_runs(result)} | {search_s:.0f} |",
                  flush=True)
    print(f"\ngeometric means (higher: auto faster): vs untuned, ops with a template "
          f"{geomean(vs_untuned['template ops']):.2f}x, ops without {geomean(vs_untuned['other ops']):.2f}x; "
          f"vs the better of the tuned template and its default {geomean(vs_template):.2f}x")


def network(args) -> None:
    """The whole network auto-scheduled (see the module docstring)."""
    import onnx  # noqa: F401  (checked before any work: run_main names the extra)
    import onnxruntime  # noqa: F401
    import xgboost  # noqa: F401

    from graph_pack import build, zoo
    from graph_pack.frontend_onnx import from_onnx
    from graph_pack.host_auto import read_auto_schedules
    from host.templates import host
    from tuning import tune_tasks
    from tuning.auto_network import auto_tasks_of
    from tuning.cpu import CpuRunner

    zoo_graph, zoo_params = zoo.get_model(args.network, batch_size=1)
    model = to_onnx(zoo_graph, zoo_params)   # the file both onnxruntime and our flow start from
    graph, params = from_onnx(model)
    x = np.random.default_rng(0).standard_normal(graph[graph.inputs[0]].shape).astype(np.float32)
    print(header("auto_schedule", f"{args.network} float auto-scheduled on this CPU (LLVM CPU {cpu_name()}), one "
                                  "thread: tuned vs untuned in the same run, and vs onnxruntime"), flush=True)
    tasks = auto_tasks_of(graph)
    t0 = time.perf_counter()
    with CpuRunner(number=1, repeat=3, min_repeat_ms=10) as runner:
        summary = tune_tasks(tasks, tuner="auto", n_trial=args.n_trial, runner=runner, log=args.log,
                             strategy="gradient", batch_size=4)
    print(f"tuning: auto-scheduler, {args.n_trial} trials per task (gradient task scheduler), {len(tasks)} tasks, "
          f"{time.perf_counter() - t0:.0f} s (log {args.log})")
    print("\nper task, the tuning run's own timings (CpuRunner: mean of 3 x >= 10 ms):")
    print(task_table(summary, "default nest"))
    auto = read_auto_schedules(args.log, host())
    tuned = build(graph, "pynq", params, auto_schedules=auto)
    untuned = build(graph, "pynq", params)
    print(f"\n{auto.summary()}")
    print(versus_onnxruntime(graph, params, model, x, [("ours, auto-scheduled", tuned),
                                                      ("ours, untuned (host.jit)", untuned)], args.repeat))


if __name__ == "__main__":
    run_main(main)
