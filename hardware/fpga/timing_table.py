"""The timing table: for several configs (every preset, by default), each one's measured timing in one row (the
Xilinx figures of ``xilinx_timing``, logic delays only; nextpnr-ecp5's post-route Fmax where the config fits an
LFE5U-85F) with its DSPs, block RAMs and fit. ``vta hw estimate --timing --all-presets`` prints it, and
bench/timing.py with the machine's header."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hardware.fpga.parts import Part, get_part, part_for_target
from hardware.fpga.timing import (
    LOGIC_ONLY,
    TIMING_CHOICES,
    Ecp5Timing,
    XilinxTiming,
    cached_ecp5,
    cached_xilinx,
    clock_check,
    ecp5_refusal,
    ecp5_timing,
    timing_dict,
    timing_family,
    xilinx_timing,
)
from hw_config import HwConfig


@dataclass(frozen=True)
class TimingRow:
    name: str
    cfg: HwConfig
    part: Part
    xilinx: XilinxTiming | None
    ecp5: Ecp5Timing | None


def measure_rows(configs: list[tuple[str, HwConfig]], which: str, part: str | None = None,
                 progress: Callable[[str], None] | None = None, cached_only: bool = False) -> list[TimingRow]:
    """Each config's measurements ``which`` (xilinx, ecp5, all) names, run where not cached (``cached_only``: only
    what is cached); Xilinx on ``part`` (default: the config's board's), with the config's DSP packing."""
    if which not in TIMING_CHOICES:
        raise ValueError(f"unknown timing flow {which!r}; allowed: {', '.join(TIMING_CHOICES)}")
    rows = []
    for name, cfg in configs:
        p = get_part(part) if part else part_for_target(cfg.TARGET)
        family = timing_family(p.family)[0]
        x = e = None
        if which in ("xilinx", "all"):
            x = cached_xilinx(cfg, family) if cached_only else xilinx_timing(cfg, family, progress)
        if which in ("ecp5", "all"):
            e = cached_ecp5(cfg) if cached_only else ecp5_timing(cfg, progress=progress)
        rows.append(TimingRow(name, cfg, p, x, e))
    return rows


def _fits(r: TimingRow) -> str:
    res = r.xilinx.resources
    over = [k for k, used, have in (("LUT", res.lut, r.part.lut), ("FF", res.ff, r.part.ff),
                                    ("BRAM36", res.bram, r.part.bram36), ("DSP", res.dsp, r.part.dsp))
            if used > have]
    return "yes" if not over else "NO: " + ", ".join(over)


def _ecp5_text(r: TimingRow) -> str:
    e = r.ecp5
    if e is None:
        refusal = ecp5_refusal(r.cfg)
        return f"does not fit ({refusal.split(' (')[0]})" if refusal else "not measured"
    if not e.fits:
        return f"does not fit ({e.reason.split(' (')[0]})"
    verdict = "met" if e.fmax_mhz >= r.cfg.CLOCK_MHZ else "missed"
    return f"{e.fmax_mhz:.1f} MHz ({verdict} at {r.cfg.CLOCK_MHZ:g}; bitstream {e.bitstream_bytes:,} B)"


COLUMNS = ("config", "model", "MHz", "part", "logic ns", "LUT lv", "DSP ser", "DSP", "BRAM36", "SRAM->BRAM",
           "fits", "clock (logic only)", "ECP5 post-route Fmax")


def render(rows: list[TimingRow]) -> str:
    """The table as text: one line per config, then each measured config's paths (the critical one, and the
    deepest in LUTs and in DSPs over every register-to-register path)."""
    table = [list(COLUMNS)]
    notes = []
    for r in rows:
        x = r.xilinx
        shown = r.part.name + ("*" if r.part.family != "xc7" else "")
        if x is None:
            xcols = ["not measured"] + ["-"] * 7
        else:
            met, margin = clock_check(r.cfg, x.delay_ns)
            res = x.resources
            lv = x.levels
            in_bram = {None: "?", True: "yes", False: "NO"}[x.srams_in_block_ram]
            xcols = [f"{x.delay_ns:.2f}", str(lv.luts.count) if lv else "?", str(lv.dsps.count) if lv else "?",
                     str(res.dsp), f"{res.bram:g}", in_bram, _fits(r),
                     ("met " if met else "MISSED ") + f"{margin:+.2f} ns"]
            notes.append(f"{r.name}: critical path {x.path.start} -> {x.path.end_text} ({x.path.lut_levels} LUT, "
                         f"{x.path.dsps_in_series} DSP in series)")
            if lv:
                notes.append(f"{' ' * len(r.name)}  most LUTs ({lv.luts.count}): {lv.luts.start_text} -> "
                             f"{lv.luts.end_text}; most DSPs ({lv.dsps.count}): {lv.dsps.start_text} -> "
                             f"{lv.dsps.end_text}")
        table.append([r.name, r.cfg.model, f"{r.cfg.CLOCK_MHZ:g}", shown, *xcols, _ecp5_text(r)])
    widths = [max(len(row[i]) for row in table) for i in range(len(COLUMNS) - 1)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1] for row in table]
    head = [(f"timing ({LOGIC_ONLY} for the Xilinx columns: Yosys synth_xilinx -flatten then sta; LUT lv and DSP "
            "ser: the most on any register-to-register path of the netlist; ECP5: nextpnr-ecp5 placed and routed "
            "on an LFE5U-85F)")]
    if any(r.part.family != "xc7" for r in rows):
        head.append(f"*: {timing_family('xcup')[1]}")
    return "\n".join(head + [""] + lines + [""] + notes)


def rows_json(rows: list[TimingRow]) -> list[dict]:
    out = []
    for r in rows:
        d = {"config": r.name, "model": r.cfg.model, "part": r.part.name,
             **timing_dict(r.cfg, r.xilinx, r.ecp5, timing_family(r.part.family)[1])}
        if r.xilinx is not None:
            res = r.xilinx.resources
            d["xilinx"].update(dsp=res.dsp, bram36=res.bram, lut=res.lut, ff=res.ff, fits=_fits(r),
                               srams_in_block_ram=r.xilinx.srams_in_block_ram)
        out.append(d)
    return out
