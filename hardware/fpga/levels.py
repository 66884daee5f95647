"""Logic levels on every register-to-register path of a synthesised Xilinx netlist: the most LUTs, and the most
DSP48 slices, that any one path crosses, and which path that is.

Yosys's ``sta`` reports one path, the latest-arriving; a path with more LUTs but faster cells (or a chain of DSPs
that arrives earlier) stays invisible there. This analysis reads the netlist ``synth_xilinx -flatten`` wrote
(``write_json``) and walks every combinational arc, so "at most N LUT levels" is measured over all paths, not
assumed from the slowest one.

What is sequential (a path starts at its output and ends at its input) follows the cells' Xilinx models
(``+/xilinx/cells_sim.v``), port by port:

- flip-flops (FDRE, FDSE, FDCE, FDPE) and block RAMs (RAMB18E1, RAMB36E1 and the E2 cells) are registers on every
  port;
- distributed RAMs (RAM32M, RAM64X1D, ...) and shift registers (SRL16E, SRLC32E) are written on the clock but read
  combinationally: their address inputs reach their data outputs through the cell, their other inputs end a path;
- a DSP48E1/E2 is combinational from an input to P only where every register on the way is off (the input's own
  A/B/C/D register, the M register for the multiplier's inputs, and the P register). A DSP with any register on
  the way to P launches paths (as issue 38's bound reads: a DSP with its M or P register on is a sequential
  cell); the DSPs counted on a path are those it crosses from an input to P, as ``CriticalPath.dsps_in_series``
  counts them on ``sta``'s path.

A module port (the core's AXI and register-map pins) starts or ends a path too; paths are reported register to
register (the acceptance figure) and, separately, from or to a port, since a real design registers its ports
elsewhere (an interconnect, the wrapper of ``ecp5_wrapper``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hardware.fpga.resources import DSP_CELLS, FF_CELLS, LUT_CELLS, SRAMS, sram_of_cell

BLOCK_RAMS = {"RAMB18E1", "RAMB36E1", "RAMB18E2", "RAMB36E2"}
# cells crossed combinationally from every input to every output, and not counted as a LUT level
COMBINATIONAL = {"CARRY4", "CARRY8", "MUXF7", "MUXF8", "MUXF9", "INV", "BUFG", "IBUF", "OBUF", "GND", "VCC",
                 "$scopeinfo"}     # the last: Yosys's record of a flattened scope, no ports
# distributed RAMs and shift registers: read addresses in, data out; everything else they take is written
_READ_ADDRESS = re.compile(r"^(A\d*|ADDR[A-H]|DPRA\d*|RADR\d*)$")
LUT_MEMORIES = {"RAM16X1D", "RAM32X1D", "RAM64X1D", "RAM128X1D", "RAM256X1D", "RAM16X1S", "RAM32X1S", "RAM64X1S",
                "RAM128X1S", "RAM256X1S", "RAM32M", "RAM32M16", "RAM64M", "RAM64M8", "SRL16E", "SRLC16E",
                "SRLC32E"}
# a DSP's inputs and the registers between each and the P output (besides PREG); the library's default for every
# register parameter is 1 (cells_sim.v), so a parameter Yosys did not write is a register that is on
_DSP_INPUT_REGS = {"A": ("AREG", "MREG"), "B": ("BREG", "MREG"), "D": ("DREG", "ADREG", "MREG"), "C": ("CREG",),
                   "ACIN": ("AREG", "MREG"), "BCIN": ("BREG", "MREG"), "PCIN": (), "CARRYIN": ("CARRYINREG",),
                   "CARRYCASCIN": (), "OPMODE": ("OPMODEREG",), "ALUMODE": ("ALUMODEREG",),
                   "CARRYINSEL": ("CARRYINSELREG",), "INMODE": ("INMODEREG",)}
_DSP_REGS = ("AREG", "BREG", "CREG", "DREG", "ADREG", "MREG", "PREG", "CARRYINREG", "OPMODEREG", "ALUMODEREG",
             "CARRYINSELREG", "INMODEREG")


class NetlistError(ValueError):
    """The netlist is not one this analysis can read (not flattened, a combinational loop)."""


def _param(value: object, default: int = 1) -> int:
    """A numeric cell parameter as ``write_json`` gives it (a binary string, or an int); ``default`` if absent."""
    if value is None:
        return default
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if text and set(text) <= {"0", "1"}:
        return int(text, 2)
    return int(text) if text.isdigit() else default


def _dsp_comb_inputs(parameters: dict) -> set[str]:
    """The DSP input ports from which P is reached with every register on the way off."""
    regs = {name: _param(parameters.get(name)) for name in _DSP_REGS}
    use_mult = str(parameters.get("USE_MULT", "MULTIPLY")).strip()
    if regs["PREG"]:
        return set()
    comb = set()
    for port, on_the_way in _DSP_INPUT_REGS.items():
        needed = [r for r in on_the_way if not (r == "MREG" and use_mult == "NONE")]
        if not any(regs[r] for r in needed):
            comb.add(port)
    return comb


@dataclass(frozen=True)
class CellKind:
    """How a cell takes part in paths: which inputs reach its outputs combinationally, whether something inside
    it launches a path (a register on the way to its outputs), and what it counts as on a path."""

    comb_inputs: frozenset[str] | None      # None: every input
    launches: bool
    lut: int                                # LUT levels it adds when crossed
    dsp: int                                # DSPs it adds when crossed


def cell_kind(type_: str, parameters: dict) -> CellKind:
    if type_ in LUT_CELLS:
        return CellKind(None, False, 1, 0)
    if type_ in FF_CELLS or type_ in BLOCK_RAMS:
        return CellKind(frozenset(), True, 0, 0)
    if type_ in LUT_MEMORIES:
        return CellKind(frozenset({"*address*"}), True, 1, 0)    # a read crosses a LUT (its contents launch)
    if type_ in DSP_CELLS:
        comb = _dsp_comb_inputs(parameters)
        return CellKind(frozenset(comb), True, 0, 1)
    if type_ in COMBINATIONAL:
        return CellKind(None, False, 0, 0)
    raise NetlistError(f"cell type {type_!r}: not one the path analysis knows (hardware/fpga/levels.py); allowed: "
                       "LUTs, flip-flops, block and distributed RAMs, shift registers, DSP48E1/E2, carry and mux cells")


def _is_comb(kind: CellKind, type_: str, port: str) -> bool:
    if kind.comb_inputs is None:
        return True
    if kind.comb_inputs == {"*address*"}:
        return bool(_READ_ADDRESS.match(port))
    return port in kind.comb_inputs


@dataclass(frozen=True)
class Path:
    """The path with the most of something: its cells from the launch to the end, each with the net it drives."""

    count: int
    cells: tuple[tuple[str, str, str], ...]     # (cell, type, readable name of the net it drives) launch first
    end: tuple[str, str]                        # (the end cell's output net, or the cell or port; its type)

    @property
    def start_text(self) -> str:
        cell, type_, net = self.cells[0]
        return f"{net or cell} ({type_})"

    @property
    def end_text(self) -> str:
        return f"{self.end[0]} ({self.end[1]})"

    def to_json(self) -> dict:
        return {"count": self.count, "cells": [list(c) for c in self.cells], "end": list(self.end)}

    @classmethod
    def from_json(cls, d: dict) -> Path:
        return cls(d["count"], tuple(tuple(c) for c in d["cells"]), tuple(d["end"]))


@dataclass(frozen=True)
class Levels:
    """The most LUT levels and the most DSPs on one path, register to register and with the ports."""

    luts: Path            # register to register
    dsps: Path
    luts_with_ports: Path  # any path, ports included
    dsps_with_ports: Path

    def to_json(self) -> dict:
        return {k: getattr(self, k).to_json() for k in ("luts", "dsps", "luts_with_ports", "dsps_with_ports")}

    @classmethod
    def from_json(cls, d: dict) -> Levels:
        return cls(**{k: Path.from_json(v) for k, v in d.items()})


def _module(netlist: dict, top: str | None) -> dict:
    modules = netlist.get("modules", {})
    if top is None:
        tops = [name for name, mod in modules.items() if _param(mod.get("attributes", {}).get("top"), 0)]
        if len(tops) != 1:
            raise NetlistError(f"netlist: {len(tops)} top modules; name the one to analyse")
        top = tops[0]
    if top not in modules:
        raise NetlistError(f"netlist: no module {top!r}")
    return modules[top]


def _net_names(module: dict) -> dict[int, str]:
    """A readable name per net bit: the shortest name Yosys did not hide, with the bit's index when wider."""
    names: dict[int, str] = {}
    for name, net in module.get("netnames", {}).items():
        if net.get("hide_name"):
            continue
        bits = net["bits"]
        for i, b in enumerate(bits):
            if isinstance(b, int):
                label = f"{name}[{i}]" if len(bits) > 1 else name
                if b not in names or len(label) < len(names[b]):
                    names[b] = label
    return names


