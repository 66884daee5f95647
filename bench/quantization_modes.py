"""How the quantization modes hold on the zoo's networks: cosine similarity of the quantized network's output with
the float network's (both our numpy references), for VTA's global scale, max and percentile calibration, and
per-tensor against per-channel weight scales.

Each model is built at its default image size with batch 1; one seeded random input calibrates the ranges and is
compared ("same"), a second one is held out ("held-out"). The zoo's weights are random (its batch norms set to give
unit-variance activations, which suits the global scale's +-8), so the figures describe these networks, not
trained ones; docs/networks.md ("Quantization") quotes them.

    python bench/quantization_modes.py [--models resnet-18,resnet-50] [--image-size 224]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from graph_pack import quantization_report, quantize, zoo
from graph_pack.quantize import MODES


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet-18,resnet-50", help="zoo models, comma-separated")
    parser.add_argument("--image-size", type=int, default=None, help="input height = width (default: the model's)")
    parser.add_argument("--per-channel", default="auto", choices=("auto", "all", "none"))
    args = parser.parse_args()
    print(f"{'model':22} {'mode':13} {'same':>8} {'held-out':>9} {'top-1 same/held-out':>20}  seconds")
    for model in args.models.split(","):
        shape = None if args.image_size is None else (3, args.image_size, args.image_size)
        graph, params = zoo.get_model(model, batch_size=1, image_shape=shape)
        name = graph.inputs[0]
        rng = np.random.default_rng(0)
        same, held_out = ([{name: rng.standard_normal(graph[name].shape).astype(np.float32)}] for _ in range(2))
        for mode in (m for m in MODES if m != "model"):   # the zoo's float graphs carry no scales of their own
            t0 = time.perf_counter()
            qgraph, qparams = quantize(graph, params, calibrate_mode=mode, dataset=same, per_channel=args.per_channel)
            reports = [quantization_report(graph, params, qgraph, qparams, data, mode) for data in (same, held_out)]
            top1 = "/".join("yes" if r.top1 == 1.0 else "no" if r.top1 is not None else "-" for r in reports)
            print(f"{model:22} {mode:13} {reports[0].cosine:8.4f} {reports[1].cosine:9.4f} {top1:>20}  "
                  f"{time.perf_counter() - t0:.1f}", flush=True)


if __name__ == "__main__":
    main()
