"""``vta run MODEL --report FILE.html``: one self-contained page about a network's last run.

What it shows, all from figures the run already has (``GraphModule.records``, the simulator's per-module
counters, ``graph_pack``'s offload decisions): the summary (host vs accelerator time, cycles); a roofline of
every accelerator group (MACs per DRAM byte against attained GOPS, under the config's compute peak
``BATCH * BLOCK_IN * BLOCK_OUT`` MACs per cycle and its bus bandwidth ``BUS_BYTES`` per cycle); where each
group's cycles go per module (busy, stalled, idle); the host ops and the groups that fell back to the host, and
why; and a timeline of the load, compute and store modules, from the simulator's per-instruction trace of a
timing-only re-run of every group (timing does not depend on data). Pictures are inline SVG drawn by
``graph_pack.svg``: no extra, no script, nothing fetched. The figures are also embedded as JSON
(``<script type="application/json" id="data">``) for tools and tests.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from graph_pack.build import AccelStep, GraphModule
from graph_pack.graph import GraphError
from graph_pack.pack import offload_report
from graph_pack.svg import MODULE_COLORS, PALETTE, Axis, Chart, esc, legend, log_range, page, si, write_page
from simulator.stats import MODULES
from vta.device import SimDevice

MAX_TRACED_INSNS = 1 << 20   # instructions re-run with a trace for the timeline (about 100 MB of tuples at most)
TIMELINE_BINS = 500          # the whole run's utilisation: busy fraction per module in this many cycle bins
GANTT_PX = 1000              # the longest group's Gantt: bars closer than one pixel (of this width) are merged
STATE_OPACITY = {"busy": 1.0, "stall": 0.35}


# ---- the figures ------------------------------------------------------------------------------------------------

def roofs(cfg) -> dict[str, float]:
    """The roofline's ceilings for a config: compute peak (MACs/s), the bus's peak bandwidth and the bandwidth
    the timing model's bursts sustain (bytes/s: ``DMA_BURST_BEATS`` beats, then ``DMA_BURST_GAP`` idle cycles)."""
    clock = cfg.CLOCK_MHZ * 1e6
    bus = cfg.BUS_BYTES * clock
    return {"peak_macs_per_s": cfg.BATCH * cfg.BLOCK_IN * cfg.BLOCK_OUT * clock, "bus_bytes_per_s": bus,
            "burst_bytes_per_s": bus * cfg.DMA_BURST_BEATS / (cfg.DMA_BURST_BEATS + cfg.DMA_BURST_GAP)}


def mac_cycles(cfg, macs: int) -> float:
    """The cycles the GEMM core needs for ``macs`` at its peak (BATCH x BLOCK_IN x BLOCK_OUT MACs every GEMM_II
    cycles): a group's ``mac_cycles / cycles`` is its attained GOPS over the peak, the roofline's height. The
    compute module's busy cycles are these plus its other work (the ALU epilogue, accumulator resets, micro-op and
    bias loads, each instruction's pipeline fill)."""
    return macs * cfg.GEMM_II / cfg.MACS_PER_CYCLE


def _layers(module: GraphModule) -> list[dict[str, Any]]:
    rows = []
    for r in module.records:
        if r.stats is None:
            continue
        st = r.stats
        secs = st.seconds
        modules = {}
        for m in MODULES:
            stall = sum(st.stalls[m].values())
            modules[m] = {"busy": st.busy[m], "stall": stall, "idle": max(st.cycles - st.busy[m] - stall, 0),
                          "insns": st.insns[m]}
        useful = min(float(st.busy["compute"]), mac_cycles(module.cfg, r.macs))
        modules["compute"]["mac"] = useful   # of its busy cycles: the MACs at the peak rate (the rest: other work)
        rows.append({"name": r.name, "op": r.op, "cycles": st.cycles, "seconds": secs, "board_s": st.latency_s,
                     "macs": r.macs, "dram_bytes": st.dram_bytes,
                     "peak_share": useful / st.cycles if st.cycles else 0.0,
                     "intensity": r.macs / st.dram_bytes if st.dram_bytes else 0.0,
                     "gops": 2 * r.macs / secs / 1e9 if secs and r.macs else 0.0, "modules": modules})
    return rows


