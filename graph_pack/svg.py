"""Charts as inline SVG text, and the self-contained HTML page around them (``vta run --report``, ``vta tune
--plot``): drawn by this package alone, so a report needs no plotting extra, no script and no network.

A ``Chart`` maps data to pixels through two ``Axis`` objects (linear or log10) and collects marks (lines,
points, rectangles, text) in data coordinates; ``svg()`` draws the frame, grid, ticks and labels under them.
Every mark may carry a ``title`` (the browser's tooltip), which is also what tests read back.
"""

from __future__ import annotations

import html
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from hw_config.writing import write_atomic
from simulator.files import check_output_path

# one colour per accelerator module and per state, used by every picture of a report
MODULE_COLORS = {"load": "#4e79a7", "compute": "#e15759", "store": "#59a14f"}
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
           "#bab0ac")


def esc(text: object) -> str:
    """Text for an SVG or HTML element or attribute."""
    return html.escape(str(text), quote=True)


def si(value: float, digits: int = 3) -> str:
    """A number with an SI suffix (1.5k, 2M, 3G), as tick labels want it."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    exp = min(max(math.floor(math.log10(abs(value)) / 3), -3), 4)
    suffix = {-3: "n", -2: "µ", -1: "m", 0: "", 1: "k", 2: "M", 3: "G", 4: "T"}[exp]
    return f"{value / 1000 ** exp:.{digits}g}{suffix}"


@dataclass
class Axis:
    """A data range drawn along one side of a chart; ``log`` for a log10 scale. ``ticks`` replaces the
    automatic ones with (value, label) pairs (e.g. the rows of a Gantt chart)."""

    lo: float
    hi: float
    label: str = ""
    log: bool = False
    ticks: list[tuple[float, str]] | None = None

    def __post_init__(self) -> None:
        if self.log:
            self.lo, self.hi = max(self.lo, 1e-300), max(self.hi, 1e-300)
        if not self.hi > self.lo:   # a single value: give it some room
            self.lo, self.hi = (self.lo / 2, self.lo * 2) if self.log else (self.lo - 1, self.lo + 1)

    def frac(self, v: float) -> float:
        """Where ``v`` lies between lo (0) and hi (1)."""
        if self.log:
            return (math.log10(max(v, 1e-300)) - math.log10(self.lo)) / (math.log10(self.hi) - math.log10(self.lo))
        return (v - self.lo) / (self.hi - self.lo)

    def tick_marks(self) -> list[tuple[float, str]]:
        if self.ticks is not None:
            return self.ticks
        if self.log:
            first, last = math.ceil(math.log10(self.lo) - 1e-9), math.floor(math.log10(self.hi) + 1e-9)
            step = max(1, (last - first) // 8 + 1)
            decades = [(10.0 ** e, si(10.0 ** e)) for e in range(first, last + 1, step)]
            if len(decades) >= 2:
                return decades
            # a narrow range: 1-2-5 steps inside it, else evenly spaced values (on the log scale still)
            fine = [m * 10.0 ** e for e in range(first - 1, last + 1) for m in (1, 2, 5)]
            fine = [v for v in fine if self.lo <= v <= self.hi]
            if len(fine) >= 3:
                return [(v, si(v)) for v in fine]
            return Axis(self.lo, self.hi).tick_marks()
        raw = (self.hi - self.lo) / 5
        mag = 10 ** math.floor(math.log10(raw))
        step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
        start = math.ceil(self.lo / step - 1e-9) * step
        count = int((self.hi - start) / step + 1e-9) + 1
        return [(v, si(v) if abs(v) >= 1000 else f"{v:.10g}") for v in (start + i * step for i in range(count))]


def log_range(values: Sequence[float], pad: float = 2.0) -> tuple[float, float]:
    """A log axis range covering the positive ``values``, widened by ``pad`` on each side, to whole decades."""
    pos = [v for v in values if v > 0 and math.isfinite(v)] or [1.0]
    lo, hi = min(pos) / pad, max(pos) * pad
    return 10.0 ** math.floor(math.log10(lo)), 10.0 ** math.ceil(math.log10(hi))


@dataclass
class Chart:
    """An SVG chart of ``width`` x ``height`` pixels with a plot area inside ``margin`` (left, right, top, bottom)."""

    width: int
    height: int
    x: Axis
    y: Axis
    title: str = ""
    margin: tuple[int, int, int, int] = (70, 20, 30, 45)
    grid: bool = True
    title_size: int = 13
    marks: list[str] = field(default_factory=list)    # clipped to the plot area
    labels: list[str] = field(default_factory=list)   # text, drawn over everything, unclipped

    @property
    def left(self) -> float:
        return self.margin[0]

    @property
    def right(self) -> float:
        return self.width - self.margin[1]

    @property
    def top(self) -> float:
        return self.margin[2]

    @property
    def bottom(self) -> float:
        return self.height - self.margin[3]

    def px(self, x: float) -> float:
        return self.left + self.x.frac(x) * (self.right - self.left)

    def py(self, y: float) -> float:
        return self.bottom - self.y.frac(y) * (self.bottom - self.top)

    @staticmethod
    def _title(title: str | None) -> str:
        return f"<title>{esc(title)}</title>" if title else ""

    def line(self, xs: Sequence[float], ys: Sequence[float], color: str, width: float = 1.5,
             dash: str | None = None, title: str | None = None, step: bool = False) -> None:
        """A polyline through the points (``step``: horizontal then vertical, a best-so-far curve)."""
        pts: list[tuple[float, float]] = []
        for x, y in zip(xs, ys, strict=True):
            if step and pts:
                pts.append((self.px(x), pts[-1][1]))
            pts.append((self.px(x), self.py(y)))
        text = " ".join(f"{a:.1f},{b:.1f}" for a, b in pts)
        extra = f' stroke-dasharray="{dash}"' if dash else ""
        self.marks.append(f'<polyline points="{text}" fill="none" stroke="{color}" stroke-width="{width}"{extra}>'
                          f"{self._title(title)}</polyline>")

    def point(self, x: float, y: float, color: str, r: float = 4.0, title: str | None = None,
              css: str = "", opacity: float = 1.0) -> None:
        cls = f' class="{css}"' if css else ""
        self.marks.append(f'<circle{cls} cx="{self.px(x):.1f}" cy="{self.py(y):.1f}" r="{r}" fill="{color}" '
                          f'fill-opacity="{opacity:g}" stroke="#222" stroke-width="0.5">{self._title(title)}</circle>')

    def rect(self, x0: float, x1: float, y0: float, y1: float, color: str, title: str | None = None,
             opacity: float = 1.0, css: str = "") -> None:
        """A rectangle between data coordinates (at least a hairline wide, so short spans stay visible)."""
        a, b = sorted((self.px(x0), self.px(x1)))
        top, bottom = sorted((self.py(y0), self.py(y1)))
        cls = f' class="{css}"' if css else ""
        self.marks.append(f'<rect{cls} x="{a:.2f}" y="{top:.1f}" width="{max(b - a, 0.3):.2f}" '
                          f'height="{bottom - top:.1f}" fill="{color}" fill-opacity="{opacity:g}">'
                          f"{self._title(title)}</rect>")

    def text(self, x: float, y: float, text: str, anchor: str = "start", size: int = 11, color: str = "#333",
             dx: float = 0, dy: float = 0) -> None:
        self.labels.append(f'<text x="{self.px(x) + dx:.1f}" y="{self.py(y) + dy:.1f}" font-size="{size}" '
                          f'text-anchor="{anchor}" fill="{color}">{esc(text)}</text>')

    def _ticks(self, axis: Axis, vertical_grid: bool) -> list[str]:
        """Grid lines and labels of one axis's ticks (those inside its range)."""
        out = []
        for value, label in axis.tick_marks():
            if not -1e-9 <= axis.frac(value) <= 1 + 1e-9:
                continue
            if vertical_grid:   # the x axis: labels under the plot
                x = self.px(value)
                line = (x, self.top, x, self.bottom)
                text = f'x="{x:.1f}" y="{self.bottom + 15}" text-anchor="middle"'
            else:
                y = self.py(value)
                line = (self.left, y, self.right, y)
                text = f'x="{self.left - 6}" y="{y + 4:.1f}" text-anchor="end"'
            if self.grid:
                out.append('<line x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" stroke="#e5e5e5"/>'.format(*line))
            out.append(f'<text {text} font-size="11">{esc(label)}</text>')
        return out

    def svg(self) -> str:
        w, h = self.width, self.height
        out = [(f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
                'font-family="sans-serif">'),
               f'<rect x="0" y="0" width="{w}" height="{h}" fill="white"/>']
        if self.title:
            out.append(f'<text x="{self.left}" y="18" font-size="{self.title_size}" font-weight="bold">'
                       f"{esc(self.title)}</text>")
        out += self._ticks(self.x, vertical_grid=True) + self._ticks(self.y, vertical_grid=False)
        out.append(f'<svg x="{self.left}" y="{self.top}" width="{self.right - self.left}" '
                   f'height="{self.bottom - self.top}" overflow="hidden">'
                   f'<g transform="translate({-self.left},{-self.top})">')
        out.extend(self.marks)   # clipped to the plot area
        out.append("</g></svg>")
        out.extend(self.labels)
        out.append(f'<rect x="{self.left}" y="{self.top}" width="{self.right - self.left}" '
                   f'height="{self.bottom - self.top}" fill="none" stroke="#888"/>')
        if self.x.label:
            out.append(f'<text x="{(self.left + self.right) / 2:.1f}" y="{h - 8}" font-size="12" '
                       f'text-anchor="middle">{esc(self.x.label)}</text>')
        if self.y.label:
            cy = (self.top + self.bottom) / 2
            out.append(f'<text x="14" y="{cy:.1f}" font-size="12" text-anchor="middle" '
                       f'transform="rotate(-90 14 {cy:.1f})">{esc(self.y.label)}</text>')
        out.append("</svg>")
        return "\n".join(out)


