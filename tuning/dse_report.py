"""The co-design search's page (``vta dse``'s report.html): the Pareto front of latency against the part's
resources, where the base config stands, what each axis buys, and the front's configs. Self-contained HTML with
inline SVG (graph_pack.svg): no extra, no script, nothing fetched."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from graph_pack.svg import PALETTE, Axis, Chart, esc, legend, page

if TYPE_CHECKING:
    from tuning.dse import Outcome

COST_LABELS = {"cost": "mean share of the part (LUT, FF, block RAM, DSP)", "lut": "LUT share", "ff": "FF share",
               "bram36": "block RAM share", "dsp": "DSP share"}
FRONT_COLOR, BASE_COLOR, BEST_COLOR, OTHER_COLOR = PALETTE[0], PALETTE[2], PALETTE[4], "#bbbbbb"


def _point_text(point: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in point.items())


def _share(r: dict, cost: str) -> float:
    return r["cost"] if cost == "cost" else r["usage"][cost]


def base_and_best(outcome: Outcome) -> tuple[dict | None, dict | None]:
    """The base config's record, and the fastest config that fits the part (None where there is none)."""
    from tuning.dse import point_key
    ok = outcome.of_status("ok")
    base_key = point_key(outcome.base_point) if outcome.base_point else None
    base = next((r for r in outcome.records if base_key and point_key(r["point"]) == base_key), None)
    best = min(ok, key=lambda r: r["latency_ms"], default=None)
    return base, best


def front_chart(outcome: Outcome, cost: str, width: int = 900, height: int = 420) -> str:
    from tuning.dse import pareto_front
    ok = outcome.of_status("ok")
    if not ok:
        return '<p class="note">No point ran: nothing to draw.</p>'
    front = pareto_front(ok, cost)
    base, best = base_and_best(outcome)
    xs = [_share(r, cost) for r in ok]
    ys = [r["latency_ms"] for r in ok]
    chart = Chart(width, height, Axis(0, max(1.0, max(xs)) * 1.05, COST_LABELS[cost]),
                  Axis(min(ys) * 0.9, max(ys) * 1.05, "ms per inference", log=True),
                  f"Latency against {COST_LABELS[cost]}: {len(ok)} configs, {len(front)} on the front")
    chart.line([1.0, 1.0], [chart.y.lo, chart.y.hi], "#a33", 1, title="the part's capacity")
    for r, x, y in zip(ok, xs, ys, strict=True):
        chart.point(x, y, OTHER_COLOR, 3, f"{_point_text(r['point'])}: {y:.3f} ms, {x:.1%}", css="config")
    chart.line([_share(r, cost) for r in front], [r["latency_ms"] for r in front], FRONT_COLOR, 1.5, step=True)
    for r in front:
        chart.point(_share(r, cost), r["latency_ms"], FRONT_COLOR, 4.5,
                    f"front: {_point_text(r['point'])}: {r['latency_ms']:.3f} ms, {_share(r, cost):.1%}", css="front")
    for r, color, what in ((base, BASE_COLOR, "base config"), (best, BEST_COLOR, "fastest that fits")):
        if r is not None and r.get("status") == "ok":
            chart.point(_share(r, cost), r["latency_ms"], color, 6.5,
                        f"{what}: {_point_text(r['point'])}: {r['latency_ms']:.3f} ms", css="marked")
    return chart.svg()


def table(head: list[str], rows: list[list[str]]) -> str:
    """An HTML table: the first column text, the others numbers (right-aligned); a row of one cell spans all."""
    def cells(row: list[str], tag: str) -> str:
        if len(row) == 1:
            return f'<{tag} colspan={len(head)} class=note>{row[0]}</{tag}>'
        return "".join(f"<{tag}{'' if i == 0 else ' class=num'}>{c}</{tag}>" for i, c in enumerate(row))
    return ("<table><tr>" + cells(head, "th") + "</tr>" + "".join(f"<tr>{cells(r, 'td')}</tr>" for r in rows)
            + "</table>")


def axis_table(outcome: Outcome) -> str:
    """Per axis and value: the fastest config with that value, and the cheapest (what each axis buys)."""
    ok = outcome.of_status("ok")
    rows = []
    for axis in outcome.space:
        for value in outcome.space[axis]:
            mine = [r for r in ok if r["point"].get(axis) == value]
            if not mine:
                rows.append([f"{esc(axis)}={value}: no config ran"])
                continue
            fast = min(mine, key=lambda r: r["latency_ms"])
            cheap = min(mine, key=lambda r: r["cost"])
            rows.append([f"{esc(axis)}={value}", str(len(mine)), f"{fast['latency_ms']:.3f}", f"{fast['cost']:.1%}",
                         f"{cheap['cost']:.1%}"])
    return table(["axis = value", "configs run", "fastest (ms)", "its share of the part", "cheapest share"], rows)


