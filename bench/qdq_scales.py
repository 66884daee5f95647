"""QDQ models with their own scales against ours: the families of tests/data/onnx quantized by onnxruntime, run as
``vta run MODEL.onnx`` runs them with ``--calibrate percentile`` (our scales: the model's fake quantization computed
in float on the host, every tensor re-quantized at our percentile ranges; the default before ``--calibrate model``)
and with ``--calibrate model`` (the model's scales, rounded to powers of two; its weights' integers where they
survive). Per family and mode: the cosine similarity of our output with onnxruntime's int8 output of the QDQ model
and with onnxruntime's float output of the float model, bit-exactness against the numpy reference of the same
quantized graph, the share of the MACs on the accelerator and the number of host ops. Similarities are printed as
``1 - cosine`` (lower is closer).

Each family is the default export (``<family>.onnx``) with the tests' seeded weights and input
(``tests/onnx_models.py``), quantized by ``onnxruntime.quantization.quantize_static`` as the tests do it (per-channel
int8 weights, uint8 activations, calibrated on that input); the same input is the run's. Everything else is vta
run's defaults on the pynq preset (regions found automatically, every convolution quantized, ``--dense``'s default).

    python bench/qdq_scales.py [--families resnet50,mobilenet_v2] [--write]   # --write: into docs/networks.md, docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
from _host import header, run_main
from families import write_between_markers

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))   # the test models and their seeded weights live with the tests

MODES = ("percentile", "model")
DOCS = (ROOT / "docs" / "networks.md", ROOT / "docs" / "benchmarks.md")
MARKS = ("<!-- qdq table -->", "<!-- /qdq table -->")


def run_mode(model, feeds: dict, mode: str, expected_int8: list, expected_float: list) -> str:
    """One table row's cells after the family's name for ``model`` (a QDQ ModelProto) quantized in ``mode``."""
    from graph_pack import build, graph_pack, quantize, run_reference
    from graph_pack.calibration import cosine
    from graph_pack.cli import calibration, quantize_dense
    from graph_pack.explain import explain
    from graph_pack.frontend_onnx import from_onnx
    from graph_pack.quantize_model import carries_scales
    from hw_config import load_config
    from simulator.core import Simulator
    from vta import Environment
    from vta.device import SimDevice

    cfg = load_config("pynq")
    env = Environment(cfg)
    graph, params = from_onnx(model)
    mode, dataset = calibration(mode, None, graph, feeds, carries_scales(graph, params))
    qgraph, qparams = quantize(graph, params, calibrate_mode=mode, dataset=dataset, skip_conv_layers=[],
                               skip_dense_layer=not quantize_dense(None, None, None, graph))
    packed = graph_pack(qgraph, env)
    mod = build(packed, env, qparams, device=SimDevice(cfg, Simulator(cfg)))
    mod.run(**feeds)
    ours = [mod.get_output(i) for i in range(len(graph.outputs))]
    ref = run_reference(qgraph, qparams, feeds)
    ref = list(ref) if isinstance(ref, tuple) else [ref]
    exact = all(np.array_equal(r, o) for r, o in zip(ref, ours, strict=True))
    vs_int8 = min(cosine(o, e) for o, e in zip(ours, expected_int8, strict=True))
    vs_float = min(cosine(o, e) for o, e in zip(ours, expected_float, strict=True))
    placement = explain(packed, mod.fallbacks)
    host_ops = sum(1 for p in placement.ops if p.where == "host")
    return (f"{'model' if mode == 'model' else 'ours'} | {1 - vs_int8:.1e} | {1 - vs_float:.1e} | "
            f"{'yes' if exact else 'NO'} | {placement.mac_share:.1%} | {host_ops}")


def main() -> int:
    import onnx_models

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default=",".join(onnx_models.FAMILIES), help="comma-separated")
    parser.add_argument("--write", action="store_true", help="write the table into docs/networks.md and "
                        "docs/benchmarks.md (between the qdq table markers)")
    args = parser.parse_args()
    head = header("bench/qdq_scales.py", "QDQ families (onnxruntime quantize_static): our scales vs the model's")
    print(head)
    lines = [("| family | ORT int8 vs ORT float | scales | vs ORT int8 | vs ORT float | bit-exact | MACs on VTA | "
              "host ops |"), "|---|---|---|---|---|---|---|---|"]
    print("\n".join(lines))
    for family in args.families.split(","):
        model = onnx_models.load(family)
        feeds = onnx_models.inputs(model)
        expected_float = onnx_models.onnxruntime_outputs(model, feeds)
        with tempfile.TemporaryDirectory() as tmp:
            try:
                qdq, _ = onnx_models.onnxruntime_quantized(model, feeds, Path(tmp))
                expected_int8 = onnx_models.onnxruntime_outputs(qdq, feeds)
            except Exception as e:   # noqa: BLE001 - onnxruntime's own refusal, reported in the table
                lines.append(f"| {family} | onnxruntime could not quantize it: {str(e).splitlines()[0][:80]} |")
                print(lines[-1])
                continue
        from graph_pack.calibration import cosine
        base = min(cosine(a, b) for a, b in zip(expected_int8, expected_float, strict=True))
        for mode in MODES:
            try:
                cells = run_mode(qdq, feeds, mode, expected_int8, expected_float)
            except Exception as e:   # noqa: BLE001 - a refusal is a row of the table, not the end of the bench
                cells = f"{mode} | no: {type(e).__name__}: {str(e).splitlines()[0][:100]} | | | | |"
            lines.append(f"| {family} | {1 - base:.1e} | {cells} |")
            print(lines[-1], flush=True)
    if args.write:
        stamped = "\n".join(f"`{line.removeprefix('# ')}`  " for line in head.splitlines())
        for path in DOCS:
            write_between_markers(path, f"{stamped}\n\n" + "\n".join(lines), MARKS)
        print(f"wrote the table into {', '.join(str(p.relative_to(ROOT)) for p in DOCS)}")
    return 0


if __name__ == "__main__":
    run_main(main)