def _host(module: GraphModule) -> list[dict[str, Any]]:
    groups = module.graph.meta.get("groups", {})
    fell_back = {m: head for head in module.fallbacks for m in groups[head].members} if groups else {}
    rows = []
    for r in module.records:
        if r.stats is None:
            head = fell_back.get(r.name)
            rows.append({"name": r.name, "op": r.op, "seconds": r.host_seconds, "fallback_of": head,
                         "why": module.fallbacks[head].removeprefix("CPU: ") if head else ""})
    return rows


def _busy_before(starts: np.ndarray, ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Busy cycles of one module before each time ``t`` (its intervals, in order, never overlap)."""
    done = np.concatenate([[0], np.cumsum(ends - starts)])
    k = np.searchsorted(ends, t, side="right")            # intervals over by t
    nxt = np.minimum(k, len(starts) - 1)
    partial = np.where(k < len(starts), np.clip(t - starts[nxt], 0, (ends - starts)[nxt]), 0)
    return done[k] + partial


def _merged(starts: np.ndarray, ends: np.ndarray, gap: float) -> list[list[int]]:
    """[start, end, instructions] bars: intervals less than ``gap`` cycles apart drawn as one."""
    if not len(starts):
        return []
    breaks = np.flatnonzero(starts[1:] - ends[:-1] >= gap) + 1
    first = np.concatenate([[0], breaks])
    last = np.concatenate([breaks, [len(starts)]]) - 1
    return [[int(starts[a]), int(ends[b]), int(b - a + 1)] for a, b in zip(first, last, strict=True)]


def timeline(module: GraphModule, max_insns: int = MAX_TRACED_INSNS) -> dict[str, Any]:
    """Every accelerator group re-run timing-only with the simulator's trace, laid end to end as in the run:
    per module the busy fraction in ``TIMELINE_BINS`` bins of the whole run, and the longest group's
    instructions merged at ``GANTT_PX`` pixels. ``{"note": why}`` alone when there is nothing to trace."""
    steps = [s for s in module.steps if isinstance(s, AccelStep)]
    if not isinstance(module.device, SimDevice):
        return {"note": "the timeline is drawn from the simulator's trace: run with --device sim to see it"}
    if not steps:
        return {"note": "no accelerator groups ran"}
    count = sum(s.op.program.num_insns for s in steps)
    if count > max_insns:
        return {"note": f"the run has {count:,} instructions; the timeline traces at most {max_insns:,}"}
    per_module: dict[str, list[tuple[int, int]]] = {m: [] for m in MODULES}
    spans, offset = [], 0
    for step in steps:
        program = step.op.program
        start = offset
        for stream in program.streams:   # a trace is per stream; streams of a group run one after another
            st = stream.run(program.device, program.uop_buffer, compute=False, trace=True)
            for m, s, e in st.trace or ():
                per_module[m].append((offset + s, offset + e))
            offset += st.cycles
        spans.append([step.name, start, offset])
    arrays = {m: np.array(v, dtype=np.int64).reshape(-1, 2) for m, v in per_module.items()}
    bins = min(TIMELINE_BINS, offset)
    edges = np.linspace(0, offset, bins + 1)
    width = np.diff(edges)
    busy = {m: (np.diff(_busy_before(a[:, 0], a[:, 1], edges)) / width).round(4).tolist() if len(a) else
            [0.0] * bins for m, a in arrays.items()}
    name, lo, hi = max(spans, key=lambda s: s[2] - s[1])
    px = (hi - lo) / GANTT_PX
    bars = {}
    for m, a in arrays.items():
        inside = a[(a[:, 0] >= lo) & (a[:, 1] <= hi)] - lo
        bars[m] = _merged(inside[:, 0], inside[:, 1], px)
    shown = sum(len(b) for b in bars.values())
    traced = sum(len(a) for a in arrays.values())
    detail = sum(b[2] for bs in bars.values() for b in bs)
    return {"cycles": offset, "instructions": traced, "bins": bins, "busy": busy, "groups": spans,
            "detail": {"name": name, "start": lo, "cycles": hi - lo, "instructions": detail, "bars": bars,
                       "cycles_per_px": px},
            "note": (f"{traced:,} instructions traced; the whole run is shown as the busy fraction of each module "
                     f"in {bins} bins of {offset / bins:,.1f} cycles; the longest group's "
                     f"{detail:,} instructions are drawn as {shown:,} bars"
                     + (f" (instructions less than one pixel = {px:,.1f} cycles apart are merged)"
                        if shown < detail else ""))}


def report_data(module: GraphModule, model: str = "", *, device: str = "", wall_s: float | None = None,
                times: Mapping[str, float] | None = None, trace: bool = True) -> dict[str, Any]:
    """The page's figures for ``module``'s last run (JSON-able). ``device`` says where the groups ran, ``wall_s``
    is the run's wall time and ``times`` the compile steps' (as ``vta run`` prints them); ``trace=False`` skips
    the timeline's re-run."""
    if not module.records or module.stats is None:
        raise GraphError("no run to report yet: call run() first")
    cfg, st = module.cfg, module.stats
    layers = _layers(module)
    return {
        "summary": {"model": model, "config": cfg.model, "device": device or type(module.device).__name__,
                    "clock_mhz": cfg.CLOCK_MHZ, "cycles": st.cycles, "accelerator_s": st.seconds,
                    "board_s": st.latency_s, "board_figure": module.board_figure, "name": cfg.name,
                    "host_s": module.host_seconds, "wall_s": wall_s,
                    "compile_s": dict(times or {}), "groups": len(layers),
                    "host_ops": sum(r.stats is None for r in module.records), "fallbacks": dict(module.fallbacks),
                    "input_shapes": {n: list(module.graph[n].shape) for n in module.graph.inputs}},
        "roofline": {**roofs(cfg), "batch": cfg.BATCH, "block_in": cfg.BLOCK_IN, "block_out": cfg.BLOCK_OUT,
                     "bus_bytes": cfg.BUS_BYTES},
        "layers": layers,
        "host": _host(module),
        "offload": offload_report(module.graph),
        "timeline": timeline(module) if trace else {"note": "not traced"},
    }


# ---- the pictures ------------------------------------------------------------------------------------------------

def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.3f} ms"