def analyse(netlist: dict, top: str | None = None) -> Levels:
    """The most LUT levels and DSPs on one path of ``netlist``'s (flattened) ``top`` module (see the module
    docstring for what starts and ends a path)."""
    module = _module(netlist, top)
    cells = module["cells"]
    kinds = {name: cell_kind(c["type"], c.get("parameters", {})) for name, c in cells.items()}
    names = _net_names(module)
    driver: dict[int, str] = {}           # net bit -> the cell driving it ("" for a module input)
    inputs_of: dict[int, list[tuple[str, bool]]] = {}   # net bit -> (cell, crossed combinationally)
    for name, cell in cells.items():
        dirs = cell.get("port_directions", {})
        for port, bits in cell["connections"].items():
            for b in bits:
                if not isinstance(b, int):
                    continue
                if dirs.get(port) == "output":
                    driver[b] = name
                else:
                    inputs_of.setdefault(b, []).append((name, _is_comb(kinds[name], cell["type"], port)))
    port_in, port_out = set(), {}
    for pname, port in module.get("ports", {}).items():
        for b in port["bits"]:
            if isinstance(b, int):
                if port["direction"] == "input":
                    port_in.add(b)
                else:
                    port_out[b] = pname
    # the combinational graph between cells: an arc from a driver to every cell its net enters combinationally
    succ: dict[str, set[str]] = {name: set() for name in cells}
    indeg = {name: 0 for name in cells}
    out_net: dict[str, int] = {}
    from_port: set[str] = set()
    for b, sinks in inputs_of.items():
        src = driver.get(b)
        for cell, comb in sinks:
            if not comb:
                continue
            if src is None:
                if b in port_in:
                    from_port.add(cell)
                continue
            if cell not in succ[src]:
                succ[src].add(cell)
                indeg[cell] += 1
    for b, src in driver.items():       # the net a cell is shown by: one with a readable name if it drives any
        if src not in out_net or (b in names and out_net[src] not in names):
            out_net[src] = b
    order = [n for n in cells if indeg[n] == 0]
    topo = []
    remaining = dict(indeg)
    while order:
        n = order.pop()
        topo.append(n)
        for m in succ[n]:
            remaining[m] -= 1
            if remaining[m] == 0:
                order.append(m)
    if len(topo) != len(cells):
        stuck = sorted(n for n in cells if remaining[n] > 0)[:5]
        raise NetlistError(f"netlist: a combinational loop through {len(cells) - len(topo)} cells, e.g. {stuck}")

    def longest(metric: str, ports: bool) -> Path:
        # best[n] = (count at n's output, predecessor or None for a launch); only arrivals from a launch count
        best: dict[str, tuple[int, str | None]] = {}
        for n in topo:
            k = kinds[n]
            add = getattr(k, metric)
            cands = []
            if k.launches:
                cands.append((0, None))
            if ports and n in from_port:
                cands.append((add, "<port>"))
            for p in preds[n]:
                if p in best:
                    cands.append((best[p][0] + add, p))
            if cands:       # on a tie, the path from further back (it shows where the logic comes from)
                best[n] = max(cands, key=lambda c: (c[0], c[1] is not None))
        top_count, top_end, top_from = -1, ("", ""), None
        for b, sinks in inputs_of.items():
            src = driver.get(b)
            if src is None or src not in best:
                continue
            for cell, comb in sinks:
                if not comb and best[src][0] > top_count:
                    shown = names.get(out_net.get(cell, -1)) or cell       # a flip-flop by the net it drives
                    top_count, top_end, top_from = best[src][0], (shown, cells[cell]["type"]), src
            if ports and b in port_out and best[src][0] > top_count:
                top_count, top_end, top_from = best[src][0], (port_out[b], "port"), src
        chain = []
        n = top_from
        while n is not None and n != "<port>":
            chain.append((n, cells[n]["type"], names.get(out_net.get(n, -1), "")))
            n = best[n][1]
        if n == "<port>":
            chain.append(("<module input>", "port", ""))
        return Path(max(top_count, 0), tuple(reversed(chain)), top_end)

    preds: dict[str, list[str]] = {n: [] for n in cells}
    for n, ms in succ.items():
        for m in ms:
            preds[m].append(n)
    return Levels(longest("lut", False), longest("dsp", False), longest("lut", True), longest("dsp", True))


