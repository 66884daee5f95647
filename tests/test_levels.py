"""The path analysis over every path of a synthesised netlist (hardware/fpga/levels.py).

Oracle: small netlists in Yosys's ``write_json`` form, built here, whose deepest paths are counted by hand from
the cells' Xilinx models (which ports of a DSP48E1, a distributed RAM, a flip-flop are combinational to which
outputs). The real netlists are checked by tests/test_timing.py's run on the 1x4x4 core.
"""

from __future__ import annotations

import pytest

from hardware.fpga.levels import NetlistError, analyse, cell_kind, sram_cells

OUT = {"O": "output", "Q": "output", "P": "output", "CO": "output", "DOA": "output", "DOB": "output",
       "DOC": "output", "DOD": "output", "DOADO": "output"}


class Net:
    """Builds a flattened module: cells by name, nets as integers."""

    def __init__(self):
        self.cells, self.ports, self.names = {}, {}, {}

    def cell(self, name: str, type_: str, params: dict | None = None, **conns: int) -> None:
        self.cells[name] = {"type": type_, "parameters": params or {},
                            "port_directions": {p: OUT.get(p, "input") for p in conns},
                            "connections": {p: [b] for p, b in conns.items()}}

    def port(self, name: str, direction: str, bit: int) -> None:
        self.ports[name] = {"direction": direction, "bits": [bit]}

    def name(self, name: str, bit: int) -> None:
        self.names[name] = {"hide_name": 0, "bits": [bit]}

    def json(self) -> dict:
        return {"modules": {"top": {"attributes": {"top": "00000000000000000000000000000001"},
                                    "ports": self.ports, "cells": self.cells, "netnames": self.names}}}


def _ff(n: Net, name: str, d: int, q: int) -> None:
    n.cell(name, "FDRE", C=1, D=d, Q=q)


def test_lut_levels_count_luts_only_and_name_the_path():
    """q1 -> LUT6 -> LUT6 -> CARRY4 -> LUT2 -> q2: three LUT levels (the carry is crossed, not counted); a
    shorter branch from q1 into q3 does not change the most."""
    n = Net()
    _ff(n, "q1", d=2, q=10)
    n.name("start_reg", 10)
    n.cell("x", "LUT6", I0=10, O=11)
    n.cell("y", "LUT6", I0=11, O=12)
    n.cell("c", "CARRY4", S=12, CO=13)
    n.cell("z", "LUT2", I0=13, I1=10, O=14)
    _ff(n, "q2", d=14, q=15)
    n.cell("short", "LUT3", I0=10, O=16)
    _ff(n, "q3", d=16, q=17)
    lv = analyse(n.json())
    assert lv.luts.count == 3
    assert [c[0] for c in lv.luts.cells] == ["q1", "x", "y", "c", "z"]
    assert lv.luts.end == ("q2", "FDRE")
    assert lv.luts.start_text == "start_reg (FDRE)"
    assert lv.dsps.count == 0


def test_dsps_in_series_follow_the_register_parameters():
    """d1 with A, M and P registers off is crossed A->P; d2 (C and P registers off) C->P: two DSPs between
    flip-flops. d3 has its M register on (AREG/BREG unwritten: the library's default, on) and P off: a sequential
    cell (issue 38's reading), so the path from it through its post-adder into d4, whose P register ends it,
    crosses no DSP from an input to P; d3 -> d5 (C->P, registers off) -> a flip-flop crosses one."""
    off = {"AREG": "00", "BREG": "00", "MREG": "0", "PREG": "0", "CREG": "0"}
    n = Net()
    _ff(n, "q1", d=2, q=10)
    n.cell("d1", "DSP48E1", off, A=10, P=11)
    n.cell("d2", "DSP48E1", off, C=11, P=12)
    _ff(n, "q2", d=12, q=13)
    n.cell("d3", "DSP48E1", {"MREG": "1", "PREG": "0"}, A=13, P=20)
    n.cell("d4", "DSP48E1", {"PREG": "1"}, PCIN=20, P=21)
    _ff(n, "q3", d=21, q=22)
    only_d3 = Net()
    only_d3.cell("d3", "DSP48E1", {"MREG": "1", "PREG": "0"}, A=13, P=20)
    only_d3.cell("d4", "DSP48E1", {"PREG": "1"}, PCIN=20, P=21)
    assert analyse(only_d3.json()).dsps.count == 0
    only_d3.cell("d5", "DSP48E1", off, C=20, P=23)
    _ff(only_d3, "q4", d=23, q=24)
    assert analyse(only_d3.json()).dsps.count == 1
    lv = analyse(n.json())
    assert lv.dsps.count == 2
    assert [c[0] for c in lv.dsps.cells] == ["q1", "d1", "d2"] and lv.dsps.end == ("q2", "FDRE")
    assert not cell_kind("DSP48E1", {"MREG": "1", "PREG": "0"}).comb_inputs & {"A", "B"}
    assert "C" in cell_kind("DSP48E1", {"MREG": "1", "PREG": "0", "CREG": "0"}).comb_inputs
    assert cell_kind("DSP48E1", {}).comb_inputs == frozenset()        # every register on by default