def _summary(d: dict[str, Any]) -> str:
    s = d["summary"]
    shapes = ", ".join(f"{n} {tuple(v)}" for n, v in s["input_shapes"].items())
    compile_s = ", ".join(f"{k} {v:.2f} s" for k, v in s["compile_s"].items())
    rows = [("model", s["model"] or "-"), ("config", f"{s.get('name', s['config'])} at {s['clock_mhz']:g} MHz"),
            ("accelerator groups ran on", s["device"]), ("input", shapes),
            ("accelerator", f"{s['cycles']:,} cycles = {_ms(s['accelerator_s'])} at the clock (simulated)"
             + (f"; {_ms(s['board_s'])} on the board ({s['board_figure']})" if s.get("board_figure") else "")),
            ("host ops", f"{_ms(s['host_s'])} measured on this machine, {s['host_ops']} step(s)"),
            ("wall time of the run", _ms(s["wall_s"]) if s["wall_s"] is not None else "-"),
            ("compile", compile_s or "-"),
            ("accelerator groups", (f"{s['groups'] + len(s['fallbacks'])} planned by graph_pack: {s['groups']} ran "
                                    f"on the accelerator, {len(s['fallbacks'])} fell back to the host"))]
    body = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in rows)
    return f"<h2>Summary</h2><table>{body}</table>" + _time_split(d)


