"""The model families of tests/data/onnx run as ``vta run MODEL.onnx`` runs them, with no region flags: the share of
the convolution / dense multiply-adds on the accelerator, the quantized output against onnxruntime's float output,
and the time (issue 40's acceptance: >= 90 % of the MACs and cosine >= 0.99 for the CNNs; >= 80 % of all MACs and
cosine >= 0.98 for the transformer encoders).

Each model is the default export (``<family>.onnx``, and the ViT variants) with its stripped weights refilled from
the tests' seeded generator (``tests/onnx_models.py``) and the tests' seeded input. The pipeline is ``vta run``'s
on the pynq preset: ``from_onnx``, ``quantize`` with its defaults (percentile calibration on the run's own input,
per-channel weight scales where ``auto`` puts them, every convolution quantized: ``--skip-conv``'s default with
regions found automatically), ``graph_pack`` with no names (regions found automatically), ``vta run``'s ``--dense``
default (the transformers' dense layers and attention's products quantized for the accelerator, the CNNs' classifier
heads float), ``build`` on the C simulator, one inference; then again with ``--skip-conv 0`` (VTA's convention: the
stem in float on the host). "MACs executed" is what the GEMM core multiplies for them over the model's MACs it
offloads (channels padded to whole blocks, narrow groups block-diagonal).
MAC share is ``graph_pack.explain``'s (conv2d, conv2d_transpose, dense,
batch_matmul); "bit-exact" compares the output with the numpy reference of the same quantized graph; "sim ms" is
the simulated accelerator's time at the preset's clock (host layers not included), "wall ms" the inference's wall
time on this machine (simulation and host layers), "compile s" quantize + graph_pack + build.

    python bench/families.py [--write]    # --write: replace the tables in docs/networks.md and docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from _host import header, run_main

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))   # the test models and their seeded weights live with the tests

MARK_BEGIN, MARK_END = "<!-- families table -->", "<!-- /families table -->"
DOCS = (ROOT / "docs" / "networks.md", ROOT / "docs" / "benchmarks.md")
TRANSFORMERS = ("vit_tiny", "vit_tiny_sdpa", "vit_tiny_sdpa_opset23", "bert_tiny")
CNN_MACS, CNN_COSINE, TRANSFORMER_MACS, TRANSFORMER_COSINE = 0.90, 0.99, 0.80, 0.98


@dataclass
class Row:
    """One family's run; ``error`` is the one-line reason it did not run on the accelerator."""

    name: str
    mac_share: float = 0.0
    cosine: float = 0.0
    bit_exact: bool = False
    executed: float = 0.0   # MACs the GEMM core executes / the model's MACs it offloads
    stem_on_host: Row | None = None   # the same with --skip-conv 0 (VTA's convention: the stem in float)
    sim_ms: float = 0.0
    wall_ms: float = 0.0
    compile_s: float = 0.0
    error: str = ""

    def passes(self) -> bool:
        macs, cosine = (TRANSFORMER_MACS, TRANSFORMER_COSINE) if self.name.startswith(TRANSFORMERS) else \
            (CNN_MACS, CNN_COSINE)
        return not self.error and self.bit_exact and self.mac_share >= macs and self.cosine >= cosine

    def cells(self) -> list[str]:
        """The table's cells: this run's, then the --skip-conv 0 run's."""
        own = self._own_cells()
        return own[:2] + [f"{self.executed:.2f}x" if not self.error else "-"] + own[2:] + (
            self.stem_on_host._own_cells()[1:4] + self.stem_on_host._own_cells()[7:] if self.stem_on_host
            else ["-"] * 4)

    def _own_cells(self) -> list[str]:
        if self.error:
            return [self.name, "-", "-", "-", "-", "-", "-", f"no: {self.error}"]
        return [self.name, f"{self.mac_share:.1%}", f"{self.cosine:.5f}", "yes" if self.bit_exact else "NO",
                f"{self.sim_ms:.2f}", f"{self.wall_ms:.0f}", f"{self.compile_s:.2f}", "yes" if self.passes() else "no"]


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def run_family(name: str, model_name: str, skip_first_conv: bool = False) -> Row:
    """``model_name`` through vta run's pipeline (``skip_first_conv``: VTA's convention, the first convolution kept in
    float on the host; vta run's default with regions found automatically quantizes it)."""
    import onnx_models

    from graph_pack import build, graph_pack, quantize, run_reference
    from graph_pack.cli import calibration, quantize_dense
    from graph_pack.explain import explain
    from graph_pack.frontend_onnx import from_onnx
    from hw_config import load_config
    from simulator.core import Simulator
    from vta import Environment
    from vta.device import SimDevice

    cfg = load_config("pynq")
    env = Environment(cfg)
    model = onnx_models.load(model_name)
    feeds = onnx_models.inputs(model)
    expected = onnx_models.onnxruntime_outputs(model, feeds)
    graph, params = from_onnx(model)
    row = Row(name)
    t0 = time.perf_counter()
    try:
        mode, dataset = calibration(None, None, graph, feeds)
        qgraph, qparams = quantize(graph, params, calibrate_mode=mode, dataset=dataset,
                                   skip_dense_layer=not quantize_dense(None, None, None, graph),
                                   skip_conv_layers=[0] if skip_first_conv else [])
    except (ValueError, KeyError, TypeError) as e:
        row.error = f"quantize: {str(e).splitlines()[0][:90]}"
        return row
    packed = graph_pack(qgraph, env)
    mod = build(packed, env, qparams, device=SimDevice(cfg, Simulator(cfg)))
    row.compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    mod.run(**feeds)
    row.wall_ms = (time.perf_counter() - t0) * 1e3
    ours = [mod.get_output(i) for i in range(len(graph.outputs))]
    ref = run_reference(qgraph, qparams, feeds)
    ref = list(ref) if isinstance(ref, tuple) else [ref]
    row.bit_exact = all(np.array_equal(r, o) for r, o in zip(ref, ours, strict=True))
    row.cosine = min(cosine(o, e) for o, e in zip(ours, expected, strict=True))
    placement = explain(packed, mod.fallbacks)
    row.mac_share = placement.mac_share
    row.executed = placement.executed_macs / max(placement.accelerator_macs, 1)
    row.sim_ms = mod.stats.seconds * 1e3
    return row