def front_table(outcome: Outcome) -> str:
    rows = []
    for i, r in enumerate(outcome.front):
        res = r["resources"]
        rows.append([f"front/{i:02d}.json ({esc(r.get('name', r.get('model', '')))}): {esc(_point_text(r['point']))}",
                     f"{r['latency_ms']:.3f}",
                     f"{r['accel_ms']:.3f}", f"{r['host_ms']:.2f}", f"{res['lut']:,.0f}", f"{res['ff']:,.0f}",
                     f"{res['bram36']:g}", f"{res['dsp']:,.0f}", f"{r['cost']:.1%}"])
    return table(["file (name): config (axes)", "ms", "accelerator ms (simulated)",
                  "host ms (measured: the fastest run of its host work)", "LUT", "FF", "BRAM36", "DSP", "share"], rows)


def verdict(outcome: Outcome) -> str:
    """Where the base config stands, and a faster config within the same part, or why there is none."""
    base, best = base_and_best(outcome)
    part = outcome.search.part
    if base is None or base.get("status") != "ok":
        why = base.get("reason", base.get("status")) if base else "not in the records"
        return f"<p class=warn>The base config {esc(outcome.search.base)} did not run: {esc(why)}.</p>"
    text = (f"<p>The base config <b>{esc(outcome.search.base)}</b> ({esc(_point_text(base['point']))}): "
            f"{base['latency_ms']:.3f} ms per inference, {base['cost']:.1%} of {esc(part)}.")
    if best is not None and best["latency_ms"] < base["latency_ms"]:
        text += (f" The fastest config that fits {esc(part)}, <b>{esc(_point_text(best['point']))}</b>, takes "
                 f"{best['latency_ms']:.3f} ms ({base['latency_ms'] / best['latency_ms']:.2f}x faster) using "
                 f"{best['cost']:.1%} of the part.</p>")
    else:
        text += " No config of the space that fits the part is faster.</p>"
    return text


def render(outcome: Outcome) -> str:
    from hardware.fpga.report import LABEL
    s = outcome.search
    statuses = ("ok", "does-not-fit", "invalid", "failed") + (("clock-not-met",) if s.timing else ())
    counts = {k: len(outcome.of_status(k)) for k in statuses}
    trials = sum(r.get("trials", 0) for r in outcome.records)
    slow = (f"{counts['clock-not-met']} miss their CLOCK_MHZ on logic delay alone (Yosys sta, no routing: not "
            "tuned, no latency given), " if s.timing else "")
    summary = (f"<p>Network <b>{esc(s.network)}</b>, base config <b>{esc(s.base)}</b>, part <b>{esc(s.part)}</b>; "
               f"{len(outcome.records)} points: {counts['ok']} tuned and timed, {counts['does-not-fit']} do not fit, "
               f"{slow}"
               f"{counts['invalid']} not encodable in VTA's ISA, {counts['failed']} failed. Each task tuned over "
               f"its template's default and the {s.trials} configs its analytic estimate ranks best, measured on "
               f"the simulator: {trials:,} measurements. Latency: the accelerator's simulated cycles (shared-bus "
               f"timing model) at the config's clock, no board model (it is calibrated for one design), plus the "
               f"host part measured on this CPU (the fastest run of the same host work in the search; the progress "
               f"lines gave each config's own run).</p>"
               f"<p class=note>Resources: the analytic model fitted to Yosys synth_xilinx ({esc(LABEL)}).</p>")
    sections = ["<h2>Summary</h2>", summary, verdict(outcome),
                legend([(FRONT_COLOR, "Pareto front"), (BASE_COLOR, f"base config ({s.base})"),
                        (BEST_COLOR, "fastest config that fits"), (OTHER_COLOR, "other configs")]),
                "<h2>The front</h2>", front_chart(outcome, "cost")]
    panels = "".join(front_chart(outcome, c, 440, 300) for c in ("lut", "ff", "bram36", "dsp"))
    sections += ["<h2>Against each resource</h2>", f"<div>{panels}</div>",
                 "<h2>What each axis buys</h2>", axis_table(outcome),
                 "<h2>The front's configs</h2>", front_table(outcome)]
    base, best = base_and_best(outcome)
    data = json.dumps({"search": s.__dict__, "front": outcome.front, "base": base, "best": best, "counts": counts})
    return page(f"Co-design search: {s.network} on {s.part}", sections, data)