def _time_split(d: dict[str, Any]) -> str:
    """Host vs accelerator: one bar each, in milliseconds."""
    s = d["summary"]
    bars = [("accelerator (simulated)", s["accelerator_s"], MODULE_COLORS["compute"]),
            *([("accelerator (board model)" if s["board_figure"] == "predicted by the board model" else
                f"accelerator ({s['board_figure']})", s["board_s"], "#f28e2b")]
              if s.get("board_figure") else []),
            ("host ops (measured)", s["host_s"], "#76b7b2")]
    top = max(v for _, v, _ in bars) * 1e3 or 1.0
    chart = Chart(900, 40 + 28 * len(bars), Axis(0, top * 1.15, "milliseconds"),
                  Axis(0, len(bars), ticks=[(len(bars) - i - 0.5, n) for i, (n, _, _) in enumerate(bars)]),
                  "Host vs accelerator time", margin=(180, 20, 26, 40))
    for i, (name, v, color) in enumerate(bars):
        y = len(bars) - i - 0.5
        chart.rect(0, v * 1e3, y - 0.3, y + 0.3, color, f"{name}: {_ms(v)}")
        chart.text(v * 1e3, y, _ms(v), dx=4, dy=4)
    return chart.svg()


def _op_colors(layers: list[dict[str, Any]]) -> dict[str, str]:
    ops = sorted({r["op"] for r in layers})
    return {op: PALETTE[i % len(PALETTE)] for i, op in enumerate(ops)}


def _roofline(d: dict[str, Any]) -> str:
    r, layers = d["roofline"], d["layers"]
    points = [row for row in d["layers"] if row["macs"] and row["dram_bytes"]]
    peak = 2 * r["peak_macs_per_s"] / 1e9                       # GOPS, 2 ops per MAC
    ridge = r["peak_macs_per_s"] / r["bus_bytes_per_s"]         # MACs per byte where the roofs meet
    xs = [p["intensity"] for p in points] + [ridge]
    ys = [p["gops"] for p in points] + [peak]
    x_lo, x_hi = log_range(xs, 3)
    y_lo, y_hi = log_range(ys, 3)
    chart = Chart(900, 520, Axis(x_lo, x_hi, "operational intensity (MACs per byte of DRAM traffic)", log=True),
                  Axis(y_lo, y_hi, "attained GOPS (2 ops per MAC; simulated cycles at the clock)", log=True),
                  f"Roofline: {len(points)} accelerator group(s)")
    for key, dash, name in (("bus_bytes_per_s", None, "bus peak"), ("burst_bytes_per_s", "6,4", "with burst gaps")):
        bw = r[key]
        knee = r["peak_macs_per_s"] / bw
        chart.line([x_lo, knee, x_hi], [2 * x_lo * bw / 1e9, peak, peak], "#333", 1.5 if dash is None else 1.0, dash,
                   f"{name}: {si(bw)}B/s; compute peak {peak:g} GOPS")
    chart.text(x_hi, peak, f"compute peak {peak:g} GOPS ({r['batch']}x{r['block_in']}x{r['block_out']} MACs/cycle)",
               anchor="end", dy=-6)
    # the foot of the memory roof (where it enters the picture), where groups rarely are; above where the text ends
    at = 1.3 * max(x_lo, y_lo * 1e9 / (2 * r["bus_bytes_per_s"]))
    chart.text(at, 2 * at * 2.5 * r["bus_bytes_per_s"] / 1e9, f"bus {si(r['bus_bytes_per_s'])}B/s", dy=-6)
    colors = _op_colors(layers)
    numbers: list[tuple[float, float, list[str]]] = []   # points closer than a label share one: "4,10"
    for i, p in enumerate(d["layers"]):
        if p in points:
            chart.point(p["intensity"], p["gops"], colors[p["op"]], 5,
                        f"#{i + 1} {p['name']} ({p['op']}): {p['intensity']:.3g} MACs/byte, {p['gops']:.3g} GOPS, "
                        f"{p['cycles']:,} cycles", css="layer", opacity=0.85)
            x, y = p["intensity"], p["gops"]
            near = next((n for n in numbers if abs(chart.px(n[0]) - chart.px(x)) < 14
                         and abs(chart.py(n[1]) - chart.py(y)) < 10), None)
            if near is None:
                numbers.append((x, y, [str(i + 1)]))
            else:
                near[2].append(str(i + 1))
    for x, y, names in numbers:
        chart.text(x, y, ",".join(names) if len(names) <= 4 else f"{','.join(names[:3])}+{len(names) - 3}", size=9,
                   dx=6, dy=-4)
    skipped = len(layers) - len(points)
    note = (f'<p class="note">Each point is one accelerator group (numbered as in the table below). MACs count what '
            f"the hardware executes, channels padded to whole blocks. The solid roof is the bus's peak "
            f"({r['bus_bytes']} bytes per cycle), the dashed one what the timing model's bursts sustain; the "
            f"ridge is at {ridge:.3g} MACs/byte."
            + (f" {skipped} group(s) without MACs (ALU only) are not drawn." if skipped else "") + "</p>")
    return ("<h2>Roofline</h2>" + chart.svg() + legend([(c, op) for op, c in colors.items()]) + note)


