"""The co-design search (`vta dse`) checked and timed, from a finished search directory:

- **schedules**: on a sample of the front's configs, the network's accelerator cycles with the search's schedules
  (each task: its default and the few configs the analytic estimate ranks best) against a long XGB tuning run of
  every task (``--long-trials`` per task, timing only, the board model neutral so both minimise cycles);
- **Yosys**: the same sample synthesised (``synth_xilinx``, cached by config; minutes each) and checked to fit;
- **scaling**: the search of the first ``--scaling`` points of the space on a Dask LocalCluster of 1, then 2
  worker processes, wall time of each.

    vta dse resnet-18 --part xc7z020 --out dse        # first: the search itself (its time is printed)
    python bench/dse.py --out dse [--sample 3] [--long-trials 64] [--yosys 2] [--scaling 16]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from _host import header, run_main  # bench/_host.py, imported while this directory is still on the path

# bench/tuning.py shares its name with the package: keep this directory off the import path
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

from graph_pack.build import build
from graph_pack.pack import graph_pack
from hardware.fpga import estimate
from hw_config import load_config
from hw_config.config import LATENCY_NEUTRAL
from tuning.dse import (
    FRONT,
    RECORDS,
    Search,
    _network,
    pareto_front,
    point_key,
    points_of,
    read_records,
    run_search,
    share_host_time,
)
from tuning.measure import LocalRunner
from tuning.task import extract_tasks
from tuning.tune import tune_tasks


def sample(front: list[dict], n: int) -> list[dict]:
    """``n`` records spread evenly over the front, its cheapest and fastest among them."""
    if n <= 0:
        return []
    if len(front) <= n:
        return front
    return [front[round(i * (len(front) - 1) / (n - 1))] for i in range(n)] if n > 1 else [front[-1]]


def network_cycles(search: Search, cfg, schedules: dict) -> int:
    graph, qgraph, qparams, (start, stop), x = _network(search, cfg.BATCH)
    packed = graph_pack(qgraph, cfg, start_name=start, stop_name=stop)
    mod = build(packed, cfg, qparams, schedules, fallback="allow")
    mod.run(compute=False, **{graph.inputs[0]: x})
    return mod.cycles


def long_tuning(search: Search, rec: dict, trials: int) -> tuple[int, int, float]:
    """(the search's network cycles, a long XGB run's, the long run's seconds) for one record."""
    cfg = load_config(search.base, **rec["point"], **LATENCY_NEUTRAL)
    _, qgraph, _, (start, stop), _ = _network(search, cfg.BATCH)
    packed = graph_pack(qgraph, cfg, start_name=start, stop_name=stop)
    tasks = extract_tasks(packed, cfg)
    by_name = {row["task"]: row["config"] for row in rec["tasks"]}
    ours = network_cycles(search, cfg, {t.key: by_name[t.name] for t in tasks})
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, LocalRunner(n_parallel=2, check=False, timing_only=True) as runner:
        summary = tune_tasks(tasks, tuner="xgb", n_trial=trials, runner=runner, log=Path(tmp) / "long.jsonl",
                             strategy="sequential", out=io.StringIO())
    took = time.perf_counter() - t0
    return ours, network_cycles(search, cfg, summary.best_configs()), took


def scaling(search: Search, points: list[dict]) -> list[tuple[int, float]]:
    import dask
    import distributed
    out = []
    for workers in (1, 2):
        # forked workers: a spawned one would import this script again, without the bench directory on its path
        with dask.config.set({"distributed.worker.multiprocessing-method": "fork"}), \
                distributed.LocalCluster(processes=True, n_workers=workers, threads_per_worker=1,
                                         dashboard_address=":0") as cluster, tempfile.TemporaryDirectory() as tmp:
            space = {k: sorted({p[k] for p in points}) for k in points[0]}
            t0 = time.perf_counter()
            run_search(search, space, tmp, dask=cluster.scheduler_address)
            out.append((workers, time.perf_counter() - t0))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="a directory `vta dse` wrote")
    ap.add_argument("--sample", type=int, default=3, help="front configs to check against long tuning (default 3)")
    ap.add_argument("--long-trials", type=int, default=64, help="XGB trials per task of the long run (default 64)")
    ap.add_argument("--yosys", type=int, default=2, help="front configs to synthesise (default 2; 0: none)")
    ap.add_argument("--scaling", type=int, default=16, help="points for the 1 vs 2 Dask workers run (0: none)")
    args = ap.parse_args()
    # the optional packages of the parts asked for, checked before the first, long part (run_main names the pip
    # command of a missing extra)
    if args.sample > 0:
        import xgboost  # noqa: F401
    if args.scaling > 0:
        import dask  # noqa: F401
        import distributed  # noqa: F401
    directory = Path(args.out)
    saved = json.loads((directory / FRONT).read_text())
    search = Search(**saved["search"])
    records = list(read_records(directory / RECORDS, search).values())
    # the front as `vta dse` computes it (tuning.dse.run_search): host times shared between configs of the same
    # host work before the front is taken
    front = pareto_front(share_host_time(records))
    print(header("dse", f"the co-design search of {search.network} on {search.part} in {directory}"))
    print(f"{len(records)} records, {sum(r['status'] == 'ok' for r in records)} timed, front of {len(front)}; "
          f"search wall time {sum(r.get('wall_s', 0) for r in records):.0f} s of worker time")
    if [point_key(r["point"]) for r in front] != [point_key(r["point"]) for r in saved.get("front", [])]:
        print(f"note: {directory / FRONT} has another front ({len(saved.get('front', []))} configs): its search "
              f"covered a part of the {len(records)} records only (a later search into the same --out?)")

    picked = sample(front, args.sample)
    if picked:
        print(f"\nthe search's schedules against XGB with {args.long_trials} trials per task (network cycles):")
        print("| config | search | long run | search / long | long run s |\n|---|---|---|---|---|")
    for rec in picked:
        ours, long_run, took = long_tuning(search, rec, args.long_trials)
        text = ", ".join(f"{k}={v}" for k, v in rec["point"].items())
        print(f"| {text} | {ours:,} | {long_run:,} | {ours / long_run:.3f} | {took:.0f} |", flush=True)

    if args.yosys and front:
        print("\nYosys synth_xilinx of front configs (cached by config):")
        print("| config | LUT | FF | BRAM36 | DSP | fits | analytic fits | s |\n|---|---|---|---|---|---|---|---|")
        for rec in sample(front, args.yosys):
            cfg = load_config(search.base, **rec["point"])
            t0 = time.perf_counter()
            rep = estimate(cfg, part=search.part, synth=True)
            t = rep.total
            text = ", ".join(f"{k}={v}" for k, v in rec["point"].items())
            print(f"| {text} | {t.lut:,.0f} | {t.ff:,.0f} | {t.bram:g} | {t.dsp:,.0f} | {rep.fits} | {rec['fits']} | "
                  f"{time.perf_counter() - t0:.0f} |", flush=True)

    ok = [r["point"] for r in records if r["status"] == "ok"][:args.scaling]
    if args.scaling and ok:
        grid = points_of({k: sorted({p[k] for p in ok}) for k in ok[0]})
        print(f"\nDask LocalCluster, the search of {len(grid)} points (the smallest grid over the first "
              f"{len(ok)} timed configs):")
        for workers, seconds in scaling(search, ok):
            print(f"  {workers} worker(s): {seconds:.0f} s")


if __name__ == "__main__":
    run_main(main)
