"""One simulated ResNet-18 inference, this checkout against other revisions in the same run (CPU time).

Each side runs in a subprocess importing its own checkout (``--reference`` revisions are checked out in temporary
git worktrees and built there, bench/_revisions.py), in alternating rounds; a side builds the network as
bench/network.py does (VTA's ResNet-18 convention: global scale 8, the stem on the host) and times ``--repeat``
inferences by the process's CPU time with one GEMM thread (``VTA_SIM_THREADS=1``), so other processes on a shared
machine add less than to wall time (cache and memory contention remain: compare sides of one run only). Each side
prints the output's digest and the simulated cycles: they must agree between revisions that share a timing model.

    python bench/sim_revisions.py --reference c3c9d13 [REV ...] [--rounds 3] [--repeat 7]

What it is for: a regression of the simulator's speed found by a bisection (docs/benchmarks.md, "The output
buffer's reset path") and its fix, measured side by side.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from _host import header, run_main
from _onnx_export import to_onnx
from _revisions import checkouts, run_in


def measure(repeat: int) -> dict:
    """In a side's subprocess: CPU seconds of ``repeat`` inferences, the output's digest, the cycles."""
    import hashlib
    import time

    import numpy as np

    import vta
    from graph_pack import zoo
    from graph_pack.build import build
    from graph_pack.frontend_onnx import from_onnx
    from graph_pack.pack import graph_pack
    from graph_pack.quantize import quantize
    from hw_config import load_config

    cfg = load_config("pynq")
    zoo_graph, zoo_params = zoo.get_model("resnet-18", batch_size=cfg.BATCH)
    graph, params = from_onnx(to_onnx(zoo_graph, zoo_params))
    start, stop = zoo.pack_points("resnet-18")
    x = np.random.default_rng(0).standard_normal(graph["data"].shape).astype(np.float32)
    qgraph, qparams = quantize(graph, params, global_scale=8.0, skip_conv_layers=[0])
    mod = build(graph_pack(qgraph, cfg, start_name=start, stop_name=stop), cfg, qparams, cpu="auto")
    mod.run(data=x)   # warm-up
    seconds = []
    for _ in range(repeat):
        t0 = time.process_time()
        mod.run(data=x)
        seconds.append(time.process_time() - t0)
    stats = mod.stats
    return {"seconds": seconds, "digest": hashlib.sha256(mod.get_output(0).tobytes()).hexdigest()[:16],
            "cycles": int(stats.cycles) if stats else 0, "vta": vta.__file__}


def run_side(checkout: Path, repeat: int) -> dict:
    return run_in(checkout, "sim_revisions", f"measure({repeat})", {"VTA_SIM_THREADS": "1"})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reference", nargs="+", required=True, metavar="REV", help="revisions to compare with")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds per side (default 3)")
    ap.add_argument("--repeat", type=int, default=7, help="inferences timed per round (default 7)")
    args = ap.parse_args()
    if args.rounds < 1 or args.repeat < 1:
        ap.error("--rounds and --repeat must be at least 1")
    print(header("sim_revisions", f"one simulated ResNet-18 inference, this checkout vs {', '.join(args.reference)}"))
    with checkouts(args.reference) as sides:
        runs: dict[str, list[dict]] = {side: [] for side in sides}
        for _ in range(args.rounds):
            for side, path in sides.items():
                runs[side].append(run_side(path, args.repeat))
    now = statistics.median(s for r in runs["now"] for s in r["seconds"])
    print("| side | CPU ms per inference, median (min) | ratio to this checkout | output digest | cycles |")
    print("|---|---|---|---|---|")
    for side, rs in runs.items():
        seconds = [s for r in rs for s in r["seconds"]]
        median = statistics.median(seconds)
        print(f"| {side} | {median * 1e3:.1f} ({min(seconds) * 1e3:.1f}) | {median / now:.2f}x | "
              f"{', '.join(sorted({r['digest'] for r in rs}))} | {', '.join(sorted({str(r['cycles']) for r in rs}))} |")


if __name__ == "__main__":
    run_main(main)