def _modules(d: dict[str, Any]) -> str:
    """Per group, three thin bars (load, compute, store): busy, stalled and idle shares of its cycles."""
    layers = d["layers"]
    if not layers:
        return ""
    n = len(layers)
    rows = [(n - i - 0.5, f"#{i + 1} {row['name'][:28]}") for i, row in enumerate(layers)]
    chart = Chart(900, 50 + 30 * n, Axis(0, 100, "% of the group's cycles"), Axis(0, n, ticks=rows),
                  "Where each group's cycles go, per module", margin=(240, 130, 26, 40), grid=True)
    total = sum(row["cycles"] for row in layers) or 1
    for i, row in enumerate(layers):
        y0 = n - i - 0.5
        for k, m in enumerate(MODULES):
            y = y0 + 0.27 - 0.27 * k
            fig = row["modules"][m]
            x = 0.0
            # compute's busy cycles split: the MACs at the core's peak (the roofline's GOPS / peak), then the rest
            parts = ([("MAC cycles", fig["mac"], 1.0), ("other compute work", fig["busy"] - fig["mac"], 0.6)]
                     if m == "compute" else [("busy", fig["busy"], 1.0)]) + [("stall", fig["stall"], STATE_OPACITY["stall"])]
            for state, value, opacity in parts:
                share = 100 * value / row["cycles"] if row["cycles"] else 0.0
                chart.rect(x, x + share, y - 0.12, y + 0.12, MODULE_COLORS[m],
                           f"{row['name']} {m}: {state} {value:,.0f} of {row['cycles']:,} cycles ({share:.1f}%)",
                           opacity)
                x += share
        chart.text(100, y0, f"{row['cycles']:,} cyc ({100 * row['cycles'] / total:.1f}%)", dx=6, dy=4)
    items = [(MODULE_COLORS[m], f"{m} busy") for m in MODULES] + [("#bbb", "lighter: stalled on a token or dispatch"),
                                                                   ("#fff", "blank: idle")]
    return ("<h2>Time per module</h2>" + chart.svg() + legend(items) + _busy_note(d) + _layer_table(layers))


