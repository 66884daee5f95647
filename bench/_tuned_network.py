"""What the CPU tuning bench scripts (host_tuning.py: templates; auto_schedule.py --network: the auto-scheduler)
print about a tuned network: per task, the same-run times of the tuning (the untuned kernel build runs, the
template's default or the default loop nest, the best trial, which one build applies), and the whole network, tuned
and untuned builds against onnxruntime on one thread in alternating rounds."""

from __future__ import annotations

import math

import numpy as np
from _host import rounds

from graph_pack.reference import run_reference


def _geomean(values: list[float], weights: list[int]) -> float:
    return math.exp(sum(w * math.log(v) for v, w in zip(values, weights, strict=True)) / sum(weights))


def task_table(summary, default_name: str) -> str:
    """Markdown: each task's times from the tuning run itself (the runner's timings, one task's trials and its
    untuned kernel in the same run) and the speed of what build applies over the untuned kernel (>= 1.00x: a tuned
    result is applied only where it won)."""
    lines = [(f"| task (x runs) | untuned ms (build's kernel) | {default_name} ms | best trial ms | applied | "
             "applied vs untuned | trials |"), "|---|---|---|---|---|---|---|"]
    ratios, weights = [], []
    for s in summary.states:
        won = s.best_s < s.baseline_s
        ratio = s.baseline_s / s.tuned_s
        ratios.append(ratio)
        weights.append(s.task.weight)
        lines.append(f"| {s.task.name} (x{s.task.weight}) | {s.untuned_s * 1e3:.3f} | {s.default_s * 1e3:.3f} | "
                     f"{s.best_s * 1e3:.3f} | {'tuned' if won else 'untuned'} | {ratio:.2f}x | {s.trials} |")
    before, after = summary.latency_before_s, summary.latency_after_s
    lines.append(f"| **weighted geometric mean; sum of weighted times** | {before * 1e3:.2f} | | | "
                 f"{sum(1 for s in summary.states if s.best_s < s.baseline_s)} of {len(summary.states)} tuned | "
                 f"**{_geomean(ratios, weights):.2f}x**; {before / after:.2f}x summed | |")
    return "\n".join(lines)


def versus_onnxruntime(graph, params, model, x: np.ndarray, builds: list[tuple[str, object]], repeat: int) -> str:
    """Markdown: each build and onnxruntime (1 thread, the same ONNX file) timed in alternating rounds (median),
    every output checked against the numpy reference (allclose, rtol 1e-4) first."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    data = graph.inputs[0]
    ref = run_reference(graph, params, {data: x})
    outs = []
    for _, mod in builds:
        mod.run(**{data: x})
        outs.append(mod.get_output(0))
    outs.append(session.run(None, {data: x})[0])
    names = [n for n, _ in builds] + ["onnxruntime 1 thread"]
    checks = ", ".join(f"{n} {'yes' if np.allclose(y, ref, rtol=1e-4, atol=1e-6) else 'NO'}"
                       for n, y in zip(names, outs, strict=True))
    fns = [lambda m=m: m.run(**{data: x}) for _, m in builds] + [lambda: session.run(None, {data: x})]
    times = rounds(fns, repeat, budget=0.0)
    lines = [(f"whole network, one thread, median of {repeat} alternating rounds; outputs vs numpy (allclose, rtol "
             f"1e-4): {checks}"), "| build | ms | vs onnxruntime |", "|---|---|---|"]
    lines += [f"| {n} | {t * 1e3:.2f} | {t / times[-1]:.2f}x |" for n, t in zip(names, times, strict=True)]
    return "\n".join(lines)