def table(rows: list[Row]) -> str:
    head = ["family (seeded weights)", "MACs on VTA", "MACs executed", "cosine vs onnxruntime", "bit-exact", "sim ms",
            "wall ms", "compile s", "meets issue 40", "--skip-conv 0: MACs on VTA", "cosine", "bit-exact", "meets"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r.cells()) + " |" for r in rows]
    return "\n".join(lines)


def write_between_markers(path: Path, text: str, marks: tuple[str, str] = (MARK_BEGIN, MARK_END)) -> None:
    """Replace what lies between a table's ``marks`` (the families table's by default) in ``path`` (the markers must
    be there)."""
    begin, end = marks
    doc = path.read_text()
    if begin not in doc or end not in doc:
        raise ValueError(f"{path} has no {begin} ... {end} markers to write the table between")
    before, rest = doc.split(begin, 1)
    after = rest.split(end, 1)[1]
    path.write_text(f"{before}{begin}\n{text}\n{end}{after}")


def main() -> int:
    import onnx_models

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write the table into docs/networks.md and "
                        "docs/benchmarks.md (between the families table markers)")
    args = parser.parse_args()
    head = header("bench/families.py", "tests/data/onnx families as vta run runs them, no region flags (pynq)")
    print(head)
    rows = []
    for name in onnx_models.FAMILIES + onnx_models.VARIANTS:
        rows.append(run_family(name, name))
        if not rows[-1].error:
            rows[-1].stem_on_host = run_family(name, name, skip_first_conv=True)
        print("  " + " | ".join(rows[-1].cells()), flush=True)
    text = table(rows)
    print(text)
    if args.write:
        stamped = "\n".join(f"`{line.removeprefix('# ')}`  " for line in head.splitlines()) + "\n\n" + text
        for path in DOCS:
            write_between_markers(path, stamped)
        print(f"wrote the table into {', '.join(str(p.relative_to(ROOT)) for p in DOCS)}")
    return 0


if __name__ == "__main__":
    run_main(main)