def _busy_note(d: dict[str, Any]) -> str:
    """Why compute is busy nearly all the time while the roofline's points sit below the peak: what busy counts."""
    layers = [r for r in d["layers"] if r["macs"]]
    if not layers:
        return ""
    cycles = sum(r["cycles"] for r in layers)
    busy = sum(r["modules"]["compute"]["busy"] for r in layers)
    mac = sum(r["modules"]["compute"]["mac"] for r in layers)
    peak = 2 * d["roofline"]["peak_macs_per_s"] / 1e9
    return (f'<p class="note">Busy counts every cycle a module is executing an instruction, whatever it does in it. '
            f"Compute's busy cycles are the GEMM core's MACs at its peak (the darker part: BATCH x BLOCK_IN x "
            f"BLOCK_OUT MACs every GEMM_II cycles) plus its other work (lighter: the ALU epilogue, accumulator "
            f"resets, micro-op and bias loads, each instruction's pipeline fill). Only the MACs count in GOPS, so a "
            f"group's MAC cycles over its cycles is its attained GOPS over the {peak:g} GOPS peak, the roofline's "
            f"height. Over the {len(layers)} group(s) with MACs: compute busy {100 * busy / cycles:.1f}% of "
            f"{cycles:,} cycles = MAC cycles {100 * mac / cycles:.1f}% (attained {peak * mac / cycles:.1f} GOPS of "
            f"{peak:g}, simulated) + other compute work {100 * (busy - mac) / cycles:.1f}%.</p>")


def _layer_table(layers: list[dict[str, Any]]) -> str:
    head = ("<tr><th>#</th><th>group</th><th>op</th><th class=num>cycles</th><th class=num>MACs</th>"
            "<th class=num>DRAM bytes</th><th class=num>MACs/byte</th><th class=num>GOPS</th>"
            "<th class=num>of peak (MAC cycles)</th>"
            + "".join(f"<th class=num>{m} busy</th><th class=num>{m} stall</th>" for m in MODULES) + "</tr>")
    body = []
    for i, r in enumerate(layers):
        cells = [str(i + 1), esc(r["name"]), esc(r["op"])]
        nums = [f"{r['cycles']:,}", f"{r['macs']:,}", f"{r['dram_bytes']:,}", f"{r['intensity']:.3g}", f"{r['gops']:.3g}",
                f"{r['peak_share']:.1%}"]
        nums += [f"{r['modules'][m][s]:,}" for m in MODULES for s in ("busy", "stall")]
        body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "".join(f"<td class=num>{c}</td>" for c in nums)
                    + "</tr>")
    return f"<details><summary>the figures, per group</summary><table>{head}{''.join(body)}</table></details>"


def _host_section(d: dict[str, Any]) -> str:
    rows, fallbacks = d["host"], d["summary"]["fallbacks"]
    total = sum(r["seconds"] for r in rows) or 1.0
    out = ["<h2>Host ops</h2>"]
    if fallbacks:
        out.append('<p class="warn">' + "<br>".join(
            f"host fallback: accelerator group {esc(head)} runs on the CPU: {esc(why.removeprefix('CPU: '))}"
            for head, why in fallbacks.items()) + "</p>")
    else:
        out.append('<p class="note">No accelerator group fell back to the host.</p>')
    body = []
    for r in sorted(rows, key=lambda r: -r["seconds"]):
        share = 100 * r["seconds"] / total
        bar = f'<span style="display:inline-block;width:{2 * share:.0f}px;height:9px;background:#76b7b2"></span>'
        why = f"fallback of {esc(r['fallback_of'])}" if r["fallback_of"] else ""
        body.append(f"<tr><td>{esc(r['name'])}</td><td>{esc(r['op'])}</td><td class=num>{r['seconds'] * 1e3:.3f}</td>"
                    f"<td class=num>{share:.1f}%</td><td>{bar}</td><td class=warn>{why}</td></tr>")
    out.append("<table><tr><th>op</th><th>kind</th><th class=num>ms</th><th class=num>share</th><th></th><th></th></tr>"
               + "".join(body) + "</table>")
    offload = d["offload"]
    counts = {w: sum(r["where"] == w for r in offload) for w in ("accelerator", "fused", "CPU", "build")}
    table = "".join(f"<tr><td>{esc(r['name'])}</td><td>{esc(r['op'])}</td><td>{esc(r['where'])}</td>"
                    f"<td>{esc(r['why'])}</td></tr>" for r in offload)
    out.append(f"<details><summary>where every node runs, and why ({counts['accelerator']} accelerator group(s), "
               f"{counts['fused']} fused op(s), {counts['CPU']} CPU op(s), {counts['build']} prepared at build)"
               f"</summary><table><tr><th>node</th><th>op</th><th>where</th><th>why</th></tr>{table}</table></details>")
    return "\n".join(out)


