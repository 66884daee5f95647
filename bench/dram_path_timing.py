"""The DRAM path alone, timed by Yosys: the arbiter(s) and the AXI4 master for pynq's 64-bit bus and seven DRAM
clients, every port behind a flip-flop, through ``synth_xilinx -family xc7 -flatten`` and ``sta`` (logic delays
only, no routing; hardware/fpga/timing.py). The longest register-to-register path inside the arbitration and the
master: before issue 38's register slices, a client's valid ran through the round-robin grant, the AXI master
and back into every client's ready in one cycle; after them, no path leaves the arbiter without a register.

    python bench/dram_path_timing.py [--tree DIR]

``--tree`` runs against another checkout's hardware/ (e.g. ``git archive c3c9d13 hardware hw_config | tar -x -C
/tmp/old``); the printed figures name the tree. The work directory is a temporary one; nothing is cached.

``--core`` times the whole core of the 1x4x4 test config (tests/test_timing.py's TINY) at COMPUTE_LATENCY 9
instead, and counts the most LUT levels on any register-to-register path of its netlist (bench/compute_timing.py
``levels``): the DRAM arbitration chain from one module through the arbiter and the master to another is such a
path when nothing registers it. About 5-10 minutes on a busy 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def build_top(bus_bits: int = 64):
    """The DRAM path of the tree on ``sys.path`` as one Amaranth Elaboratable, every input and output of the
    arbitration and the master behind a register, with the list of its ports (``.ports``)."""
    from amaranth import Elaboratable, Module, Signal
    from amaranth.lib import wiring

    from hardware import axi, dram

    class Top(Elaboratable):
        def __init__(self) -> None:
            self.master = axi.AxiMaster(bus_bits, coherent=True)
            if hasattr(dram, "Skid"):          # readers and the writer on their own arbiters, then the master
                self.arbiters = {"rd": dram.Arbiter((1, 2, 3, 4, 5, 6), bus_bits), "wr": dram.Arbiter((0,), bus_bits)}
            else:                               # one arbiter of seven clients, then the master
                self.arbiters = {"mem": dram.Arbiter(7, bus_bits)}
            self.exposed = [(f"{side}{i}", c) for side, arb in self.arbiters.items()
                            for i, c in enumerate(arb.clients())] + [("axi", self.master.axi)]
            self.wires = []        # (top-level port, register, inner signal, into the inner design?)
            for prefix, port in self.exposed:
                for path, member, value in port.signature.flatten(port):
                    name = prefix + "_" + "_".join(str(p) for p in path)
                    into = member.flow == wiring.In      # driven from outside the arbitration and master
                    self.wires.append((Signal(len(value), name=name), Signal(len(value), name=name + "_q"),
                                       value, into))
            self.ports = [w[0] for w in self.wires]

        def elaborate(self, platform) -> Module:
            m = Module()
            m.submodules.master = self.master
            for side, arb in self.arbiters.items():
                m.submodules[f"arbiter_{side}"] = arb
                wiring.connect(m, arb.mem, getattr(self.master, side))
            for outer, reg, inner, into in self.wires:
                if into:
                    m.d.sync += reg.eq(outer)
                    m.d.comb += inner.eq(reg)
                else:
                    m.d.sync += reg.eq(inner)
                    m.d.comb += outer.eq(reg)
            return m

    return Top()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, default=HERE.parent, help="a checkout whose hardware/ to time")
    ap.add_argument("--core", action="store_true", help="the whole 1x4x4 core at COMPUTE_LATENCY 9, every path")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if not args.child:       # run with the tree's hardware/ first on the path, the timing code from here
        env = {**os.environ, "PYTHONPATH": f"{args.tree.resolve()}{os.pathsep}{HERE.parent}"}
        child = [sys.executable, __file__, "--child", "--tree", str(args.tree)] + (["--core"] if args.core else [])
        sys.exit(subprocess.run(child, check=False, env=env).returncode)
    from amaranth.back import rtlil

    from hardware.fpga.resources import TOP
    from hardware.fpga.synth import run_script
    from hardware.fpga.timing import parse_sta, xilinx_sta_script

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.core:
            from hardware.core import VTACore
            from hw_config import load_config

            tiny = {"LOG_BATCH": 0, "LOG_BLOCK": 2, "LOG_BUS_WIDTH": 6, "LOG_UOP_BUFF_SIZE": 10, "LOG_INP_BUFF_SIZE": 8,
                    "LOG_WGT_BUFF_SIZE": 9, "LOG_ACC_BUFF_SIZE": 10, "INSN_QUEUE_DEPTH": 4, "TOKEN_QUEUE_DEPTH": 2,
                    "COMPUTE_LATENCY": 9}
            text = rtlil.convert(VTACore(load_config("pynq", **tiny)), name=TOP)
            what = "the whole 1x4x4 core at COMPUTE_LATENCY 9"
        else:
            top = build_top()
            text = rtlil.convert(top, name=TOP, ports=top.ports)
            what = "the DRAM path (hardware/dram.py, hardware/axi.py), pynq's 64-bit bus, 7 clients"
        (work / "design.il").write_text(text)
        script = xilinx_sta_script("xc7").replace("read_verilog vta_core.v", "read_rtlil design.il")
        script = script.replace("tee -q -o stat.json stat -json", "tee -q -o stat.json stat -json\nwrite_json netlist.json")
        seconds = run_script(work, script)
        path = parse_sta((work / "sta.txt").read_text())
        netlist = json.loads((work / "netlist.json").read_text())
    from compute_timing import levels

    import hardware.dram

    print(f"# {what}, from {Path(hardware.dram.__file__).parents[1]}")
    print(f"Yosys synth_xilinx -family xc7 -flatten + sta, logic delays only, no routing ({seconds:.0f} s)")
    print(f"longest path: {path.delay_ns:.2f} ns, {path.lut_levels} LUT levels; from {path.start} to {path.end_text}")
    kinds: dict[str, int] = {}
    for s in path.combinational:
        kinds[s.type] = kinds.get(s.type, 0) + 1
    print("cells crossed: " + ", ".join(f"{k} x{v}" for k, v in sorted(kinds.items())))
    luts, dsps = levels(netlist, TOP)
    print(f"over every register-to-register path: at most {luts} LUT levels, {dsps} DSP48E1 in series")


if __name__ == "__main__":
    main()