def test_distributed_ram_reads_through_its_address_and_ends_at_its_data():
    """A LUT computes the read address of a RAM32M whose output feeds a LUT into a flip-flop: LUT, RAM, LUT =
    3 levels (a distributed RAM read is a LUT); the path into its write data ends there."""
    n = Net()
    _ff(n, "q1", d=2, q=10)
    n.cell("a", "LUT4", I0=10, O=11)
    n.cell("ram", "RAM32M", ADDRA=11, DIA=10, DOA=12)
    n.cell("b", "LUT2", I0=12, O=13)
    _ff(n, "q2", d=13, q=14)
    n.cell("w1", "LUT6", I0=14, O=15)
    n.cell("w2", "LUT6", I0=15, O=16)
    n.cell("w3", "LUT6", I0=16, O=17)
    n.cell("w4", "LUT6", I0=17, O=18)
    n.cell("ram2", "RAM32M", DIA=18, ADDRA=14, DOA=19)
    _ff(n, "q3", d=19, q=20)
    lv = analyse(n.json())
    assert lv.luts.count == 4 and lv.luts.end == ("ram2", "RAM32M")
    assert [c[0] for c in lv.luts.cells] == ["q2", "w1", "w2", "w3", "w4"]
    n.cell("w5", "LUT6", I0=18, O=21)
    n.cell("w6", "LUT6", I0=21, O=22)
    n.cells["ram2"]["connections"]["DIA"] = [22]
    assert analyse(n.json()).luts.count == 6


def test_ports_are_counted_apart_from_register_to_register_paths():
    n = Net()
    n.port("din", "input", 2)
    n.port("dout", "output", 31)
    for i in range(5):
        n.cell(f"l{i}", "LUT6", I0=2 + i, O=3 + i)
    _ff(n, "q", d=7, q=30)
    n.cell("o", "LUT2", I0=30, O=31)
    lv = analyse(n.json())
    assert lv.luts.count == 0
    assert lv.luts_with_ports.count == 5 and lv.luts_with_ports.end == ("q", "FDRE")
    assert lv.luts_with_ports.cells[0] == ("<module input>", "port", "")


def test_bad_netlists_are_refused_with_the_reason():
    n = Net()
    n.cell("a", "LUT2", I0=2, O=3)
    n.cell("b", "LUT2", I0=3, O=2)
    with pytest.raises(NetlistError, match="combinational loop through 2 cells"):
        analyse(n.json())
    m = Net()
    m.cell("x", "MYSTERY", I=1, O=2)
    with pytest.raises(NetlistError, match="cell type 'MYSTERY'"):
        analyse(m.json())
    with pytest.raises(NetlistError, match="no module 'nope'"):
        analyse(m.json(), "nope")


def test_sram_cells_by_name():
    n = Net()
    n.cell("acc_sram.0.0", "RAMB36E1", DOADO=5)
    n.cell("acc_sram.0.1", "RAMB18E1", DOADO=6)
    n.cell("uop_sram.0", "RAM64M", DOA=7)
    assert sram_cells(n.json())["acc"] == {"RAMB36E1": 1, "RAMB18E1": 1}
    assert sram_cells(n.json())["uop"] == {"RAM64M": 1} and sram_cells(n.json())["inp"] == {}
