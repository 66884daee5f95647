"""Python per accelerator group in one ResNet-18 inference: the module's groups run in batches (graph_pack.batched,
one simulator call per stretch of groups) against the same build run group by group (a ``write`` and a ``run``
per group, as before issue 44's item 4), in alternating rounds.

Times are this thread's CPU time (``time.thread_time``), not wall time, so that the other processes of a loaded
machine do not count: per run, the CPU time outside the simulator's C calls and outside the host steps, divided
by the number of groups (what remains is the Python around the groups, plus reading the inputs and outputs).

    python bench/group_overhead.py [--config pynq] [--rounds 15]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from _host import header, run_main

import simulator.batch
import simulator.core
from graph_pack import zoo
from graph_pack.build import AccelStep, build
from graph_pack.pack import graph_pack
from graph_pack.quantize import quantize
from hw_config import load_config


class _TimedLib:
    """The C library with the CPU time of its run calls added up in ``self.seconds``."""

    def __init__(self, lib):
        self._lib, self.seconds = lib, 0.0

    def __getattr__(self, name):
        fn = getattr(self._lib, name)
        if name not in ("vta_sim_run", "vta_sim_run_batch"):
            return fn

        def timed(*args):
            t0 = time.thread_time()
            try:
                return fn(*args)
            finally:
                self.seconds += time.thread_time() - t0
        return timed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="pynq", help="preset name or JSON path (default: pynq)")
    ap.add_argument("--rounds", type=int, default=15, help="alternating rounds (median reported)")
    args = ap.parse_args()
    cfg = load_config(args.config)
    graph, params = zoo.get_model("resnet-18", batch_size=cfg.BATCH)
    start, stop = zoo.pack_points("resnet-18")
    qgraph, qparams = quantize(graph, params, global_scale=8.0, skip_conv_layers=[0])
    packed = graph_pack(qgraph, cfg, start_name=start, stop_name=stop)
    x = np.random.default_rng(0).standard_normal(graph["data"].shape).astype(np.float32)
    batched, alone = build(packed, cfg, qparams), build(packed, cfg, qparams)
    alone._plan = list(alone.steps)   # every group on its own
    groups = sum(isinstance(s, AccelStep) for s in batched.steps)
    timed = _TimedLib(simulator.core.lib)
    simulator.core.lib = simulator.batch.lib = timed
    per_group: dict[str, list[float]] = {"batches": [], "group by group": []}
    perf_counter = time.perf_counter
    time.perf_counter = time.thread_time   # the module's host-step timer too: CPU time
    try:
        for mod in (batched, alone):
            mod.run(data=x)   # warm-up, plans
        for _ in range(args.rounds):
            for name, mod in (("batches", batched), ("group by group", alone)):
                timed.seconds = 0.0
                t0 = time.thread_time()
                mod.run(data=x)
                total = time.thread_time() - t0
                per_group[name].append((total - timed.seconds - mod.host_seconds) / groups)
    finally:
        time.perf_counter = perf_counter
        simulator.core.lib = simulator.batch.lib = timed._lib
    assert np.array_equal(batched.get_output(0), alone.get_output(0)) and batched.stats == alone.stats
    calls = sum(1 for s in batched._plan if not hasattr(s, "fn"))
    print(header("group_overhead", f"ResNet-18 on {cfg.model}: Python per accelerator group, CPU time"))
    print(f"{groups} accelerator groups; in batches: {calls} simulator calls per inference (group by group: "
          f"{groups}); same outputs and stats: yes")
    print("| run | Python per group, median (min) of the rounds |")
    print("|---|---|")
    for name, values in per_group.items():
        print(f"| {name} | {statistics.median(values) * 1e6:.1f} us ({min(values) * 1e6:.1f} us) |")


if __name__ == "__main__":
    run_main(main)
