"""``vta tune MODEL --plot FILE.html``: the tuning curves of a record log, as one self-contained page.

Drawn from the log alone (so a finished log is drawn again by rerunning its command: nothing is measured twice),
for the records of one hardware config and template version: per task, every trial's time in log order and the
best so far (AutoTVM's tuning curve); for the network, the weighted sum of the tasks' best times against all
trials, once every task has one. Times are what the tuners minimise: board time (the config's board model, or
measured), else cycles at the clock. Inline SVG from ``graph_pack.svg``: no extra, nothing fetched.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from graph_pack.schedule_log import record_rank, workload_name
from graph_pack.svg import PALETTE, Axis, Chart, esc, page, write_page
from hw_config import HwConfig
from tuning.records import load_records
from tuning.task import Task
from vta.templates import TEMPLATE_VERSION

PANEL = (350, 220)   # pixels of one task's picture; three to a row
TUNER_COLORS = {"xgb": "#4e79a7", "random": "#f28e2b", "gridsearch": "#59a14f", "ga": "#b07aa1", "xgb_rank": "#76b7b2",
                "auto": "#e15759"}


def _tuner_colors(names) -> dict[str, str]:
    """A colour per tuner, the same on every page; others (and "?" for older logs) take the palette's rest."""
    rest = iter(c for c in PALETTE if c not in TUNER_COLORS.values())
    return {name: TUNER_COLORS.get(name) or next(rest, "#999") for name in sorted(names)}


def _seconds(result: dict[str, Any], cfg: HwConfig) -> float | None:
    rank = record_rank(result)
    if rank is None:
        return None
    return rank[1] if rank[0] == 0 else rank[1] / (cfg.CLOCK_MHZ * 1e6)


def tuning_curves(log: str | os.PathLike, cfg: HwConfig, tasks: Sequence[Task] | None = None) -> dict[str, Any]:
    """The figures of the page (JSON-able): per task (``tasks``' order and weights, else the log's order with
    weight 1) its trials' seconds (None for a failed trial) and tuners, and the network's weighted best
    against the log's trial count."""
    template = tasks[0].template_version if tasks else TEMPLATE_VERSION   # a host task's records: its own version
    records = load_records(log, cfg=cfg, template=template)
    order = [t.key for t in tasks] if tasks is not None else list(dict.fromkeys(r.workload for r in records))
    weight = {t.key: t.weight for t in tasks} if tasks is not None else dict.fromkeys(order, 1)
    names = {t.key: t.name for t in tasks or ()}
    curves: dict[str, dict[str, Any]] = {}
    for key in order:
        name = names.get(key) or workload_name(json.loads(key))
        curves[key] = {"key": key, "name": name, "weight": weight[key], "seconds": [], "tuners": [], "best": []}
    network: list[list[float]] = []
    best: dict[str, float] = {}
    for n, r in enumerate(records, 1):
        c = curves.get(r.workload)
        if c is None:
            continue
        s = _seconds(r.result, cfg)
        c["seconds"].append(s)
        c["tuners"].append(r.tuner or "?")
        if s is not None and s < best.get(r.workload, float("inf")):
            best[r.workload] = s
        c["best"].append(best.get(r.workload))
        if len(best) == len(curves):
            network.append([n, sum(curves[k]["weight"] * best[k] for k in curves)])
    return {"log": os.fspath(log), "config": cfg.model, "records": len(records), "tasks": list(curves.values()),
            "network": network}


def _network_chart(d: dict[str, Any]) -> str:
    pts = d["network"]
    if not pts:
        return '<p class="note">No network curve: not every task has a successful trial in the log yet.</p>'
    xs, ys = [p[0] for p in pts], [p[1] * 1e3 for p in pts]
    lo, hi = min(ys), max(ys)
    chart = Chart(900, 300, Axis(0, max(xs[-1], 1), "trials in the log (all tasks, in the order measured)"),
                  Axis(lo - 0.05 * (hi - lo or hi), hi + 0.15 * (hi - lo or hi), "ms"),
                  "The network: sum over tasks of weight x best time so far")
    chart.line(xs, ys, PALETTE[0], 2, step=True, title=f"{ys[0]:.3f} ms -> {ys[-1]:.3f} ms")
    chart.text(chart.x.hi, chart.y.hi, f"{ys[0]:.3f} ms -> {ys[-1]:.3f} ms ({ys[0] / ys[-1]:.2f}x)", anchor="end",
               dx=-6, dy=14)
    return chart.svg()


def _task_chart(i: int, t: dict[str, Any], color: dict[str, str]) -> str:
    ok = [(n, s * 1e3) for n, s in enumerate(t["seconds"], 1) if s is not None]
    failed = len(t["seconds"]) - len(ok)
    title = f"#{i} {t['name']}"
    if not ok:
        return f'<p class="note">{esc(title)}: no successful trial ({failed} failed)</p>'
    values = [ms for _, ms in ok]
    lo, hi = min(values) / 1.1, max(values) * 1.25   # room above for the caption
    chart = Chart(*PANEL, Axis(0.5, len(t["seconds"]) + 0.5, "trial"), Axis(lo, hi, "ms", log=True), title,
                  margin=(50, 10, 26, 38), title_size=10)
    for n, ms in ok:
        chart.point(n, ms, color[t["tuners"][n - 1]], 2.5, f"trial {n} ({t['tuners'][n - 1]}): {ms:.4f} ms",
                    css="trial", opacity=0.6)
    steps = [(n, b * 1e3) for n, b in enumerate(t["best"], 1) if b is not None]
    chart.line([n for n, _ in steps] + [len(t["best"])], [b for _, b in steps] + [steps[-1][1]], "#222", 1.5,
               step=True, title=f"best {steps[-1][1]:.4f} ms")
    first, best = ok[0][1], steps[-1][1]
    chart.text(len(t["best"]) + 0.5, hi, f"{first:.3g} -> {best:.3g} ms ({first / best:.2f}x), weight {t['weight']}"
               + (f", {failed} failed" if failed else ""), anchor="end", size=10, dy=12)
    return chart.svg()


def render_tuning(d: dict[str, Any]) -> str:
    tuner_colors = _tuner_colors({n for t in d["tasks"] for n in t["tuners"]})
    colors = " ".join(f'<span style="color:{color}">&#9679; {esc(name)}</span>' for name, color in tuner_colors.items())
    intro = (f'<p class="note">{d["records"]} record(s) of {esc(d["config"])} in {esc(d["log"])}, {len(d["tasks"])} '
             "task(s). Times are what the tuners minimise: one call on the board (the config's board model, or "
             "measured), else cycles at the clock. A point is one trial, coloured by the tuner that proposed it "
             f"({colors}); the black step line is the best so far.</p>")
    panels = "".join(f'<div style="display:inline-block">{_task_chart(i, t, tuner_colors)}</div>'
                     for i, t in enumerate(d["tasks"], 1))
    return page(f"Tuning: {d['log']}", [intro, "<h2>Network</h2>", _network_chart(d), "<h2>Tasks</h2>", panels],
                json.dumps(d, sort_keys=True))


def write_tuning_plot(path: str | os.PathLike, log: str | os.PathLike, cfg: HwConfig,
                      tasks: Sequence[Task] | None = None) -> dict[str, Any]:
    """Write the page of ``log``'s tuning curves to ``path`` (whole or not at all); returns its figures."""
    data = tuning_curves(log, cfg, tasks)
    write_page(path, render_tuning(data))
    return data