def _timeline_section(d: dict[str, Any]) -> str:
    t = d["timeline"]
    out = ["<h2>Module timeline</h2>"]
    if "busy" not in t:
        return out[0] + f'<p class="note">{esc(t["note"])}</p>'
    rows = [(2.5, "load"), (1.5, "compute"), (0.5, "store")]
    whole = Chart(1000, 230, Axis(0, t["cycles"], "cycle (the groups end to end, as they ran)"),
                  Axis(0, 3, ticks=rows), "The whole run: busy fraction per module", margin=(80, 20, 26, 40))
    for i, (name, lo, hi) in enumerate(t["groups"]):
        whole.rect(lo, hi, 0, 3, "#000", f"{name}: cycles {lo:,}-{hi:,}", 0.04 if i % 2 else 0.0)
    step = t["cycles"] / t["bins"]
    for y, m in rows:
        xs, ys = [0.0], [y - 0.45]
        for k, f in enumerate(t["busy"][m]):
            xs += [k * step, (k + 1) * step]
            ys += [y - 0.45 + 0.9 * f, y - 0.45 + 0.9 * f]
        xs.append(t["cycles"])
        ys.append(y - 0.45)
        whole.marks.append(_polygon(whole, xs, ys, MODULE_COLORS[m]))
    detail = t["detail"]
    gantt = Chart(1000, 200, Axis(0, detail["cycles"], f"cycle within {detail['name']}"), Axis(0, 3, ticks=rows),
                  f"The longest group, {detail['name']}: every instruction per module", margin=(80, 20, 26, 40))
    for y, m in rows:
        for s, e, count in detail["bars"][m]:
            gantt.rect(s, e, y - 0.35, y + 0.35, MODULE_COLORS[m],
                       f"{m}: cycles {s:,}-{e:,}" + (f" ({count} instructions)" if count > 1 else ""), css="bar")
    out += [whole.svg(), gantt.svg(), (f'<p class="note">{esc(t["note"])}. Groups alternate light and white '
                                       "bands in the upper picture; hover over a band or bar for its name and "
                                       "cycles.</p>")]
    return "\n".join(out)


def _polygon(chart: Chart, xs: list[float], ys: list[float], color: str) -> str:
    pts = " ".join(f"{chart.px(x):.1f},{chart.py(y):.1f}" for x, y in zip(xs, ys, strict=True))
    return f'<polygon points="{pts}" fill="{color}" fill-opacity="0.85" stroke="none"/>'


def render_report(data: dict[str, Any]) -> str:
    """The page for ``report_data``'s figures."""
    title = f"{data['summary']['model'] or 'network'} on {data['summary']['config']}"
    sections = [_summary(data), _roofline(data), _modules(data), _host_section(data), _timeline_section(data)]
    return page(title, sections, json.dumps(data, sort_keys=True))


def write_report(path: str | os.PathLike, module: GraphModule, model: str = "", **info: Any) -> dict[str, Any]:
    """Write the page for ``module``'s last run to ``path`` (whole or not at all) and return its figures
    (``report_data``'s; ``info`` goes to it)."""
    data = report_data(module, model, **info)
    write_page(path, render_report(data))
    return data
