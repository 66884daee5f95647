"""Softmax, layer norm and erf (GELU) on the host: graph_pack's numpy kernels (before) against the host compiler's
kernels under their default schedules (after). ``build`` now runs erf compiled (``graph_pack.host_auto.
compiled_by_default``: bit-exact and faster); softmax and layer norm only under a tuning log (not bit-exact; softmax
also slower by default at BERT-base sizes): the per-op rows measure all three.

Two parts, one thread, float32:

- the BERT-tiny and ViT-tiny test exports (tests/data/onnx, weights refilled from the tests' seeded generator), the
  whole float network on the host (``build`` without an accelerator region): the summed host time of the steps of
  these ops and the whole inference, before and after, both builds' outputs against the numpy reference;
- the same ops at BERT-base sizes (sequence 128: erf on the 128 x 3072 GELU activation, softmax over 12 heads'
  128 x 128 scores, layer norm of 128 x 768), each timed alone in alternating rounds (medians).

The "before" builds patch ``compiled_by_default`` to refuse every DAG: the kernels ``build`` ran before (numpy's).

    python bench/host_ops.py [--repeat 9]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from _host import header, rounds, run_main

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))   # the test models and their seeded weights live with the tests

OPS = ("nn.softmax", "nn.layer_norm", "erf")


def _build(graph, params, compiled: bool):
    from graph_pack import build, host_auto
    real = host_auto.compiled_by_default
    if not compiled:
        host_auto.compiled_by_default = lambda dag: False
    try:
        return build(graph, "pynq", params)
    finally:
        host_auto.compiled_by_default = real


def network_rows(name: str, repeat: int) -> list[str]:
    import onnx_models

    from graph_pack import run_reference
    from graph_pack.frontend_onnx import from_onnx
    model = onnx_models.load(name)
    feeds = onnx_models.inputs(model)
    graph, params = from_onnx(model)
    ref = run_reference(graph, params, feeds)
    mods = [_build(graph, params, compiled) for compiled in (False, True)]
    op_ms, total_ms, errors = [], [], []
    for mod in mods:
        mod.run(**feeds)
        errors.append(float(np.abs(mod.get_output(0) - ref).max() / max(float(np.abs(ref).max()), 1e-30)))
        runs = []
        for _ in range(repeat):
            mod.run(**feeds)
            rows = mod.profile()
            runs.append((sum(r.get("host_ms", 0.0) for r in rows if r["op"] in OPS), sum(r.get("host_ms", 0.0) for r in rows)))
        op_ms.append(float(np.median([a for a, _ in runs])))
        total_ms.append(float(np.median([b for _, b in runs])))
    ran = {s.op for s in mods[1].steps if getattr(s, "backend", "") == "auto"}
    return [(f"| {name} ({', '.join(sorted(ran & set(OPS)))}) | {op_ms[0]:.3f} | {op_ms[1]:.3f} | "
            f"{op_ms[0] / op_ms[1]:.1f}x | {total_ms[0]:.2f} | {total_ms[1]:.2f} | {total_ms[0] / total_ms[1]:.2f}x | "
            f"{errors[0]:.1e} / {errors[1]:.1e} |")]


def op_rows(repeat: int) -> list[str]:
    from graph_pack import host_auto
    from graph_pack import kernels as K
    from host import default_schedule, ops
    rng = np.random.default_rng(0)
    cases = [
        ("erf 128x3072 (GELU's)", ops.elementwise((128, 3072), [("erf",)]), "erf", {},
         [rng.standard_normal((128, 3072)).astype(np.float32)]),
        ("softmax 12x128x128", ops.softmax((12, 128, 128)), "nn.softmax", {"axis": -1},
         [rng.standard_normal((12, 128, 128)).astype(np.float32) * 3]),
        ("layer norm 128x768", ops.layer_norm((128, 768)), "nn.layer_norm", {"axis": -1, "epsilon": 1e-5},
         [rng.standard_normal((128, 768)).astype(np.float32), rng.standard_normal(768).astype(np.float32),
          rng.standard_normal(768).astype(np.float32)]),
    ]
    out = []
    for label, dag, op, attrs, arrays in cases:
        kernel = host_auto.kernel(dag, default_schedule(dag))
        before = lambda op=op, attrs=attrs, arrays=arrays: K.KERNELS[op](attrs, *arrays)
        after = lambda kernel=kernel, attrs=attrs, arrays=arrays: kernel(attrs, *arrays)
        want, got = before(), after()
        err = float(np.abs(got - want).max() / max(float(np.abs(want).max()), 1e-30))
        b, a = rounds([before, after], repeat)
        out.append(f"| {label} | {b * 1e3:.3f} | {a * 1e3:.3f} | {b / a:.1f}x | {err:.1e} |")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9, help="timed runs (medians; default 9)")
    args = parser.parse_args()
    print(header("bench/host_ops.py", "softmax / layer norm / erf on the host: numpy kernels vs compiled (default "
                                      "schedules)"))
    print("\n| network (ops compiled) | these ops before ms | after ms | speedup | inference before ms | after ms | "
          "speedup | max error vs numpy reference, before / after |\n|---|---|---|---|---|---|---|---|")
    for name in ("bert_tiny", "vit_tiny"):
        print("\n".join(network_rows(name, args.repeat)), flush=True)
    print("\n| op (BERT-base size) | numpy kernel ms | compiled ms | speedup | max error (of the largest) |\n"
          "|---|---|---|---|---|")
    print("\n".join(op_rows(args.repeat)))
    return 0


if __name__ == "__main__":
    run_main(main)