def sram_cells(netlist: dict, top: str | None = None) -> dict[str, dict[str, int]]:
    """Per SRAM of the core (uop, inp, wgt, acc, out), the types of the cells Yosys built it of (by the cells'
    names, ``acc_sram...``): block RAMs only, or distributed RAM or flip-flops where it chose those."""
    out: dict[str, dict[str, int]] = {name: {} for name in SRAMS}
    for name, cell in _module(netlist, top)["cells"].items():
        sram = sram_of_cell(name)
        if sram is not None:
            out[sram][cell["type"]] = out[sram].get(cell["type"], 0) + 1
    return out


def boundary_registers(prefix: str, port) -> list[tuple]:
    """Put an Amaranth interface ``port`` behind flip-flops for a path analysis of the logic inside it: per
    member, (the top-level signal ``<prefix>_<member>``, its register, the member, whether it flows in). Pass the
    top-level signals as the design's ports and wire them with ``connect_boundary``; every path then starts and
    ends at a flip-flop, as it would behind an interconnect."""
    from amaranth import Signal
    from amaranth.lib import wiring

    wires = []
    for path, member, value in port.signature.flatten(port):
        name = prefix + "_" + "_".join(str(p) for p in path)
        wires.append((Signal(len(value), name=name), Signal(len(value), name=name + "_q"), value,
                      member.flow == wiring.In))
    return wires


def connect_boundary(m, wires: list[tuple]) -> None:
    """Wire ``boundary_registers``' signals in module ``m``: inputs registered on the way in, outputs on the way
    out."""
    for outer, reg, inner, into in wires:
        if into:
            m.d.sync += reg.eq(outer)
            m.d.comb += inner.eq(reg)
        else:
            m.d.sync += reg.eq(inner)
            m.d.comb += outer.eq(reg)