def legend(items: Sequence[tuple[str, str]]) -> str:
    """An HTML legend: (colour, label) swatches in a row."""
    return '<p class="legend">' + " ".join(
        f'<span><i style="background:{color}"></i>{esc(label)}</span>' for color, label in items) + "</p>"


STYLE = """
body { font-family: sans-serif; margin: 24px; color: #222; max-width: 1100px; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 28px; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 13px; } td, th { padding: 2px 10px; text-align: left; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; } tr:nth-child(even) { background: #f6f6f6; }
.note { color: #555; font-size: 13px; } .warn { color: #a33; }
.legend span { margin-right: 16px; font-size: 13px; }
.legend i { display: inline-block; width: 12px; height: 12px; margin-right: 4px; vertical-align: -1px;
            border: 1px solid #999; }
details { margin-top: 8px; } details summary { cursor: pointer; }
"""


def page(title: str, sections: Sequence[str], data_json: str | None = None) -> str:
    """A whole HTML document: inline style, the sections in order, and (for tools and tests) the figures as
    JSON in an inert ``<script type="application/json" id="data">`` block. Nothing is fetched."""
    data = ""
    if data_json is not None:
        inert = data_json.replace("</", "<\\/")   # no "</script>" inside
        data = f'<script type="application/json" id="data">{inert}</script>\n'
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{esc(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{esc(title)}</h1>\n"
            + "\n".join(sections) + "\n" + data + "</body>\n</html>\n")


def check_html_path(path: str | os.PathLike, what: str) -> None:
    """Refuse, before any work, a page path that is not .html / .htm or cannot be written."""
    text = os.fspath(path)
    if not text.lower().endswith((".html", ".htm")):
        raise ValueError(f"{what} {text}: the page is HTML; give a file name ending in .html")
    check_output_path(text, what)


def write_page(path: str | os.PathLike, text: str) -> None:
    """Write a page whole or not at all."""
    write_atomic(path, lambda f: f.write(text.encode("utf-8")))
